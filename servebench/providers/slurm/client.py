"""The Slurm client commands of one run (salloc, srun, scontrol, squeue, scancel), run on the
orchestrator with the run's client environment, and the errors they end in.

A command that outlives its timeout is asked to stop with SIGTERM first: an srun client that
gets it cancels its step on the node (SIGKILL would leave the step running there), and it runs
in a session of its own, so the helper process srun forks goes with it.
"""

from __future__ import annotations

import os
import signal
import subprocess

from servebench.providers.slurm.argv import client_env, parse_record, parse_records
from servebench.providers.slurm.spec import SlurmProviderSpec

DEFAULT_TIMEOUT_S = 60.0
TERM_WAIT_S = 10.0  # srun waits for its step to end after a TERM (KillWait + 2 s on the testbed: 7 s)


class SlurmError(RuntimeError):
    """A Slurm command failed, or a command servebench needs failed on a node."""


class AllocationEnded(SlurmError):
    """The run's allocation is gone (cancelled, timed out, failed...): nothing runs on its nodes any more.
    The message says how, e.g. `slurm job 7 on h[1-2]: allocation cancelled`."""

    def __init__(self, message: str, job_id: int, state: str):
        super().__init__(message)
        self.job_id = job_id
        self.state = state


class SlurmClient:
    """Runs the Slurm clients with the run's environment (argv.client_env)."""

    def __init__(self, spec: SlurmProviderSpec):
        self.spec = spec
        self.env = client_env(dict(os.environ), spec)

    def run(self, argv: list[str], timeout: float | None = DEFAULT_TIMEOUT_S, input: str | None = None,
            stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
        """argv with text output captured (stdout may be a file); TimeoutExpired after TERM, then KILL."""
        try:
            process = subprocess.Popen(argv, env=self.env, stdin=subprocess.PIPE if input is not None else
                                       subprocess.DEVNULL, stdout=stdout, stderr=subprocess.PIPE, text=True,
                                       start_new_session=True)
        except FileNotFoundError:
            raise SlurmError(f"{argv[0]} not found: the Slurm client commands (Debian: slurm-client) are "
                             "needed on the orchestrator") from None
        try:
            out, err = process.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            end_group(process, TERM_WAIT_S)
            raise
        return subprocess.CompletedProcess(argv, process.returncode, out, err)

    def checked(self, argv: list[str], what: str, timeout: float | None = DEFAULT_TIMEOUT_S) -> str:
        result = self.run(argv, timeout=timeout)
        if result.returncode != 0:
            raise SlurmError(f"{what}: {argv[0]} exit {result.returncode}: {result.stderr.strip()[-2000:]}")
        return result.stdout

    def job_record(self, job_id: int) -> dict[str, str] | None:
        """`scontrol show job -o J` as a dict; None once the controller no longer knows the job."""
        result = self.run(["scontrol", "show", "job", "-o", str(job_id)])
        if result.returncode != 0:
            if "Invalid job id" in result.stderr:
                return None
            raise SlurmError(f"scontrol show job {job_id}: {result.stderr.strip()}")
        return parse_record(result.stdout)

    def hostnames(self, node_list: str) -> list[str]:
        """`h[1-2],h4` -> [h1, h2, h4] (scontrol show hostnames: Slurm's own hostlist syntax)."""
        return self.checked(["scontrol", "show", "hostnames", node_list], "expanding the node list").split()

    def node_records(self, node_list: str) -> list[dict[str, str]]:
        return parse_records(self.checked(["scontrol", "show", "node", "-o", node_list], "reading the nodes"))

    def queued(self, job_id: int) -> bool:
        """Whether squeue still lists the job (pending, running or completing)."""
        result = self.run(["squeue", "-h", "-j", str(job_id), "-o", "%i"])
        if result.returncode != 0 and "Invalid job id" not in result.stderr:
            raise SlurmError(f"squeue -j {job_id}: {result.stderr.strip()}")
        return result.returncode == 0 and bool(result.stdout.strip())

    def jobs_named(self, name: str) -> list[int]:
        out = self.checked(["squeue", "-h", "-n", name, "-o", "%i"], f"looking for jobs named {name}")
        return [int(word) for word in out.split() if word.isdigit()]

    def scancel(self, job_id: int) -> None:
        self.checked(["scancel", str(job_id)], f"cancelling job {job_id}")


def end_group(process: subprocess.Popen, wait_s: float) -> int | None:
    """TERM the process's session group (it was started in a session of its own), wait, then KILL;
    its exit status (None if it would not go)."""
    for sig, wait in ((signal.SIGTERM, wait_s), (signal.SIGKILL, 5.0)):
        if process.poll() is not None:
            break
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
    try:
        process.communicate(timeout=1)
    except (subprocess.TimeoutExpired, ValueError):
        pass
    return process.poll()
