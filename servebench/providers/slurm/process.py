"""A long-lived process on a Slurm node: the NodeProcess the slurm provider's `start` returns.

It is the task of a step of its own (`srun --overlap ... sh -c LAUNCH_SCRIPT ...`); the srun
client of that step is a local child of the orchestrator (`client_process`) and lives exactly as
long as the task on the node, so `alive()` needs no step while it runs: it looks at the local
client and asks the controller whether the allocation still holds (one `scontrol`, a few ms,
at most every ALLOCATION_CHECK_S).
The task records its PID and start time and, when the command ends, its exit status in files of
the run's directory on the node; its output goes to a log there, copied to `log_path` with a
`cat` step when it is seen to end, when it is stopped, or on demand (`fetch_log`). A stop
signals the process tree on the node by PID (`node_tools`, in a short step),
then lets the srun client end.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from servebench.logs import tail_text
from servebench.providers.remote import KILLED_EXIT, NODE_TOOLS, STOP_SLACK_S, RemoteProcess
from servebench.providers.slurm.allocation import Allocation
from servebench.providers.slurm.argv import parse_status, status_argv
from servebench.providers.slurm.client import AllocationEnded, SlurmError, end_group

CLIENT_EXIT_WAIT_S = 10.0  # after the task ended, its srun client reports and exits
# While its srun client runs, a process is alive unless the allocation ended; the controller is
# asked again at most this often (a campaign polls many processes; a production controller is
# shared). A cancelled job ends its steps, so the srun client exits and the next alive() asks at once.
ALLOCATION_CHECK_S = 2.0


@dataclass(kw_only=True)
class SlurmProcess(RemoteProcess):
    """pid is the step's task on the node (the launch script; the command is its child, same
    group). Exit codes follow the shell: a command killed by signal N reports 128+N. Its channel is
    the allocation; what differs from another remote process is the step's local srun client and
    an allocation that can end under it."""

    client_process: subprocess.Popen = field(repr=False)  # the step's srun client, here
    client_log: Path | None = None   # that client's stderr, here (srun's own messages)
    log_note: str | None = None      # why the node's log could not be copied, if it could not

    @property
    def allocation(self) -> Allocation:
        return self.channel  # type: ignore[return-value]

    def alive(self) -> bool:
        """True while the task runs on the node; AllocationEnded once the allocation is gone."""
        if self._ended:
            return False
        if self.client_process.poll() is None:
            self.allocation.check(max_age_s=ALLOCATION_CHECK_S)
            return True
        self.allocation.check()  # the step ended: with the allocation?
        out = self.allocation.checked(self.node, status_argv(self.pid, self.start_ticks, self.files.exit),
                                      "process status")
        alive, code = parse_status(out)
        if alive:
            return True  # its srun client went (killed here?) but the task runs on: stop() still reaches it
        self._finish(code if code is not None else self._client_code())
        self.fetch_log()  # a caller reads the log of a process that ended (why it ended) next
        return False

    def exit_code(self) -> int | None:
        if not self._ended:
            self.alive()
        return self._exit

    def fetch_log(self) -> Path | None:
        """Copy the node's log to log_path now (it keeps growing while the process runs). Once the
        allocation has ended no step can read it: the last copy stays, `log_note` says why."""
        if self.log_path is None:
            return None
        try:
            copied = self.allocation.copy_from(self.node, self.files.log, self.log_path)
        except AllocationEnded as exc:
            copied, self.log_note = False, f"the node's log could not be copied: {exc}"
        if not copied and not self.log_path.exists():
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self.log_path.touch()
        return self.log_path

    def stop(self, grace_s: float = 20.0) -> int | None:
        """SIGTERM the group on the node, wait up to grace_s, SIGKILL the group and every recorded
        descendant and marked process; let the srun client end; copy the log; return the exit
        code (128+9 if it had to be killed before its wrapper could record one)."""
        if self._stopped:
            return self._exit
        try:
            # node_tools.stop_tree returns a JSON object: exit_code, killed (PIDs), targets, left.
            result = cast(dict[str, Any], self.allocation.call(
                self.node, NODE_TOOLS, "stop_tree", self.python, timeout=grace_s + STOP_SLACK_S, pid=self.pid,
                start=self.start_ticks, known=self.known_descendants, grace_s=grace_s, exit_path=self.files.exit,
                mark=self.mark))
        except AllocationEnded:
            self.end_client(0.0)  # Slurm ended the step with the job; nothing of it to reach on the node
            self._finish(self._exit)
            self._stopped = True
            raise
        code = result["exit_code"]
        if code is None and self.pid in result["killed"]:
            code = KILLED_EXIT
        client_code = self.end_client(CLIENT_EXIT_WAIT_S)
        if code is None and not self._ended:
            code = client_code
        self._finish(code if code is not None else self._exit)
        self._stopped = True
        self.fetch_log()
        return self._exit

    def end_client(self, wait_s: float) -> int | None:
        """Wait up to wait_s for the local srun client to exit by itself, then end it (a TERM makes
        srun cancel the step); return its exit status as the shell would show it."""
        try:
            self.client_process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            end_group(self.client_process, 10.0)
        if self.client_process.stdout is not None:
            self.client_process.stdout.close()
        return self._client_code()

    def _client_code(self) -> int | None:
        code = self.client_process.poll()
        if code is None:
            return None
        return 128 - code if code < 0 else code  # srun itself killed by signal N: 128+N, as the shell says

    def _finish(self, code: int | None) -> None:
        self._ended, self._exit = True, code

    @property
    def client_pid(self) -> int:
        return self.client_process.pid


def read_started_line(stream: IO[bytes], process: subprocess.Popen, timeout_s: float) -> str | None:
    """The first line the step's task prints (read from the srun client's stdout), or None if
    the client ends or timeout_s passes first. The pipe stays open: closing it would end srun."""
    fd = stream.fileno()
    data = b""
    deadline = time.monotonic() + timeout_s  # not servebench.waiting's poll: select() on the stream is the wait
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if not ready:
            if process.poll() is not None and not select.select([fd], [], [], 0)[0]:
                return None
            continue
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        data += chunk
    return data.split(b"\n", 1)[0].decode(errors="replace")


def start_failure(what: str, node: str, client_log: Path | None, code: int | None) -> SlurmError:
    said = tail_text(client_log, 20) if client_log is not None else "(no client log)"
    return SlurmError(f"{what} on {node}: the step printed no PID (srun exit {code}): {said}")
