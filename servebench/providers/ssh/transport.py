"""The run's ssh connections: one OpenSSH master per host, every command multiplexed over it.

A new connection costs ~0.3 s (key exchange, authentication) and a command over an open master
well under 0.01 s (docs/ssh-provider.md): the provider polls processes and runs many short
commands, so every call goes through the master (`ControlMaster auto`). The masters' sockets, the
run's ssh_config and its known_hosts live in a private directory of their own (mode 0700, a
short path: a socket path has ~100 bytes at most).
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import threading
from pathlib import Path

import psutil

from servebench.providers.remote import DEFAULT_TIMEOUT_S, CommandChannel
from servebench.providers.ssh.argv import control_argv, ssh_argv, ssh_config_text
from servebench.providers.ssh.spec import SshProviderSpec
from servebench.waiting import poll

SSH_FAILED = 255  # ssh's own failures (connection, authentication) exit with 255


class SshError(RuntimeError):
    """ssh could not reach a host, or a command servebench needs failed there."""


def control_dir_for(run_id: str) -> Path:
    """Short on purpose: `<dir>/<40 hex digits>` must fit a Unix socket path (~104 bytes)."""
    base = os.environ.get("TMPDIR") or "/tmp"
    return Path(base if len(base) <= 40 else "/tmp") / f"sb-ssh-{run_id}"


def known_hosts_file(spec: SshProviderSpec, control_dir: Path) -> Path:
    """The host keys ssh checks: the campaign's file, else the user's own; a run-private file only where the
    campaign trusts new hosts on first use and names none."""
    if spec.known_hosts:
        return spec.known_hosts.expanduser().resolve()
    if spec.host_keys == "accept-new":
        return control_dir / "known_hosts"
    return Path("~/.ssh/known_hosts").expanduser()


class SshTransport:
    """Runs commands on the hosts of one run over multiplexed connections."""

    def __init__(self, spec: SshProviderSpec, run_id: str):
        self.spec = spec
        self.control_dir = control_dir_for(run_id)
        self.config = self.control_dir / "config"
        self.known_hosts = known_hosts_file(spec, self.control_dir)
        self._lock = threading.Lock()

    def prepare(self) -> None:
        """Make the private directory and write the run's ssh_config (once)."""
        with self._lock:
            if self.config.exists():
                return
            self.control_dir.mkdir(mode=0o700)  # fails if someone else made it: never reuse another's sockets
            self.config.write_text(ssh_config_text(self.spec, self.control_dir, self.known_hosts))

    def describe(self, host: str) -> str:
        """`h2 (root@198.18.0.2:22)`, for error messages."""
        spec = next((h for h in self.spec.hosts if h.name == host), None)
        return f"{host} ({spec.user}@{spec.address}:{spec.port})" if spec else host

    def ssh(self, host: str, remote: str, timeout: float | None = DEFAULT_TIMEOUT_S, input: str | None = None,
            stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
        """One remote command string over the host's master; output captured as text."""
        self.prepare()
        return subprocess.run(ssh_argv(self.config, host, remote), input=input, stdout=stdout,
                              stderr=subprocess.PIPE, text=True, timeout=timeout,
                              stdin=None if input is not None else subprocess.DEVNULL)

    def master_running(self, host: str) -> bool:
        if not self.config.exists():
            return False
        return subprocess.run(control_argv(self.config, host, "check"), capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=10).returncode == 0

    def master_pids(self) -> list[int]:
        """Local ssh processes of this run (masters show `ssh: <control dir>/<hash> [mux]`)."""
        marker = str(self.control_dir) + "/"
        found = []
        for proc in psutil.process_iter(["cmdline", "status"]):
            if proc.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(proc.info["cmdline"] or []):
                found.append(proc.pid)
        return found

    def close(self) -> list[int]:
        """Ask every master to exit, then stop by PID any ssh of this run still running; return those PIDs."""
        if self.config.exists():
            for host in self.spec.hosts:
                subprocess.run(control_argv(self.config, host.name, "exit"), capture_output=True,
                               stdin=subprocess.DEVNULL, timeout=10)
        leftovers = _wait_gone(self.master_pids(), 2.0)
        for pid in leftovers:
            _signal(pid, signal.SIGKILL)
        _wait_gone(leftovers, 2.0)
        self._remove_files()
        return leftovers

    def _remove_files(self) -> None:
        if not self.control_dir.exists():
            return
        for path in self.control_dir.iterdir():
            path.unlink(missing_ok=True)
        self.control_dir.rmdir()


class SshChannel(CommandChannel):
    """The ssh provider's channel: argv, shell-quoted, over the host's master (the remote side
    parses one command string with the login shell: `shlex.join` gives back every argument)."""

    error = SshError

    def __init__(self, transport: SshTransport):
        self.transport = transport

    def run(self, host: str, argv: list[str], timeout: float | None = DEFAULT_TIMEOUT_S, input: str | None = None,
            stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
        return self.transport.ssh(host, shlex.join(argv), timeout=timeout, input=input, stdout=stdout)

    def pipe_argv(self, host: str, argv: list[str]) -> list[str]:
        return ssh_argv(self.transport.config, host, shlex.join(argv))

    def describe(self, host: str) -> str:
        return self.transport.describe(host)

    def unreachable(self, result: subprocess.CompletedProcess) -> str | None:
        return "ssh failed" if result.returncode == SSH_FAILED else None


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    """The PIDs still running (not zombies) after up to `seconds`."""
    return poll(lambda: [pid for pid in pids if psutil.pid_exists(pid) and _not_zombie(pid)], seconds,
                interval_s=0.05, until=lambda left: not left)


def _not_zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
