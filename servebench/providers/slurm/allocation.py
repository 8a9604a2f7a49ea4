"""One Slurm allocation held by a run: its state, and steps on its nodes.

Every command on a node is a step of the allocation (`srun --overlap --jobid J --nodelist NODE`),
run as a child of the orchestrator. When a step fails, the allocation's state says whether the
failure is the allocation's end (then `AllocationEnded`, whose message is the cause a failed
cell shows: "allocation cancelled", "allocation ended: TIMEOUT"...) or the command's own.
"""

from __future__ import annotations

import subprocess
import threading
import time

from servebench.providers.remote import CommandChannel
from servebench.providers.slurm.argv import ended_message, job_state, step_argv, strip_srun_noise
from servebench.providers.slurm.client import DEFAULT_TIMEOUT_S, AllocationEnded, SlurmClient, SlurmError
from servebench.waiting import poll

# A job that ends shows COMPLETING (its base state hidden) until every step on its nodes is gone:
# up to KillWait (Slurm's default 30 s, the testbed's 5 s) after its processes were signalled.
COMPLETING_SETTLE_S = 40.0
LATENCIES_KEPT = 200


class Allocation(CommandChannel):
    """The slurm provider's channel: every command on a node is a step of the allocation
    (`run`), checked, called and copied from as any channel's (servebench/providers/remote.py)."""

    error = SlurmError

    def __init__(self, client: SlurmClient, job_id: int, chdir: str, export: str = "--export=ALL"):
        self.client = client
        self.job_id = job_id
        self.chdir = chdir                 # the steps' working directory on the nodes
        self.export = export               # srun's --export option: what steps take from the environment
        self.node_list = ""                # Slurm's expression, e.g. h[1-2]
        self.node_names: list[str] = []
        self.released = False
        self.step_seconds: list[float] = []  # wall time of recent short steps (srun launch + command)
        self._final: str | None = None     # the state it ended in, once seen
        self._running_seen = float("-inf")  # monotonic time the controller last said RUNNING
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ state

    def state(self, settle_s: float = COMPLETING_SETTLE_S) -> str:
        """RUNNING while it holds its nodes; else how it ended: CANCELLED, TIMEOUT, NODE_FAIL, ...,
        GONE (the controller no longer knows the job) or RELEASED (this run gave it back). A
        COMPLETING job is asked again (up to settle_s) until its final state shows."""
        if self._final is not None:
            return self._final
        state = poll(self._read_state, settle_s, interval_s=0.2, until=lambda s: s != "COMPLETING")
        if state not in ("RUNNING", "COMPLETING"):
            with self._lock:
                self._final = self._final or state
            return self._final
        return state

    def _read_state(self) -> str:
        record = self.client.job_record(self.job_id)
        state = "GONE" if record is None else job_state(record)
        if state == "RUNNING":
            self._running_seen = time.monotonic()
        return state

    def ended_error(self, state: str) -> AllocationEnded:
        return AllocationEnded(ended_message(self.job_id, state, self.node_list), self.job_id, state)

    def check(self, max_age_s: float = 0.0) -> None:
        """Raise AllocationEnded unless the allocation still holds its nodes; a RUNNING seen less
        than max_age_s ago is taken as still true (no question to the controller)."""
        if self._final is None and time.monotonic() - self._running_seen < max_age_s:
            return
        state = self.state()
        if state != "RUNNING":
            raise self.ended_error(state)

    def mark_released(self, state: str) -> None:
        """This run cancelled it (`state`: what it was when it was given back)."""
        with self._lock:
            self.released = True
            self._final = "RELEASED" if state == "RUNNING" else state

    # ------------------------------------------------------------------ steps

    def argv(self, node: str, argv: list[str], cpus: int | None = None, name: str | None = None) -> list[str]:
        return step_argv(self.job_id, node, argv, self.chdir, cpus=cpus, name=name, export=self.export)

    def pipe_argv(self, host: str, argv: list[str]) -> list[str]:
        return self.argv(host, argv)

    @property
    def pipe_env(self) -> dict[str, str]:
        """Steps start from the Slurm clients' environment (what `export` lets through)."""
        return self.client.env

    def describe(self, host: str) -> str:
        return f"{host} (slurm job {self.job_id})"

    def run(self, node: str, argv: list[str], timeout: float | None = DEFAULT_TIMEOUT_S, input: str | None = None,
             stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
        """argv as a one-task step on the node; its exit code and output (srun's own report of
        the task's end left out of stderr). AllocationEnded if it failed because the allocation ended."""
        if self._final is not None:
            raise self.ended_error(self._final)
        started = time.perf_counter()
        try:
            result = self.client.run(self.argv(node, argv), timeout=timeout, input=input, stdout=stdout)
        except subprocess.TimeoutExpired:
            self.check()
            raise
        self._note(time.perf_counter() - started)
        if result.returncode != 0:
            self.check()  # an ended allocation explains the failure better than srun's words
        result.stderr = strip_srun_noise(result.stderr or "")
        return result

    def _note(self, seconds: float) -> None:
        with self._lock:
            self.step_seconds.append(seconds)
            del self.step_seconds[:-LATENCIES_KEPT]
