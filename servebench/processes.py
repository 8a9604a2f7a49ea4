"""Long-lived processes servebench starts, and how it stops every one of them.

Each process starts in its own session, so its process group holds everything it forks;
stopping sends SIGTERM to that group, waits, then SIGKILLs the group and any descendant
that moved to another group, each by PID. Shared-memory segments vLLM leaves in /dev/shm
are removed by comparing the directory before and after. Never `pkill` or `ray stop`:
other runs may share the host.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import psutil

from servebench.waiting import poll

SHM_DIR = Path("/dev/shm")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def run_here(argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
    """A short command on this host, its output captured (no terminal input)."""
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def shm_entries() -> set[str]:
    try:
        return set(os.listdir(SHM_DIR))
    except FileNotFoundError:
        return set()


def shm_in_use() -> set[str]:
    """/dev/shm entries some live process maps or holds open (read from /proc)."""
    used: set[str] = set()
    prefix = str(SHM_DIR) + "/"
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    at = line.find(prefix)
                    if at >= 0:
                        used.add(line[at + len(prefix):].split()[0])
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith(prefix):
                    used.add(target[len(prefix):].split()[0])
        except (FileNotFoundError, PermissionError, ProcessLookupError, NotADirectoryError):
            continue
    return used


def remove_shm_created_since(before: set[str]) -> list[str]:
    """Remove /dev/shm entries that appeared since `before` and no live process uses; return their names.

    A segment still mapped by a process belongs to someone else's running server.
    """
    removed = []
    for name in sorted(shm_entries() - before - shm_in_use()):
        try:
            (SHM_DIR / name).unlink()
            removed.append(name)
        except FileNotFoundError:
            continue
        except IsADirectoryError:
            continue
    return removed


PR_SET_PDEATHSIG = 1


def _term_when_parent_dies() -> None:
    """In the child, before exec: Linux's parent-death signal (prctl PR_SET_PDEATHSIG)."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class ManagedProcess:
    """A started process and what is needed to stop it and everything it spawned."""

    argv: list[str]
    pid: int
    log_path: Path | None
    popen: subprocess.Popen = field(repr=False)
    started_monotonic: float = field(default_factory=time.monotonic)
    known_descendants: set[int] = field(default_factory=set)

    @classmethod
    def start(cls, argv: list[str], env: dict[str, str] | None = None, log_path: Path | None = None,
              cwd: Path | None = None, die_with_parent: bool = False) -> "ManagedProcess":
        """`die_with_parent`: the kernel sends it SIGTERM when the thread that started it ends (for
        helpers of the orchestrator itself, started from its main thread, that nothing else would
        stop if it were SIGKILLed)."""
        out: IO[bytes] | None = open(log_path, "ab") if log_path else None
        try:
            popen = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL if out is None else out,
                                     stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                     preexec_fn=_term_when_parent_dies if die_with_parent else None)
        finally:
            if out is not None:
                out.close()
        return cls(argv=argv, pid=popen.pid, log_path=log_path, popen=popen)

    def alive(self) -> bool:
        return self.popen.poll() is None

    def fetch_log(self) -> None:
        """The log is written to log_path directly: nothing to fetch."""

    def exit_code(self) -> int | None:
        return self.popen.poll()

    def remember_descendants(self) -> None:
        """Note the current children: a child that left the process group is still stopped by PID."""
        try:
            self.known_descendants |= {p.pid for p in psutil.Process(self.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            pass

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM the group, wait up to grace_s, then SIGKILL the group and every known descendant."""
        self.remember_descendants()
        self.known_descendants |= _group_members(self.pid)  # one scan of /proc, not one per poll
        self._signal_group(signal.SIGTERM)
        self._signal_group(signal.SIGCONT)  # a stopped (hung) process handles its SIGTERM only once continued
        poll(self._gone, grace_s, interval_s=0.1)
        survivors = self._survivors()
        if survivors:
            self._signal_group(signal.SIGKILL)
            for proc in survivors:
                try:
                    proc.kill()
                except psutil.NoSuchProcess:
                    pass
            psutil.wait_procs(survivors, timeout=5)
        try:
            return self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return None

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)  # the leader's pid is the group id (start_new_session)
        except (ProcessLookupError, PermissionError):
            pass

    def _gone(self) -> bool:
        self.popen.poll()  # the leader reaped as soon as it ends
        return not self._survivors()

    def _survivors(self) -> list[psutil.Process]:
        pids = {self.pid} | self.known_descendants
        alive = []
        for pid in pids:
            try:
                proc = psutil.Process(pid)
                if proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.NoSuchProcess:
                continue
        return alive


def _group_members(pgid: int) -> set[int]:
    members = set()
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.info["pid"]) == pgid:
                members.add(proc.info["pid"])
        except (ProcessLookupError, PermissionError):
            continue
    return members
