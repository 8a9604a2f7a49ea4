"""What providers of remote nodes share: the node methods of the Provider interface, written once
over a *channel* (how a command reaches a node: an OpenSSH connection, a Slurm step, `kubectl
exec`...), so such a provider is a channel plus an allocation (`RemoteNodes`); the processes
started through a channel (`RemoteProcess`); the run's id and directory on each node, how a
process's environment and CPUs are set there (`env`, `taskset`), the files a started process
leaves (PID, exit code, log), the start and status scripts."""

from __future__ import annotations

import json
import re
import secrets
import shlex
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Sequence, cast

from servebench.cpus import format_cpu_list
from servebench.providers import inventory as inventory_module
from servebench.providers import node_tools
from servebench.providers.base import LINK_SHAPING, Node, Provider
from servebench.providers.fanout import hosts_at_once, outcomes

NODE_TOOLS = Path(node_tools.__file__)
INVENTORY = Path(inventory_module.__file__)
DEFAULT_TIMEOUT_S = 60.0
LEFTOVER_GRACE_S = 5.0
KILLED_EXIT = 128 + 9  # the shell's status for SIGKILL: what the wrapper would have written
STOP_SLACK_S = 30.0    # a stop's command may take grace_s, the KILL wait and the channel's own time

BOOTSTRAP = """\
import json, sys
request = json.loads(sys.stdin.readline())
scope = {"__name__": "servebench_node"}
exec(compile(sys.stdin.read(), request["file"], "exec"), scope)
json.dump(scope[request["call"]](**request["kwargs"]), sys.stdout)
"""


RUN_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")


# The wrapper a started process runs under (argv: exit file, then the command). It stays the
# session leader so the process group is the run's, records the command's exit status when it
# ends (a caught TERM/INT waits for the command, then the status is still written; the
# command itself gets default dispositions back at exec), and writes it atomically.
WRAPPER = 'e=$1; shift; trap : TERM INT; "$@"; c=$?; echo "$c" >"$e.tmp"; mv -f "$e.tmp" "$e"'

# Prints `exit N`, `alive` or `gone` for (pid, start ticks, exit file). Reads /proc rather than
# `kill -0`: a zombie (an orphan where PID 1 does not reap) and a reused PID both pass `kill -0`.
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


SESSION_WAIT_STEPS = 500  # 5 s


def start_script(run_dir: str, files: "RemoteFiles", argv: list[str]) -> str:
    """Makes the run directory, starts argv in a new session under the wrapper (stdin from
    /dev/null, output to the node's log file) and prints `PID START_TICKS` of the session leader.

    The background job is not a group leader, so `setsid` makes the session in place: `$!`
    is the leader's PID, which is also the process group id (and stays so across the exec).
    The script prints once the job has made its session (its group id is its PID; at most
    SESSION_WAIT_STEPS of 10 ms: a busy host may not have run the forked job yet), so a stop
    right after the start finds the group. A job that has already ended may have been reaped by
    the shell (dash reaps any child while it waits for `sleep`), so its /proc entry is gone: the
    script then prints start ticks 0, which match no live process, and the exit file the wrapper
    wrote says how it ended. Its output goes to the log, not to the channel: the command that
    ran the script returns at once.
    """
    wrapped = shlex.join(["setsid", "sh", "-c", WRAPPER, "sh", files.exit, *argv])
    return "\n".join([
        "umask 077",
        f"mkdir -p {shlex.quote(run_dir)} || exit 1",
        f"{wrapped} </dev/null >{shlex.quote(files.log)} 2>&1 &",
        "p=$!",
        "i=0",
        "while :; do",
        '  read -r s 2>/dev/null </proc/$p/stat || { echo "$p 0"; exit 0; }',
        '  set -- ${s##*") "}',   # state, ppid, pgrp, ..., start ticks (the 20th)
        f'  [ "$3" = "$p" ] || [ $i -ge {SESSION_WAIT_STEPS} ] && break',
        "  i=$((i + 1)); sleep 0.01",
        "done",
        'echo "$p ${20}"',
    ])


def parse_started(stdout: str) -> tuple[int, int]:
    """(pid, start ticks) from the start script's output."""
    fields = stdout.split()
    if len(fields) != 2 or not all(f.isdigit() for f in fields):
        raise ValueError(f"the start script printed {stdout!r}, not 'PID START_TICKS'")
    return int(fields[0]), int(fields[1])


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


# ---------------------------------------------------------------------- the site's setup on every node

PRELUDE_NAME = "prelude.sh"
SETUP_FAILED_EXIT = 125
# A node's PATH where the login node's is not exported (a Slurm step with `export:` other than all).
DEFAULT_NODE_PATH = "/usr/local/bin:/usr/bin:/bin"
# Sources the prelude (argv: its path, then the command), then execs the command: the command keeps the PID.
PRELUDE_RUNNER = f'. "$1" || exit {SETUP_FAILED_EXIT}; shift; exec "$@"'
# Writes stdin to a file of the run's directory, mode 0600, atomically (argv: run dir, file).
PRELUDE_WRITER = 'umask 077; mkdir -p "$1" && cat >"$2.tmp" && mv -f "$2.tmp" "$2"'


def setup_script(setup: Sequence[str], env: dict[str, str] | None = None) -> str:
    """Shell text that gives PATH a default if it has none, runs each `setup` line in order (a line that
    fails ends the shell with exit 125, the line named on stderr), then exports `env` (values quoted:
    read as text, never run)."""
    lines = [f'PATH="${{PATH:-{DEFAULT_NODE_PATH}}}"; export PATH']
    for number, line in enumerate(setup, 1):
        said = shlex.quote(f"servebench: provider.setup line {number} failed: {line}")
        lines += [line, f"[ $? -eq 0 ] || {{ printf '%s\\n' {said} >&2; exit {SETUP_FAILED_EXIT}; }}"]
    for name, value in (env or {}).items():
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name):
            raise ValueError(f"bad environment variable name {name!r}")
        lines.append(f"{name}={shlex.quote(value)}; export {name}")
    return "\n".join(lines) + "\n"


def prelude_text(setup: Sequence[str], env: dict[str, str]) -> str:
    """The run's prelude on a node: what every command that starts a program there sources first."""
    return "# servebench: the campaign's provider.setup and provider.env\n" + setup_script(setup, env)


def prelude_argv(prelude: str, argv: list[str]) -> list[str]:
    """argv run after sourcing the node's prelude file (its path only on the command line, no value)."""
    return ["sh", "-c", PRELUDE_RUNNER, "sh", prelude, *argv]


def inline_setup_argv(setup: Sequence[str], argv: list[str], shell: str = "sh") -> list[str]:
    """argv after the setup lines, in one `sh -c` (no file: a local node, or a step before the run's
    directory exists); no environment values on it. argv as is without setup lines."""
    if not setup:
        return list(argv)
    return [shell, "-c", setup_script(setup) + 'exec "$@"', "sh", *argv]


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
        assert packer.stdout is not None  # started with stdout=PIPE
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
        assert packer.stdout is not None  # started with stdout=PIPE
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
    if best is None:
        raise ValueError(f"clock_offset needs at least one round, not {rounds}")
    return best[1]


def under_any(path: str, roots: list[str]) -> bool:
    """Whether `path` lies in one of the directory trees `roots` (a declared shared file system)."""
    target = Path(path)
    return any(target == Path(root) or Path(root) in target.parents for root in roots)


# ---------------------------------------------------------------------- the channel to a node

class CommandChannel:
    """How commands reach the nodes of one run: `run` is the one thing a channel must do (argv on
    the named node, this side's stdin and stdout, the command's exit code), `pipe_argv` the local
    command line that does it (for streams: `put_tree`, `get_tree`). The rest is built on them."""

    error: ClassVar[type[Exception]] = RuntimeError   # what a command that must succeed raises

    @property
    def pipe_env(self) -> dict[str, str] | None:
        """The environment `pipe_argv`'s command needs (None: this process's own)."""
        return None

    def run(self, host: str, argv: list[str], timeout: float | None = DEFAULT_TIMEOUT_S, input: str | None = None,
            stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
        """argv on the node (no shell between: every argument arrives as given); output as text."""
        raise NotImplementedError

    def pipe_argv(self, host: str, argv: list[str]) -> list[str]:
        """The command line, run here, that runs argv on the node with this side's stdin and stdout."""
        raise NotImplementedError

    def describe(self, host: str) -> str:
        """The node as an error message names it."""
        return host

    def unreachable(self, result: subprocess.CompletedProcess) -> str | None:
        """Why a failed command did not reach the node (e.g. "ssh failed"), or None: the command's own failure."""
        return None

    def checked(self, host: str, argv: list[str], what: str, timeout: float | None = DEFAULT_TIMEOUT_S,
                input: str | None = None) -> str:
        """stdout of a command that must succeed; `error` naming the node and the cause if not."""
        result = self.run(host, argv, timeout=timeout, input=input)
        if result.returncode != 0:
            cause = self.unreachable(result) or f"exit {result.returncode}"
            raise self.error(f"{what} on {self.describe(host)}: {cause}: {(result.stderr or '').strip()[-2000:]}")
        return result.stdout

    def call(self, host: str, source: Path, function: str, python: str, timeout: float | None = DEFAULT_TIMEOUT_S,
             argv_prefix: Sequence[str] = (), **kwargs) -> object:
        """Call a function of a stdlib-only source file on the node with its python (after `argv_prefix`:
        the run's prelude); its JSON result (the source is sent on stdin: nothing of servebench is installed there)."""
        request = json.dumps({"file": source.name, "call": function, "kwargs": kwargs})
        out = self.checked(host, [*argv_prefix, python, "-c", BOOTSTRAP], f"{source.stem}.{function}",
                           timeout=timeout, input=request + "\n" + source.read_text())
        return json.loads(out)

    def copy_from(self, host: str, remote_path: str, local_path: Path, timeout: float = DEFAULT_TIMEOUT_S) -> bool:
        """Copy a file from the node (`cat` through the channel: no second protocol); False if it is not there."""
        local_path.parent.mkdir(parents=True, exist_ok=True)
        partial = local_path.with_name(local_path.name + ".part")
        try:
            with open(partial, "w") as out:
                result = self.run(host, ["cat", "--", remote_path], timeout=timeout, stdout=out)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        if result.returncode != 0:
            partial.unlink(missing_ok=True)
            if self.unreachable(result):
                raise self.error(f"copying {remote_path} from {self.describe(host)}: {(result.stderr or '').strip()}")
            return False
        partial.replace(local_path)
        return True


# ---------------------------------------------------------------------- a process started through a channel

@dataclass
class RemoteProcess:
    """A long-lived process on a node, started by `start_script` through a channel: pid is the
    session leader there (the wrapper; the command is its child, same group). Every check and
    signal happens on the node, by PID and start time (`node_tools`); its log is copied to
    `log_path` when it is seen to have ended, when it is stopped, or on demand (`fetch_log`).
    Exit codes follow the shell: a command killed by signal N reports 128+N."""

    node: str
    pid: int
    start_ticks: int                 # /proc/PID/stat start time: tells a reused PID apart
    log_path: Path | None            # the local copy of the node's log
    files: RemoteFiles
    argv: list[str]
    channel: CommandChannel = field(repr=False)
    python: str = "python3"
    mark: str = ""                   # its node_tools.MARK_VARIABLE value: found on the node even unrecorded
    prefix: list[str] = field(default_factory=list)  # what runs the node's python after the run's setup
    started_monotonic: float = field(default_factory=time.monotonic)
    known_descendants: dict[str, int] = field(default_factory=dict)  # pid -> start ticks
    _ended: bool = False
    _exit: int | None = None
    _stopped: bool = False

    def alive(self) -> bool:
        if not self._ended:
            self._poll()
        return not self._ended

    def exit_code(self) -> int | None:
        if not self._ended:
            self._poll()
        return self._exit

    def _poll(self) -> None:
        out = self.channel.checked(self.node, ["sh", "-c", STATUS_SCRIPT, "sh", str(self.pid), str(self.start_ticks),
                                               self.files.exit], "process status")
        alive, code = parse_status(out)
        if not alive:
            self._ended, self._exit = True, code
            self.fetch_log()  # a caller reads the log of a process that ended (why it ended) next

    def remember_descendants(self) -> None:
        """Note what it has spawned so far, on its node: stopped with it even if it left the group."""
        # node_tools.descendants returns {pid: start ticks} as JSON (the PIDs as strings).
        found = cast(dict[str, int], self.channel.call(self.node, NODE_TOOLS, "descendants", self.python,
                                                       argv_prefix=self.prefix, pid=self.pid,
                                                       start=self.start_ticks))
        self.known_descendants |= found

    def fetch_log(self) -> Path | None:
        """Copy the node's log to log_path now (it keeps growing while the process runs)."""
        if self.log_path is None:
            return None
        if not self.channel.copy_from(self.node, self.files.log, self.log_path):
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self.log_path.touch()
        return self.log_path

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM the group on the node, wait up to grace_s, SIGKILL the group, every recorded
        descendant and every process with its mark; copy the log; return the exit code (128+9
        if it had to be killed before its wrapper could record one)."""
        # node_tools.stop_tree returns a JSON object: exit_code, killed (PIDs), targets, left.
        result = cast(dict[str, Any], self.channel.call(
            self.node, NODE_TOOLS, "stop_tree", self.python, timeout=grace_s + STOP_SLACK_S,
            argv_prefix=self.prefix, pid=self.pid,
            start=self.start_ticks, known=self.known_descendants, grace_s=grace_s, exit_path=self.files.exit,
            mark=self.mark))
        code = result["exit_code"]
        if code is None and self.pid in result["killed"]:
            code = KILLED_EXIT
        self._ended, self._stopped = True, True
        self._exit = code if code is not None else self._exit
        self.fetch_log()
        return self._exit

    @property
    def stopped(self) -> bool:
        return self._stopped


# ---------------------------------------------------------------------- the node methods, once

class RemoteNodes(Provider):
    """The node half of the Provider interface for nodes that are other machines, over the
    provider's channel: commands, the node tools (ports, /dev/shm, process trees, inventory) run
    by the node's own python3, files as tar streams, the clock, processes started in a session of
    their own and stopped by PID there, the run's directory on each node removed at release.

    A provider built on it gives the allocation: `__init__` (calling this one's), `nodes`,
    `allocate`, `release`, `reclaim`, `claims`, `allocation_record`, the campaign-block
    classmethods, and `channel()` with `node_host` (which name the channel knows a node by,
    refusing a node that is not the run's). It may override `start` (Slurm: a step of its own)
    and `_before_start` (ssh: a warden on the host). The spec needs `python`, `remote_dir` and
    `shared_paths`. Its nodes are machines of their own, so their links can be shaped
    (LINK_SHAPING) by the link shaper handed to the provider (the testbed's, for testbed hosts)."""

    capabilities: ClassVar[frozenset[str]] = frozenset({LINK_SHAPING})
    node_error: ClassVar[tuple[type[Exception], ...]] = (RuntimeError, subprocess.TimeoutExpired)
    node_gone: ClassVar[tuple[type[Exception], ...]] = ()  # the whole allocation ended: nothing to reach

    def __init__(self, spec, run_id: str | None) -> None:
        self.spec = spec
        self.run_id = check_run_id(run_id or secrets.token_hex(4))
        self.run_dir = remote_run_dir(spec.remote_dir, self.run_id)
        self._started: list = []
        self._sequence = 0
        self._touched: set[str] = set()  # nodes where the run dir may exist
        self._preluded: set[str] = set()  # nodes where the run's prelude is written
        self.prelude = f"{self.run_dir}/{PRELUDE_NAME}"

    def channel(self) -> CommandChannel:
        raise NotImplementedError

    def node_host(self, node: Node) -> str:
        """The name the channel knows the node by; ValueError for a node that is not the run's."""
        raise NotImplementedError

    def needs_prelude(self) -> bool:
        """Whether the nodes' commands source the run's prelude: the campaign gives `setup` or `env`."""
        return bool(self.spec.setup or self.spec.env)

    def prelude_prefix(self, host: str) -> list[str]:
        """What goes before a command that starts a program on the host: the run's prelude sourced,
        written there first (once per host, through stdin: no value on a command line). [] without one."""
        if not self.needs_prelude():
            return []
        if host not in self._preluded:
            self._touched.add(host)
            self.channel().checked(host, ["sh", "-c", PRELUDE_WRITER, "sh", self.run_dir, self.prelude],
                                   "writing the run's provider.setup and provider.env",
                                   input=prelude_text(self.spec.setup, self.spec.env))
            self._preluded.add(host)
        return prelude_argv(self.prelude, [])

    def _call(self, node: Node, source: Path, function: str, timeout: float | None = DEFAULT_TIMEOUT_S, **kwargs):
        host = self.node_host(node)
        return self.channel().call(host, source, function, self.spec.python, timeout=timeout,
                                   argv_prefix=self.prelude_prefix(host), **kwargs)

    # ------------------------------------------------------------------ commands on a node

    def run(self, node: Node, argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
        """argv on the node through the channel (every argument arrives as given); the command's exit code."""
        host = self.node_host(node)
        return self.channel().run(host, self.prelude_prefix(host) + list(argv), timeout=timeout)

    def inventory(self, node: Node) -> dict:
        """servebench.providers.inventory.collect, run by the node's python3 (its source sent over); an
        emulated host (`emulate:`, a testbed host standing for an ARM node) reports its profile's CPU."""
        facts = self._call(node, INVENTORY, "collect", cpus=node.cpus)
        return inventory_module.emulated(facts, node.emulate) if node.emulate else facts

    def free_port(self, node: Node) -> int:
        """A port the node's kernel picks on the node's address (free there, not here)."""
        return int(self._call(node, NODE_TOOLS, "free_port", address=node.address))

    def free_port_range(self, node: Node, size: int) -> int:
        return int(self._call(node, NODE_TOOLS, "free_port_range", address=node.address, size=size))

    def shm_entries(self, node: Node) -> set[str]:
        return set(self._call(node, NODE_TOOLS, "shm_entries"))

    def remove_shm_created_since(self, node: Node, before: set[str]) -> list[str]:
        return self._call(node, NODE_TOOLS, "remove_shm_created_since", before=sorted(before))

    # ------------------------------------------------------------------ files and clocks

    def shares(self, path: str) -> bool:
        """Only under the campaign's `shared_paths` (an NFS home, a cluster's parallel file system)."""
        return under_any(path, self.spec.shared_paths)

    def _pipe(self, node: Node) -> Callable[[list[str]], list[str]]:
        channel, host = self.channel(), self.node_host(node)
        return lambda argv: channel.pipe_argv(host, argv)

    def put_tree(self, node: Node, local: Path, remote: str) -> None:
        pipe = self._pipe(node)
        self._touched.add(self.node_host(node))
        put_tree(pipe, local, remote, self.run_id, env=self.channel().pipe_env)

    def get_tree(self, node: Node, remote: str, local: Path) -> bool:
        return get_tree(self._pipe(node), remote, local, env=self.channel().pipe_env)

    def tree_digest(self, node: Node, path: str) -> str | None:
        return self._call(node, NODE_TOOLS, "tree_digest", timeout=1800, path=path)

    def scratch_dir(self, node: Node) -> str:
        """The run's directory on every node (removed at release)."""
        return self.run_dir

    def node_python(self, node: Node) -> str:
        return self.spec.python

    def clock_offset(self, node: Node) -> float:
        """`date` through the channel, best of 5 round trips (ssh: ~10 ms a round trip, a Slurm step ~35 ms)."""
        channel, host = self.channel(), self.node_host(node)
        return clock_offset(lambda: float(channel.checked(host, ["date", "+%s.%N"], "reading the clock")))

    # ------------------------------------------------------------------ long-lived processes

    def _mark(self, sequence: int) -> str:
        """What every process of this start (and all it spawns) carries in its environment."""
        return f"{self.run_id}.{sequence}"

    def _full_argv(self, node: Node, argv: list[str], env: dict[str, str], unset, sequence: int,
                   prefix: Sequence[str] = ()) -> list[str]:
        """argv after `prefix` (the run's prelude), with the run's TMPDIR, `env` and its mark added and
        `unset` removed, pinned to the node's CPUs."""
        marked = {"TMPDIR": self.run_dir, **env, node_tools.MARK_VARIABLE: self._mark(sequence)}
        return [*prefix, *env_argv(marked, list(unset)), *pinned_argv(node.cpus, list(argv))]

    def planned_prefix(self) -> list[str]:
        """The prelude part of a command line as `plan` shows it (nothing is written for a plan)."""
        return prelude_argv(self.prelude, []) if self.needs_prelude() else []

    def command(self, node: Node, argv: list[str]) -> list[str]:
        """The command line `start` runs for argv (environment aside), as `plan` prints it."""
        files = remote_files(self.run_dir, 0, "process.log")
        script = start_script(self.run_dir, files, self._full_argv(node, argv, {}, (), 0, self.planned_prefix()))
        return self.channel().pipe_argv(self.node_host(node), ["sh", "-c", script, "sh"])

    def _before_start(self, host: str) -> None:
        """What a node needs before the run's first process there (ssh: the run's warden)."""

    def start(self, node: Node, argv: list[str], env: dict[str, str], log_path: Path,
              unset: Sequence[str] = ()) -> RemoteProcess:
        """Start argv on the node in its own session (`start_script`), env added and unset removed
        from the environment the channel gives, output to a log in the run's directory there
        (copied to log_path)."""
        host, channel = self.node_host(node), self.channel()
        self._sequence += 1
        sequence = self._sequence
        files = remote_files(self.run_dir, sequence, Path(log_path).name)
        prefix = self.prelude_prefix(host)
        script = start_script(self.run_dir, files, self._full_argv(node, argv, env, unset, sequence, prefix))
        self._touched.add(host)
        self._before_start(host)
        pid, ticks = parse_started(channel.checked(host, ["sh", "-c", script, "sh"], f"starting {argv[:1]}"))
        process = RemoteProcess(node=host, pid=pid, start_ticks=ticks, log_path=Path(log_path), files=files,
                                argv=list(argv), channel=channel, python=self.spec.python, mark=self._mark(sequence),
                                prefix=prefix)
        self._started.append(process)
        return process

    def stop(self, process, grace_s: float = 20.0) -> int | None:
        return process.stop(grace_s=grace_s)

    # ------------------------------------------------------------------ the end of the run

    def stop_leftovers(self) -> int:
        """Stop every process of this run not yet stopped; return how many there were. Once the
        allocation has ended (`node_gone`) there is nothing to reach on its nodes."""
        left = [p for p in self._started if not p.stopped]
        errors = []

        def stop(process) -> None:
            try:
                process.stop(grace_s=LEFTOVER_GRACE_S)
            except self.node_gone:
                pass

        for outcome in outcomes(left, stop, hosts_at_once(self)):  # each process on its own node's channel
            if isinstance(outcome.error, self.node_error):
                errors.append(f"{outcome.item.node} pid {outcome.item.pid}: {outcome.error}")
                self._stop_failed(outcome.item)
            elif outcome.error is not None:
                raise outcome.error
        if errors:
            raise self.channel_error_class()("could not stop every process of the run:\n  " + "\n  ".join(errors))
        return len(left)

    def _stop_failed(self, process) -> None:
        """What is left to do here for a process that could not be stopped on its node."""

    def channel_error_class(self) -> type[Exception]:
        return self.node_error[0]

    def _clean_nodes(self) -> list[str]:
        """On every node the run touched: stop whatever still carries the run's mark, remove the
        run's directory; the errors, one line each."""
        def clean(host: str) -> None:
            self.channel().call(host, NODE_TOOLS, "stop_marked", self.spec.python,
                                argv_prefix=self.prelude_prefix(host), prefix=f"{self.run_id}.",
                                grace_s=LEFTOVER_GRACE_S)
            self.channel().checked(host, ["rm", "-rf", "--", self.run_dir], "removing the run dir")

        errors = []
        for outcome in outcomes(sorted(self._touched), clean, hosts_at_once(self)):
            if isinstance(outcome.error, self.node_gone):
                continue  # the allocation has ended: nothing is left to reach on its nodes
            if isinstance(outcome.error, self.node_error):
                errors.append(str(outcome.error))
            elif outcome.error is not None:
                raise outcome.error
        self._touched.clear()
        self._preluded.clear()
        return errors
