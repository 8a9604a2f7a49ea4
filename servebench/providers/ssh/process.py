"""A long-lived process on an ssh node: the NodeProcess the ssh provider's `start` returns.

The process runs in its own session on its node under a small sh wrapper that records its exit
status in a file; its output goes to a log file on the node, copied to `log_path` on the
orchestrator when it is seen to have ended, when it is stopped, or on demand (`fetch_log`).
Every check and signal happens on the node, by PID and start time (`node_tools`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from servebench.providers import node_tools
from servebench.providers.ssh.argv import STATUS_SCRIPT, RemoteFiles, parse_status, sh_command
from servebench.providers.ssh.transport import SshTransport

KILLED_EXIT = 128 + 9  # the shell's status for SIGKILL: what the wrapper would have written
STOP_SLACK_S = 30.0    # the ssh call of a stop may take grace_s, the KILL wait and connection time


@dataclass
class SshProcess:
    """pid is the session leader on the node (the wrapper; the command is its child, same group).
    Exit codes follow the shell: a command killed by signal N reports 128+N."""

    node: str
    pid: int
    start_ticks: int                 # /proc/PID/stat start time: tells a reused PID apart
    log_path: Path | None            # the local copy of the node's log
    files: RemoteFiles
    argv: list[str]
    transport: SshTransport = field(repr=False)
    python: str = "python3"
    mark: str = ""                   # its node_tools.MARK_VARIABLE value: found on the node even unrecorded
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
        out = self.transport.checked(self.node, sh_command(STATUS_SCRIPT, str(self.pid), str(self.start_ticks),
                                                           self.files.exit), "process status")
        alive, code = parse_status(out)
        if not alive:
            self._ended, self._exit = True, code
            self.fetch_log()  # a caller reads the log of a process that ended (why it ended) next

    def remember_descendants(self) -> None:
        """Note what it has spawned so far, on its node: stopped with it even if it left the group."""
        found = self.transport.call(self.node, Path(node_tools.__file__), "descendants", self.python,
                                    pid=self.pid, start=self.start_ticks)
        self.known_descendants |= found

    def fetch_log(self) -> Path | None:
        """Copy the node's log to log_path now (it keeps growing while the process runs)."""
        if self.log_path is None:
            return None
        if not self.transport.copy_from(self.node, self.files.log, self.log_path):
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self.log_path.touch()
        return self.log_path

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM the group on the node, wait up to grace_s, SIGKILL the group and every recorded
        descendant; copy the log; return the exit code (128+9 if it had to be killed unrecorded)."""
        result = self.transport.call(self.node, Path(node_tools.__file__), "stop_tree", self.python,
                                     timeout=grace_s + STOP_SLACK_S, pid=self.pid, start=self.start_ticks,
                                     known=self.known_descendants, grace_s=grace_s, exit_path=self.files.exit,
                                     mark=self.mark)
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
