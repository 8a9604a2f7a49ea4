"""What providers of remote nodes (ssh, slurm) share: the run's id and directory on each
node, how a process's environment and CPUs are set there (`env`, `taskset`), the files a
started process leaves (PID, exit code, log), and the status script's answer."""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from servebench.cpus import format_cpu_list
from servebench.providers.base import Node

BOOTSTRAP = """\
import json, sys
request = json.loads(sys.stdin.readline())
scope = {"__name__": "servebench_node"}
exec(compile(sys.stdin.read(), request["file"], "exec"), scope)
json.dump(scope[request["call"]](**request["kwargs"]), sys.stdout)
"""


RUN_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


STATUS_SCRIPT = """\
p=$1; t=$2; e=$3
if [ -e "$e" ]; then echo "exit $(cat "$e")"; exit 0; fi
s=$(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null) || s=
if [ -n "$s" ]; then
  set -- $s
  if [ "$1" != Z ] && [ "$1" != X ] && [ "${20}" = "$t" ]; then echo alive; exit 0; fi
fi
if [ -e "$e" ]; then echo "exit $(cat "$e")"; else echo gone; fi
"""


def parse_status(stdout: str) -> tuple[bool, int | None]:
    """(alive, exit code) from the status script's output."""
    text = stdout.strip()
    if text == "alive":
        return True, None
    if text.startswith("exit "):
        code = text[5:].strip()
        return False, int(code) if code.lstrip("-").isdigit() else None
    if text == "gone":
        return False, None
    raise ValueError(f"the status script printed {stdout!r}")


def pinned_argv(cpus: list[int], argv: list[str]) -> list[str]:
    """taskset keeps every thread of the process (and its children) on the node's CPUs."""
    return ["taskset", "-c", format_cpu_list(cpus), *argv]


@dataclass(frozen=True)
class RemoteFiles:
    """Where one started process keeps its PID, exit status and output on its node."""

    pid: str
    exit: str
    log: str


def check_run_id(run_id: str) -> str:
    """The run id goes into paths on every node, into `rm -rf` and into job names: lowercase letters and digits only."""
    if not 4 <= len(run_id) <= 32 or set(run_id) - RUN_ID_CHARS:
        raise ValueError(f"run id {run_id!r}: give 4-32 lowercase letters or digits")
    return run_id


def env_argv(env: dict[str, str], unset: list[str] | tuple[str, ...] = ()) -> list[str]:
    """`env -u NAME ... NAME=VALUE ...` (values go through as arguments: commas and spaces are safe)."""
    for name in [*env, *unset]:
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"bad environment variable name {name!r}")
    argv = ["env"]
    for name in unset:
        argv += ["-u", name]
    return argv + [f"{name}={value}" for name, value in env.items()]


def remote_files(run_dir: str, sequence: int, log_name: str) -> RemoteFiles:
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in log_name) or "process"
    base = f"{run_dir}/{sequence:03d}-{safe.removesuffix('.log') or 'process'}"
    return RemoteFiles(pid=base + ".pid", exit=base + ".exit", log=base + ".log")


def remote_run_dir(remote_dir: str, run_id: str) -> str:
    """The run's directory on every node: PIDs, exit codes and logs of the processes it starts."""
    return f"{remote_dir.rstrip('/') or ''}/servebench-{check_run_id(run_id)}"


# ---------------------------------------------------------------------- files and clocks

PUT_SCRIPT = """\
set -e
target=$1; part="$1.part-$2"
rm -rf "$part"; mkdir -p "$part"
tar -C "$part" -xf -
rm -rf "$target"; mv "$part" "$target"
"""
GET_SCRIPT = 'cd "$1" && tar -cf - .'


def put_tree(pipe_argv: Callable[[list[str]], list[str]], local: Path, remote: str, tag: str,
             timeout: float | None = None, env: dict[str, str] | None = None) -> None:
    """Copy the directory `local` to `remote` on a node: `tar` here, piped into `pipe_argv(argv)`
    (the provider's way to run argv on the node with this side's stdin), unpacked into a scratch
    directory beside `remote` that replaces it only once complete (never a half tree in place)."""
    if not local.is_dir():
        raise FileNotFoundError(f"{local} is not a directory")
    remote_argv = pipe_argv(["sh", "-c", PUT_SCRIPT, "sh", remote, tag])
    with subprocess.Popen(["tar", "-C", str(local), "-cf", "-", "."], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE) as packer:
        unpack = subprocess.run(remote_argv, stdin=packer.stdout, capture_output=True, timeout=timeout, env=env)
        packer.stdout.close()
        packer.wait(timeout=30)
    if packer.returncode != 0 or unpack.returncode != 0:
        raise RuntimeError(f"copying {local} to {remote}: tar here exit {packer.returncode}, on the node exit "
                           f"{unpack.returncode}: {(unpack.stderr or b'').decode(errors='replace').strip()[-1500:]}")


def get_tree(pipe_argv: Callable[[list[str]], list[str]], remote: str, local: Path,
             timeout: float | None = None, env: dict[str, str] | None = None) -> bool:
    """Copy a node's directory `remote` into `local` (made if needed); False if it is not there."""
    local.mkdir(parents=True, exist_ok=True)
    with subprocess.Popen(pipe_argv(["sh", "-c", GET_SCRIPT, "sh", remote]), stdout=subprocess.PIPE,
                          stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env) as packer:
        unpack = subprocess.run(["tar", "-C", str(local), "-xf", "-"], stdin=packer.stdout, capture_output=True,
                                timeout=timeout)
        packer.stdout.close()
        packer.wait(timeout=30)
    return packer.returncode == 0 and unpack.returncode == 0


def clock_offset(read_clock: Callable[[], float], rounds: int = 5) -> float:
    """Seconds the node's wall clock is ahead of this host's: each round reads the node's clock
    between two local readings; the round with the shortest round trip wins (its midpoint is
    the best-bounded guess, within half that round trip)."""
    best: tuple[float, float] | None = None
    for _ in range(rounds):
        before = time.time()
        remote = read_clock()
        after = time.time()
        if best is None or after - before < best[0]:
            best = (after - before, remote - (before + after) / 2)
    return best[1]


def under_any(path: str, roots: list[str]) -> bool:
    """Whether `path` lies in one of the directory trees `roots` (a declared shared file system)."""
    target = Path(path)
    return any(target == Path(root) or Path(root) in target.parents for root in roots)


# ---------------------------------------------------------------------- links of testbed hosts

class TestbedHostLinks:
    """LINK_SHAPING for nodes that are hosts of the project's testbed (docs/testbed.md): the
    orchestrator sets the link's delay line and shaper on the testbed's switch, or takes the
    node's switch port down, by the node's address. A node that is not a host of that testbed
    is refused, naming the testbed's hosts."""

    __test__ = False  # not a pytest class (its name begins with Test)

    def shape_link(self, testbed: str, node: Node, delay_ms: float, rate_mbit: float | None) -> dict:
        from servebench.testbed.links import set_link

        layout, host = testbed_host(testbed, node)
        return set_link(layout, host, delay_ms, rate_mbit)

    def connect_node(self, testbed: str, node: Node, connected: bool) -> str:
        from servebench.testbed.links import connect_host

        layout, host = testbed_host(testbed, node)
        return connect_host(layout, host, connected)


def testbed_host(testbed: str, node: Node):
    """(the testbed's layout, its host at the node's address)."""
    from servebench.testbed import load

    layout = load(testbed)
    for host in layout.hosts:
        if host.address == node.address:
            return layout, host
    raise ValueError(f"node {node.name} ({node.address or 'no address'}) is not a host of testbed {testbed} "
                     f"(its hosts: {', '.join(f'{h.name} {h.address}' for h in layout.hosts)})")
