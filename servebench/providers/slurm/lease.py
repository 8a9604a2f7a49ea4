"""The run's lease on its Slurm allocation: a job whose orchestrator died cancels itself.

`salloc --no-shell` leaves a job that holds its nodes until it is cancelled or its time limit ends:
an orchestrator that is SIGKILLed (or cut off, or hung) would leave it holding them for hours. So
the allocation carries a warden: one step with a task on every node (`srun --overlap`) whose srun
client stays a child of the orchestrator in a session of its own (a kill of the orchestrator's
process group leaves it) with its stdin a pipe from the orchestrator, which srun forwards to every
task. The orchestrator writes a heartbeat into it every `lease_s / 5` seconds. When the pipe closes
(the orchestrator is gone: the kernel closed its end) or stays silent for `lease_s` (hung, or cut
off from the nodes), each task removes the run's directory on its node, and the first then runs
`scancel` on the job, which ends every step of the run; a task told that the run released the
allocation itself exits quietly. `scancel` on a compute node is the user's own right on their job.
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from servebench.providers.slurm.client import end_group

RELEASED = b"released\n"
HEARTBEAT = b".\n"
STARTED_TIMEOUT_S = 60.0

# argv: job id, lease seconds, the run's directory. Prints "warden PID" once it listens.
WARDEN_SCRIPT = r"""
import os, select, shutil, subprocess, sys, time
job, lease_s, run_dir = sys.argv[1], float(sys.argv[2]), sys.argv[3]
print("warden", os.getpid(), flush=True)
while True:
    ready, _, _ = select.select([0], [], [], lease_s)
    data = os.read(0, 4096) if ready else None
    if data and data.endswith(b"released\n"):
        sys.exit(0)
    if not data:  # b"": the orchestrator's end closed; None: nothing for lease_s
        break
why = "the orchestrator's end closed" if data == b"" else f"no heartbeat for {lease_s:.0f} s"
shutil.rmtree(run_dir, ignore_errors=True)
if os.environ.get("SLURM_PROCID", "0") == "0":
    time.sleep(2)  # the other nodes' tasks remove their run directories first
    print(f"servebench lease of slurm job {job}: {why}: scancel {job}", file=sys.stderr, flush=True)
    subprocess.run(["scancel", job])
"""


def warden_argv(job_id: int, nodes: int, python: str | list[str], chdir: str, lease_s: float, run_dir: str,
                export: str = "--export=ALL") -> list[str]:
    """One task on every node of the allocation, sharing its CPUs (--overlap), stdin to every task
    (`python`: the node's python, or the argv that runs it after the campaign's setup)."""
    return ["srun", "--overlap", f"--jobid={job_id}", f"--nodes={nodes}", f"--ntasks={nodes}",
            "--ntasks-per-node=1", "--cpus-per-task=1", "--input=all", export, "--mpi=none", "--quiet",
            f"--job-name=servebench-lease-{job_id}", f"--chdir={chdir}", "--",
            *([python] if isinstance(python, str) else python), "-c", WARDEN_SCRIPT, str(job_id), str(lease_s),
            run_dir]


class AllocationLease:
    """The warden step of one allocation and the heartbeat that keeps it from cancelling the job."""

    def __init__(self, job_id: int, nodes: int, python: str | list[str], chdir: str | tuple[str, str],
                 lease_s: float, run_dir: str, env: dict[str, str], log_path: Path):
        """`chdir`: the steps' working directory, or (it, srun's --export option)."""
        self.job_id = job_id
        self.lease_s = lease_s
        where, export = (chdir, "--export=ALL") if isinstance(chdir, str) else chdir
        self.argv = warden_argv(job_id, nodes, python, where, lease_s, run_dir, export)
        self.env = env
        self.log_path = log_path
        self.warden_pid: int | None = None
        self._client: subprocess.Popen | None = None
        self._ended = threading.Event()
        self._write_lock = threading.Lock()

    def start(self) -> None:
        """Start the warden and the heartbeat; raises RuntimeError if the warden does not report."""
        with open(self.log_path, "wb") as err:
            self._client = subprocess.Popen(self.argv, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                            stderr=err, start_new_session=True)
        line = _first_line(self._client, STARTED_TIMEOUT_S)
        if not line.startswith("warden "):
            code = end_group(self._client, 10.0)
            raise RuntimeError(f"the lease warden of slurm job {self.job_id} did not start (srun exit {code}; "
                               f"{self.log_path})")
        self.warden_pid = int(line.split()[1])
        threading.Thread(target=self._beat, name=f"slurm-lease-{self.job_id}", daemon=True).start()

    def _beat(self) -> None:
        while not self._ended.wait(self.lease_s / 5):
            if not self._write(HEARTBEAT):
                return  # the warden is gone: the job ended (cancelled from outside, or released)

    def _write(self, data: bytes) -> bool:
        with self._write_lock:
            client = self._client
            if client is None or client.stdin is None or client.stdin.closed:
                return False
            try:
                client.stdin.write(data)
                client.stdin.flush()
                return True
            except (BrokenPipeError, OSError, ValueError):
                return False

    def end(self, wait_s: float = 10.0) -> None:
        """The run gives the allocation back itself: the warden exits without cancelling anything."""
        if self._client is None or self._ended.is_set():
            return
        self._ended.set()
        self._write(RELEASED)
        assert self._client.stdin is not None  # started with stdin=PIPE
        with self._write_lock:
            try:
                self._client.stdin.close()
            except OSError:
                pass
        try:
            self._client.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            end_group(self._client, 5.0)
        if self._client.stdout is not None:
            self._client.stdout.close()


def _first_line(client: subprocess.Popen, timeout_s: float) -> str:
    """The client's first output line, or '' if none comes within timeout_s (or it exits first)."""
    found: list[str] = []
    stdout = client.stdout
    assert stdout is not None  # started with stdout=PIPE
    reader = threading.Thread(target=lambda: found.append(stdout.readline().decode(errors="replace")),
                              daemon=True)
    reader.start()
    reader.join(timeout_s)
    return found[0].strip() if found else ""
