"""The slurm provider: the nodes are an allocation of a real Slurm controller (docs/slurm-provider.md).

A channel plus an allocation (`servebench.providers.remote.RemoteNodes` has the node methods):
`allocate` gets the allocation without holding a terminal (`salloc --no-shell`), waits until the
job runs and records its id, node list, node addresses and CPUs; every command on a node is a
step inside the allocation (`srun --overlap --jobid J --nodelist NODE`: `allocation.Allocation`
is the channel), a
long-lived process is a step of its own whose srun client stays a local child of the
orchestrator (`process`); `release` stops what is left, cancels the job and waits until it is
gone. A job cancelled or timed out from outside makes every later call raise `AllocationEnded`
with the cause ("allocation cancelled", "allocation ended: TIMEOUT"), so the cells it took fail
with it. Ports, /dev/shm, process trees and the inventory are handled on the node by its own
python3 (the inventory source and `node_tools`, sent through a step).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import ClassVar, Sequence, cast

from servebench.config.campaign import ProviderSpecBase
from servebench.providers.base import (
    ATTACH,
    BATCH_JOBS,
    CANCEL_ALLOCATION,
    LINK_SHAPING,
    BatchRequest,
    BatchState,
    Node,
    node_numa,
)
from servebench.providers.remote import RemoteNodes, inline_setup_argv
from servebench.providers.slurm.allocation import Allocation
from servebench.providers.slurm.argv import (
    export_option,
    job_name,
    job_state,
    launch_argv,
    parse_granted,
    parse_probe,
    parse_started,
    pinned_argv,
    probe_argv,
    remote_files,
    salloc_argv,
    step_argv,
)
from servebench.providers.slurm.batch import (
    batch_job,
    job_state_argv,
    parse_job_id,
    parse_job_state,
    sbatch_argv,
    sbatch_script,
)
from servebench.providers.slurm.broadcast import Broadcast, BroadcastSite, broadcast_tree
from servebench.providers.slurm.client import AllocationEnded, SlurmClient, SlurmError, end_group
from servebench.providers.slurm.enclosing import enclosing_job, enclosing_problem
from servebench.providers.slurm.lease import AllocationLease
from servebench.providers.slurm.process import SlurmProcess, read_started_line, start_failure
from servebench.providers.slurm.spec import SlurmProviderSpec
from servebench.waiting import poll

RUNNING_TIMEOUT_S = 60.0   # from granted to RUNNING (a node may need to boot or be configured)
START_TIMEOUT_S = 60.0     # from srun to the task's PID line
RELEASE_TIMEOUT_S = 60.0   # from scancel until squeue no longer lists the job (KillWait: 30 s by default)
PROBE_TIMEOUT_S = 60.0


class SlurmProvider(RemoteNodes):
    kind: ClassVar[str] = "slurm"
    spec_model: ClassVar[type[SlurmProviderSpec]] = SlurmProviderSpec
    capabilities: ClassVar[frozenset[str]] = frozenset({CANCEL_ALLOCATION, ATTACH, LINK_SHAPING, BATCH_JOBS})
    node_error = (SlurmError, subprocess.TimeoutExpired)
    node_gone = (AllocationEnded,)

    def __init__(self, spec: SlurmProviderSpec, reserved_cpus: Sequence[int] = (), run_id: str | None = None):
        """`reserved_cpus` are the load generator's CPUs on the orchestrator: another host than
        the nodes, so they are not taken from any node."""
        super().__init__(spec, run_id)
        self.job_name = job_name(self.run_id)
        self.client = SlurmClient(spec)
        self.allocation: Allocation | None = None
        self.timings: dict[str, float] = {}   # allocate_s, salloc_s, running_s, probe_s, release_s
        self.released_state: str | None = None  # the job's state when this run gave it back
        self._nodes: list[Node] | None = None
        self._local_dir: Path | None = None   # the srun clients' stderr files, here
        self.lease: AllocationLease | None = None  # the warden that cancels the job if this run dies
        self.enclosing = False   # the nodes are those of the job servebench runs in, never cancelled by it

    # ------------------------------------------------------------------ the campaign's block

    @classmethod
    def host_cpus(cls) -> set[int]:
        """The orchestrator's CPUs: the load generator runs here, not on a node."""
        return set(os.sched_getaffinity(0))

    @classmethod
    def spec_problems(cls, spec: ProviderSpecBase, host_cpus: set[int]) -> list[tuple[tuple, str]]:
        """Sanity checks only: the controller decides what it can give (`allocate` says why not)."""
        # The campaign's provider block is parsed into this class's `spec_model` (campaign_model).
        slurm = cast(SlurmProviderSpec, spec)
        problems: list[tuple[tuple, str]] = []
        if slurm.slurm_conf is not None and not slurm.slurm_conf.expanduser().is_file():
            problems.append((("provider", "slurm_conf"), f"no file {slurm.slurm_conf}"))
        conf = slurm.client_env.get("SLURM_CONF")
        if conf and slurm.slurm_conf is not None and Path(conf).expanduser() != slurm.slurm_conf.expanduser():
            problems.append((("provider", "client_env", "SLURM_CONF"), "slurm_conf and client_env.SLURM_CONF "
                             "disagree: give one"))
        return problems

    # ------------------------------------------------------------------ the allocation

    @property
    def job_id(self) -> int | None:
        return self.allocation.job_id if self.allocation else None

    @property
    def node_list(self) -> str | None:
        """Slurm's expression of the allocated nodes, e.g. `h[1-2]`."""
        return self.allocation.node_list if self.allocation else None

    def claims(self) -> list[str]:
        """None: the Slurm controller gives two jobs the same CPUs only if it is told it may."""
        return []

    def allocation_record(self) -> dict:
        """What a run lands about its allocation."""
        return {"job_id": self.job_id, "job_name": self.job_name, "node_list": self.node_list,
                "nodes": [node.model_dump() for node in self._nodes or []],
                "state": self.released_state or (self.allocation_state() if self.allocation else None),
                "timings": dict(self.timings)}

    def allocation_state(self) -> str:
        """RUNNING, or how the allocation ended (CANCELLED, TIMEOUT, ..., RELEASED); NOT_ALLOCATED before."""
        return self.allocation.state() if self.allocation else "NOT_ALLOCATED"

    def nodes(self) -> list[Node]:
        """The allocated nodes; before `allocate`, the block's (nodelist names or node1..., CPUs 0..k-1,
        no address yet)."""
        if self._nodes is not None:
            return list(self._nodes)
        return [Node(name=n.name, address="", cpus=n.cpus, emulate=n.emulate, interpreter=self.spec.interpreter,
                     numa=node_numa(n.numa, n.emulate, this_host=False)) for n in self.spec.node_specs()]

    def allocate(self) -> list[Node]:
        """salloc --no-shell (waits for the grant, at most allocate_timeout_s), then until the job
        runs; its nodes' names, addresses and CPUs. Whatever fails after the grant cancels the job."""
        if self.allocation is not None:
            self.allocation.check()
            return self.nodes()
        started = time.perf_counter()
        enclosing = enclosing_job(os.environ)
        if enclosing is not None:
            return self._use_enclosing_job(enclosing, started)
        try:
            result = self.client.run(salloc_argv(self.spec, self.job_name), timeout=self.spec.allocate_timeout_s + 60)
        except subprocess.TimeoutExpired:
            self._cancel_named()
            raise SlurmError(f"salloc did not return within {self.spec.allocate_timeout_s + 60} s") from None
        self.timings["salloc_s"] = time.perf_counter() - started
        job_id = parse_granted(result.stderr)
        if result.returncode != 0 or job_id is None:
            self._cancel_named()
            raise SlurmError(f"no allocation of {self.spec.nodes} node(s) x {self.spec.cpus_per_node} CPUs: "
                             f"salloc exit {result.returncode}: {result.stderr.strip()[-2000:]}")
        self.allocation = Allocation(self.client, job_id, self.spec.remote_dir, export_option(self.spec.export))
        try:
            self._nodes = self._describe_nodes(self._wait_running())
            self._start_lease()
        except BaseException:
            self._end_lease()
            self._cancel(job_id)
            self.allocation.mark_released("RUNNING")
            raise
        self.timings["allocate_s"] = time.perf_counter() - started
        return self.nodes()

    def _use_enclosing_job(self, job_id: int, started: float) -> list[Node]:
        """The job servebench runs in holds the campaign's nodes (`servebench submit`): its steps run there,
        no lease (the job ends with its batch script, the orchestrator) and release leaves the job to it."""
        self.allocation = Allocation(self.client, job_id, self.spec.remote_dir, export_option(self.spec.export))
        self.enclosing = True
        self._nodes = self._describe_nodes(self._wait_running())
        problem = enclosing_problem(job_id, [node.name for node in self._nodes], self.spec.nodes)
        if problem is not None:
            self.allocation.mark_released("RUNNING")
            raise SlurmError(problem)
        self.timings["allocate_s"] = time.perf_counter() - started
        return self.nodes()

    def _start_lease(self) -> None:
        """The job cancels itself once this orchestrator is gone (lease.py): never left holding nodes."""
        allocation = self._allocation()  # set by `allocate` before the lease starts
        self.lease = AllocationLease(allocation.job_id, len(allocation.node_names), self.setup_python(),
                                     (allocation.chdir, allocation.export), self.spec.lease_s, self.run_dir,
                                     self.client.env, self._local() / "lease.srun.log")
        try:
            self.lease.start()
        except RuntimeError as exc:
            allocation.check()
            raise SlurmError(str(exc)) from None

    def _end_lease(self) -> None:
        if self.lease is not None:
            self.lease.end()

    def _wait_running(self) -> dict[str, str]:
        allocation = self._allocation()  # set by `allocate` before it waits for the job to run
        started = time.perf_counter()
        state = "PENDING"

        def running() -> dict[str, str] | None:
            nonlocal state
            record = self.client.job_record(allocation.job_id)
            state = "GONE" if record is None else job_state(record)
            if state not in ("RUNNING", "PENDING", "CONFIGURING"):
                raise allocation.ended_error(state)
            return record if state == "RUNNING" else None

        record = poll(running, RUNNING_TIMEOUT_S, interval_s=0.1)
        if record is None:
            raise SlurmError(f"slurm job {allocation.job_id} still {state} after {RUNNING_TIMEOUT_S:.0f} s")
        self.timings["running_s"] = time.perf_counter() - started
        return record

    def _describe_nodes(self, record: dict[str, str]) -> list[Node]:
        """Names from the job's NodeList, addresses from each node's NodeAddr, CPUs from a probe step
        on every node: the first cpus_per_node CPU ids a step with that many CPUs may run on there."""
        allocation = self._allocation()  # set by `allocate` before the nodes are described
        allocation.node_list = record.get("NodeList", "")
        allocation.node_names = self.client.hostnames(allocation.node_list)
        addresses = {r.get("NodeName"): r.get("NodeAddr") or r.get("NodeName") for r in
                     self.client.node_records(allocation.node_list)}
        started = time.perf_counter()
        probe = self.client.run(probe_argv(allocation.job_id, len(allocation.node_names), self.spec.cpus_per_node,
                                           self.setup_python(), allocation.chdir, allocation.export),
                                timeout=PROBE_TIMEOUT_S)
        self.timings["probe_s"] = time.perf_counter() - started
        if probe.returncode != 0:
            allocation.check()
            raise SlurmError(f"probing the nodes of slurm job {allocation.job_id}: exit {probe.returncode}: "
                             f"{probe.stderr.strip()[-2000:]}")
        cpus = parse_probe(probe.stdout)
        nodes = []
        declared = self.spec.node_specs()  # `emulate` names a nodelist's nodes, else node1, node2... in order
        for position, name in enumerate(allocation.node_names):
            usable = cpus.get(name)
            if usable is None or len(usable) < self.spec.cpus_per_node:
                raise SlurmError(f"node {name} of slurm job {allocation.job_id}: a step may use CPUs {usable}, "
                                 f"fewer than cpus_per_node={self.spec.cpus_per_node}")
            emulate = self.spec.emulate.get(name) if self.spec.nodelist else declared[position].emulate
            nodes.append(Node(name=name, address=addresses.get(name) or name,
                              cpus=sorted(usable)[:self.spec.cpus_per_node], emulate=emulate,
                              numa=node_numa(self.spec.numa, emulate, this_host=False),
                              interpreter=self.spec.interpreter,
                              declared_as=None if self.spec.nodelist else declared[position].name))
        return nodes

    def environment_lines(self) -> list[str]:
        return [f"srun {export_option(self.spec.export)} (provider.export)"]

    def setup_python(self) -> list[str]:
        """The node's python after the campaign's setup lines, for the steps on every node at once (the
        probe, the lease's warden: before the run's directory and its prelude exist; no env values)."""
        return inline_setup_argv(self.spec.setup, [self.spec.python])

    def _allocation(self) -> Allocation:
        if self.allocation is None:
            raise SlurmError("the slurm provider has no allocation yet: call allocate() first")
        return self.allocation

    def _name(self, node: Node) -> str:
        allocation = self._allocation()
        if node.name not in allocation.node_names:
            raise ValueError(f"node {node.name!r} is not in slurm job {allocation.job_id} ({allocation.node_list})")
        return node.name

    def channel(self) -> Allocation:
        """Steps of the allocation (raises without one)."""
        return self._allocation()

    def node_host(self, node: Node) -> str:
        return self._name(node)

    # ------------------------------------------------------------------ long-lived processes

    def command(self, node: Node, argv: list[str]) -> list[str]:
        """The srun command line `start` runs for argv (environment aside), as `plan` prints it."""
        job = self.job_id if self.job_id is not None else "<job id>"
        files = remote_files(self.run_dir, 0, "process.log")
        command = [*self.planned_prefix(), *pinned_argv(node.cpus, list(argv))]
        return step_argv(job, node.name, launch_argv(self.run_dir, files, command), self.spec.remote_dir,
                         cpus=self.spec.cpus_per_node, export=export_option(self.spec.export))

    def put_tree(self, node: Node, local: Path, remote: str) -> None:
        """Copy a tree to the node as a step; a copy that fails because the allocation is over says so
        (`AllocationEnded`, the cause a failed cell names), as a start does."""
        allocation = self._allocation()
        allocation.check()
        try:
            super().put_tree(node, local, remote)
        except RuntimeError:
            allocation.check()
            raise

    def broadcast_tree(self, nodes: list[Node], local: Path, remote: str, digest: str,
                       fanout: int | None = None) -> Broadcast:
        """The tree on `nodes` by Slurm's own broadcast (`sbcast`, servebench/providers/slurm/broadcast.py),
        each node's copy verified by `digest`; a node that failed is named, the others keep theirs."""
        allocation = self._allocation()
        allocation.check()
        for node in nodes:
            self._touched.add(self._name(node))
        site = BroadcastSite(allocation.job_id, self._local(), self.spec.remote_dir, self.client.run)
        outcome = broadcast_tree(self, site, nodes, local, remote, digest, fanout)
        if outcome.failed:
            allocation.check()  # an allocation that ended is the cause, not the nodes
        return outcome

    def start(self, node: Node, argv: list[str], env: dict[str, str], log_path: Path,
              unset: Sequence[str] = ()) -> SlurmProcess:
        """Start argv on the node as a step of its own, env added and unset removed from the step's
        environment (what the block's `export` lets through, then the run's prelude: `setup` and
        `env`), output to a log in the run's directory there (copied to log_path); returns once the
        task has printed its PID."""
        allocation = self._allocation()
        name = self._name(node)
        allocation.check()
        self._sequence += 1
        sequence = self._sequence
        files = remote_files(self.run_dir, sequence, Path(log_path).name)
        mark = self._mark(sequence)
        prefix = self.prelude_prefix(name)
        full = self._full_argv(node, argv, env, unset, sequence, prefix)
        step = allocation.argv(name, launch_argv(self.run_dir, files, full), cpus=self.spec.cpus_per_node,
                               name=f"{self.job_name}.{sequence}")
        client_log = self._local() / f"{sequence:03d}.srun.log"
        self._touched.add(name)
        with open(client_log, "wb") as err:
            popen = subprocess.Popen(step, env=self.client.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=err, start_new_session=True)
        assert popen.stdout is not None  # started with stdout=PIPE
        line = read_started_line(popen.stdout, popen, START_TIMEOUT_S)
        if line is None:
            code = end_group(popen, 10.0)
            popen.stdout.close()
            allocation.check()
            raise start_failure(f"starting {argv[:1]}", name, client_log, code)
        pid, ticks = parse_started(line)
        process = SlurmProcess(node=name, pid=pid, start_ticks=ticks, log_path=Path(log_path), files=files,
                               argv=list(argv), channel=allocation, client_process=popen, client_log=client_log,
                               python=self.spec.python, mark=mark, prefix=prefix)
        self._started.append(process)
        return process

    def _local(self) -> Path:
        if self._local_dir is None:
            self._local_dir = Path(tempfile.mkdtemp(prefix=f"sb-slurm-{self.run_id}-"))
        return self._local_dir

    # ------------------------------------------------------------------ the end of the run

    def _stop_failed(self, process: SlurmProcess) -> None:
        """Its srun client ends here (a TERM makes srun cancel the step)."""
        process.end_client(0.0)

    def client_pids(self) -> list[int]:
        """Local srun clients of this run's processes still running."""
        return [p.client_pid for p in self._started if p.client_process.poll() is None]

    def attach(self, record: dict) -> None:
        """Act inside a running campaign's allocation (`servebench chaos`), found by the run's record
        (`allocation_record`): steps run beside the campaign's (--overlap). The allocation stays the
        campaign's: a process that attached never releases it."""
        if not record.get("job_id"):
            raise SlurmError("the run has no Slurm allocation on record (not provisioned yet, or over)")
        allocation = Allocation(self.client, int(record["job_id"]), self.spec.remote_dir,
                                export_option(self.spec.export))
        self._nodes = [Node(**node) for node in record.get("nodes") or []]
        allocation.node_list, allocation.node_names = record.get("node_list") or "", [n.name for n in self._nodes]
        allocation.check()  # AllocationEnded (with how it ended) when it is over
        self.allocation = allocation

    def cancel_allocation(self) -> list[list]:
        """A campaign fault (`action: cancel-allocation`): scancel the run's job now, as an operator or
        a preemption would. The cells it takes fail with "allocation cancelled"; the run ends."""
        if self.allocation is None:
            raise SlurmError("the run holds no Slurm allocation to cancel")
        job = self.allocation.job_id
        self.client.scancel(job)
        return [[job, f"scancel {job}"]]

    # ------------------------------------------------------------------ the campaign as a batch job

    def batch_script(self, request: BatchRequest) -> str:
        """The sbatch script (servebench/providers/slurm/batch.py): the campaign's nodes, the run inside."""
        return sbatch_script(batch_job(self.spec, request))

    def submit_batch(self, script: Path) -> str:
        result = self.client.run(sbatch_argv(script), timeout=120)
        if result.returncode != 0:
            raise SlurmError(f"sbatch {script} failed (exit {result.returncode}): {result.stderr.strip()[-2000:]}")
        return str(parse_job_id(result.stdout))

    def batch_state(self, job_id: str) -> BatchState | None:
        result = self.client.run(job_state_argv(int(job_id)), timeout=60)
        return parse_job_state(result.stdout) if result.returncode == 0 else None

    def enclosing_job(self) -> str | None:
        job = enclosing_job(os.environ)
        return None if job is None else str(job)

    def job_listed(self, job_id: str) -> bool:
        return self.client.queued(int(job_id))

    def reclaim(self, record: dict) -> list[str]:
        """Cancel the killed orchestrator's allocation (found by the run's job name) and wait until
        Slurm no longer lists it: its steps, and every process of the run, end with it."""
        done = []
        for job in self.client.jobs_named(self.job_name):
            self.client.scancel(job)
            poll(lambda: not self.client.queued(job), RELEASE_TIMEOUT_S, interval_s=0.5)
            done.append(f"slurm job {job} of the run cancelled")
        return done

    def release(self) -> None:
        """Stop what is left (the processes started, then anything on a node that still carries the
        run's mark), remove the run's directory on each node, cancel the job and wait until squeue
        no longer lists it; the job's state at that moment is `released_state`."""
        if self.allocation is None or self.allocation.released:
            self._remove_local()
            return
        allocation = self.allocation
        errors = []
        try:
            self.stop_leftovers()
        except SlurmError as exc:
            errors.append(str(exc))
        try:
            state = allocation.state(settle_s=0.0)
        except SlurmError as exc:  # the controller does not answer: still try to cancel below
            errors.append(str(exc))
            state = "UNKNOWN"
        if state == "RUNNING":
            errors += self._clean_nodes()
        started = time.perf_counter()
        self._end_lease()  # the job is cancelled next, by this run
        try:
            if not self.enclosing:   # the job servebench runs in is its batch script's to end
                if self.client.queued(allocation.job_id):
                    self.client.scancel(allocation.job_id)
                self._wait_gone(allocation.job_id)
        except SlurmError as exc:
            errors.append(str(exc))
        self.timings["release_s"] = time.perf_counter() - started
        if state not in ("RUNNING", "UNKNOWN"):
            state = allocation.state(settle_s=5.0)  # it ended from outside: its final state shows by now
        allocation.mark_released(state)
        self.released_state = state if state != "RUNNING" else "RELEASED"
        for process in self._started:
            if process.client_process.poll() is None:
                process.end_client(0.0)
        self._remove_local()
        if errors:
            raise SlurmError(f"releasing slurm job {allocation.job_id}:\n  " + "\n  ".join(errors))

    def _wait_gone(self, job_id: int) -> None:
        if not poll(lambda: not self.client.queued(job_id), RELEASE_TIMEOUT_S, interval_s=0.1):
            raise SlurmError(f"slurm job {job_id} still listed by squeue {RELEASE_TIMEOUT_S:.0f} s after scancel")

    def _cancel(self, job_id: int) -> None:
        try:
            self.client.scancel(job_id)
            self._wait_gone(job_id)
        except SlurmError:
            pass

    def _cancel_named(self) -> None:
        """A salloc that failed or was stopped may still have left its job: cancel it by the run's job name."""
        try:
            for job_id in self.client.jobs_named(self.job_name):
                self._cancel(job_id)
        except SlurmError:
            pass

    def _remove_local(self) -> None:
        if self._local_dir is not None:
            shutil.rmtree(self._local_dir, ignore_errors=True)
            self._local_dir = None


__all__ = ["AllocationEnded", "SlurmError", "SlurmProcess", "SlurmProvider", "SlurmProviderSpec"]
