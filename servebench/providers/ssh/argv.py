"""The ssh provider's command lines and remote scripts, built without touching anything (pure).

Every remote command is a string the node's login shell parses, so every piece of it is
quoted here with `shlex`; scripts that need more than one command run under `sh -c` so they
do not depend on the user's login shell. Kept apart from the side effects so it is unit-tested
without a host.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from servebench.cpus import format_cpu_list
from servebench.providers.ssh.spec import SshJumpSpec, SshProviderSpec

CONTROL_PERSIST_S = 300  # an idle master outlives a crashed orchestrator by this much, no more
SERVER_ALIVE_S = 15
RUN_ID_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")

# Runs a function of a stdlib-only source file on the node: stdin is one JSON line
# {"file", "call", "kwargs"} then the source; stdout is the function's result as JSON.
BOOTSTRAP = """\
import json, sys
request = json.loads(sys.stdin.readline())
scope = {"__name__": "servebench_node"}
exec(compile(sys.stdin.read(), request["file"], "exec"), scope)
json.dump(scope[request["call"]](**request["kwargs"]), sys.stdout)
"""

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


def check_run_id(run_id: str) -> str:
    """The run id goes into paths on every node and into `rm -rf`: lowercase letters and digits only."""
    if not 4 <= len(run_id) <= 32 or set(run_id) - RUN_ID_CHARS:
        raise ValueError(f"run id {run_id!r}: give 4-32 lowercase letters or digits")
    return run_id


def remote_run_dir(remote_dir: str, run_id: str) -> str:
    """The run's directory on every node: logs and exit codes of the processes it starts."""
    return f"{remote_dir.rstrip('/') or ''}/servebench-{check_run_id(run_id)}"


def jump_alias(host_name: str) -> str:
    return f"{host_name}--jump"


def ssh_config_text(spec: SshProviderSpec, control_dir: Path, known_hosts: Path) -> str:
    """The run's own ssh_config: one block per host (and jump host), then settings for all.

    ssh takes the first value it reads for each option, so the hosts' own fields come first,
    the run's settings next and a user's `ssh_config` (if any) last: it can add, not override.
    """
    lines = [f"# servebench ssh provider: ssh -F {control_dir / 'config'} <host>"]
    for host in spec.hosts:
        lines += _host_block(host.name, host.address, host.user, host.port, host.key)
        if host.jump:
            lines.append(f"  ProxyJump {jump_alias(host.name)}")
            lines += _jump_block(host.name, host.jump)
    strict = "yes" if spec.known_hosts else "accept-new"
    lines += [
        "Host *",
        "  BatchMode yes",
        f"  StrictHostKeyChecking {strict}",
        f"  UserKnownHostsFile {known_hosts}",
        "  ControlMaster auto",
        f"  ControlPath {control_dir}/%C",
        f"  ControlPersist {CONTROL_PERSIST_S}",
        f"  ConnectTimeout {spec.connect_timeout_s}",
        f"  ServerAliveInterval {SERVER_ALIVE_S}",
        "  ServerAliveCountMax 3",
        "  ClearAllForwardings yes",
        "  ForwardAgent no",
        "  RequestTTY no",
        "  LogLevel ERROR",
    ]
    if spec.ssh_config:
        lines.append(f"  Include {spec.ssh_config.expanduser().resolve()}")
    return "\n".join(lines) + "\n"


def _host_block(alias: str, address: str, user: str, port: int, key: Path | None) -> list[str]:
    block = [f"Host {alias}", f"  HostName {address}", f"  User {user}", f"  Port {port}"]
    if key:
        block += [f"  IdentityFile {key.expanduser().resolve()}", "  IdentitiesOnly yes"]
    return block


def _jump_block(host_name: str, jump: SshJumpSpec) -> list[str]:
    """The jump connection is not multiplexed itself: it lives inside the host's master."""
    return _host_block(jump_alias(host_name), jump.address, jump.user, jump.port, jump.key) + [
        "  ControlMaster no", "  ControlPath none"]


def ssh_argv(config: Path, host: str, remote: str | None = None, options: tuple[str, ...] = ()) -> list[str]:
    """`ssh -F <run config> [options] -- <host> [remote command string]`."""
    return ["ssh", "-F", str(config), *options, "--", host] + ([remote] if remote is not None else [])


def control_argv(config: Path, host: str, operation: str) -> list[str]:
    """Ask a host's master connection: `check` (is it up?) or `exit` (close it)."""
    return ["ssh", "-F", str(config), "-O", operation, "--", host]


def sh_command(script: str, *args: str) -> str:
    """A remote command string that runs script under sh with args, whatever the login shell."""
    return shlex.join(["sh", "-c", script, "sh", *args])


def env_argv(env: dict[str, str], unset: list[str] | tuple[str, ...] = ()) -> list[str]:
    """`env -u NAME ... NAME=VALUE ...`: the process's environment is the login environment,
    less `unset`, plus `env` (nothing of the orchestrator's own environment crosses over)."""
    for name in [*env, *unset]:
        if not name or "=" in name or "\0" in name:
            raise ValueError(f"bad environment variable name {name!r}")
    argv = ["env"]
    for name in unset:
        argv += ["-u", name]
    return argv + [f"{name}={value}" for name, value in env.items()]


def pinned_argv(cpus: list[int], argv: list[str]) -> list[str]:
    """taskset keeps every thread of the process (and its children) on the node's CPUs."""
    return ["taskset", "-c", format_cpu_list(cpus), *argv]


@dataclass(frozen=True)
class RemoteFiles:
    """Where one started process keeps its output and exit status on its node."""

    log: str
    exit: str


def remote_files(run_dir: str, sequence: int, log_name: str) -> RemoteFiles:
    safe = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in log_name) or "process"
    base = f"{run_dir}/{sequence:03d}-{safe.removesuffix('.log') or 'process'}"
    return RemoteFiles(log=base + ".log", exit=base + ".exit")


def start_script(run_dir: str, files: RemoteFiles, argv: list[str]) -> str:
    """Makes the run directory, starts argv in a new session under the wrapper (stdin from
    /dev/null, output to the node's log file) and prints `PID START_TICKS` of the session leader.

    The background job is not a group leader, so `setsid` makes the session in place: `$!`
    is the leader's PID, which is also the process group id (and stays so across the exec).
    """
    wrapped = shlex.join(["setsid", "sh", "-c", WRAPPER, "sh", files.exit, *argv])
    return "\n".join([
        "umask 077",
        f"mkdir -p {shlex.quote(run_dir)} || exit 1",
        f"{wrapped} </dev/null >{shlex.quote(files.log)} 2>&1 &",
        "p=$!",
        "s=$(sed 's/.*) //' \"/proc/$p/stat\")",
        "set -- $s",
        'echo "$p ${20}"',
    ])


def parse_started(stdout: str) -> tuple[int, int]:
    """(pid, start ticks) from the start script's output."""
    fields = stdout.split()
    if len(fields) != 2 or not all(f.isdigit() for f in fields):
        raise ValueError(f"the start script printed {stdout!r}, not 'PID START_TICKS'")
    return int(fields[0]), int(fields[1])


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
