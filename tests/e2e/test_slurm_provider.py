"""The slurm provider: its command lines, parsers and node-side scripts without a cluster, then what only Slurm
does against a testbed of 2 real hosts with a real Slurm controller (the job allocated and recorded, steps, an
allocation cancelled from outside or refused, release cancelling the job, the lease of a killed orchestrator).
What every provider does (run, ports, inventory, processes started, watched and stopped on the node, files,
/dev/shm, the clock, release) is the provider contract: tests/unit/test_provider_contract.py.

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_slurm_provider.py."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from servebench.devtools.testbed import enter_argv, slurm_client_env
from servebench.providers.base import Node
from servebench.providers.slurm import AllocationEnded, SlurmError, SlurmProvider
from tests.support.shared_testbed import shared_testbed
from tests.support.slurm_provider import TIMEOUT_S, spec_of
from tests.support.testbed import allocated, node_named, on_the_testbed
from tests.support.waiting import wait_until


@pytest.fixture(scope="module")
def testbed(request):
    """The session's testbed of 2 hosts, shared with the other provider tests (tests/support/shared_testbed.py)."""
    return shared_testbed(request)


def provider_for(layout, **fields) -> SlurmProvider:
    return SlurmProvider(spec_of(partition=layout.partition, slurm_conf=str(layout.slurm_conf),
                                 python="/usr/bin/python3", **fields))


@pytest.fixture(scope="module")
def provider(testbed):
    with allocated(provider_for(testbed)) as held:
        yield held


def node(provider: SlurmProvider, name: str) -> Node:
    return node_named(provider, name)


def slurm(layout, *argv: str) -> subprocess.CompletedProcess:
    """A Slurm client command from the host, as a person would type it."""
    return subprocess.run(list(argv), env=os.environ | slurm_client_env(layout), capture_output=True, text=True,
                          timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)


def live_processes() -> list[tuple[int, list[bytes]]]:
    """(pid, argv) of every process on the host but this one and zombies (the testbed's hosts share
    its PIDs: one listing sees them all)."""
    found = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            found.append((pid, argv))
    return found


def srun_clients(job_id: int) -> list[int]:
    """Processes on the host whose command line names the job (srun clients of it)."""
    return [pid for pid, argv in live_processes() if argv[0].endswith(b"srun") and f"--jobid={job_id}".encode() in argv]


def processes_naming(needles: tuple[str, ...]) -> list[str]:
    """'PID cmdline' of every process on the host whose command line contains one of the needles."""
    lines = [f"{pid} {b' '.join(argv).decode(errors='replace').strip()}" for pid, argv in live_processes()]
    return [line for line in lines if any(needle in line.split(" ", 1)[1] for needle in needles)]


@on_the_testbed
def test_allocate_records_the_job_and_its_nodes(provider, testbed):
    print(f"allocation: {', '.join(f'{k} {v * 1000:.0f} ms' for k, v in provider.timings.items())}")
    assert isinstance(provider.job_id, int) and provider.node_list == "h[1-2]"
    nodes = provider.allocate()  # again: already held, the same nodes
    assert [(n.name, n.address, n.cpus) for n in nodes] == [(h.name, h.address, [0]) for h in testbed.hosts]
    queue = slurm(testbed, "squeue", "-h", "-j", str(provider.job_id), "-o", "%T %j %D")
    assert queue.stdout.split() == ["RUNNING", provider.job_name, "2"], queue.stderr
    assert provider.allocation_state() == "RUNNING"
    record = provider.allocation_record()
    assert record["job_id"] == provider.job_id and record["node_list"] == "h[1-2]" and len(record["nodes"]) == 2


@on_the_testbed
def test_steps_on_the_jobs_nodes_only(provider):
    """What a short command costs as a step (docs/slurm-provider.md, "Measured"); a node outside the job is refused."""
    h1 = node(provider, "h1")
    with pytest.raises(ValueError, match="not in slurm job"):
        provider.run(Node(name="h9", address="x", cpus=[0]), ["true"])
    seconds = []
    for _ in range(7):
        started = time.perf_counter()
        assert provider.run(h1, ["true"]).returncode == 0
        seconds.append(time.perf_counter() - started)
    print(f"srun step `true` on h1: median {statistics.median(seconds) * 1000:.0f} ms, "
          f"min {min(seconds) * 1000:.0f} ms, max {max(seconds) * 1000:.0f} ms")


@on_the_testbed
def test_a_job_cancelled_from_outside_fails_every_call_with_the_cause(testbed, tmp_path):
    provider = provider_for(testbed, nodes=1)
    try:
        n = provider.allocate()[0]
        process = provider.start(n, ["sleep", "60"], {}, tmp_path / "sleep.log")
        assert process.alive()
        assert slurm(testbed, "scancel", str(provider.job_id)).returncode == 0  # someone else cancels the job
        with pytest.raises(AllocationEnded, match="allocation cancelled") as ended:
            wait_until(lambda: not process.alive(), "the cancelled step to end")
        assert ended.value.state == "CANCELLED" and ended.value.job_id == provider.job_id
        with pytest.raises(AllocationEnded, match=f"slurm job {provider.job_id} on {n.name}: allocation cancelled"):
            provider.run(n, ["true"])
        with pytest.raises(AllocationEnded, match="allocation cancelled"):
            provider.start(n, ["true"], {}, tmp_path / "never.log")
        assert provider.allocation_state() == "CANCELLED"
    finally:
        provider.release()
    assert provider.released_state == "CANCELLED"
    assert slurm(testbed, "squeue", "-h", "-j", str(provider.job_id)).stdout.strip() == ""
    assert srun_clients(provider.job_id) == []


@on_the_testbed
def test_an_allocation_the_cluster_cannot_give_is_refused_with_slurms_words(testbed):
    """More CPUs per node than a node has: the controller refuses at once or queues the job; either
    way salloc gives up within allocate_timeout_s and no job of the run is left."""
    provider = provider_for(testbed, cpus_per_node=testbed.cpus + 1, allocate_timeout_s=2)
    started = time.perf_counter()
    with pytest.raises(SlurmError, match=r"no allocation of 2 node\(s\) x \d+ CPUs: salloc exit 1: .*"
                                         r"(not available|can not be satisfied|Unable to allocate)"):
        provider.allocate()
    print(f"refused in {time.perf_counter() - started:.1f} s")
    assert provider.job_id is None
    assert slurm(testbed, "squeue", "-h", "-n", provider.job_name).stdout.strip() == ""
    provider.release()


@on_the_testbed
def test_release_cancels_the_job_and_ends_its_srun_clients(testbed, tmp_path):
    """What release does for Slurm alone (the processes and the run's directory: the provider contract,
    tests/unit/test_provider_contract.py): the job cancelled and gone from squeue, every srun client of the
    run ended, every later call refused with the cause."""
    provider = provider_for(testbed)
    provider.allocate()
    job_id = provider.job_id
    h1 = node(provider, "h1")
    left = provider.start(h1, ["sleep", "60"], {}, tmp_path / "left.log")
    assert left.client_pid in srun_clients(job_id)  # (srun forks a helper with the same command line)
    started = time.perf_counter()
    provider.release()
    print(f"release (stop 1 process, clean 1 node, scancel, wait gone): {time.perf_counter() - started:.2f} s")
    assert provider.released_state == "RELEASED" and provider.allocation_state() == "RELEASED"
    assert slurm(testbed, "squeue", "-h", "-j", str(job_id)).stdout.strip() == ""
    assert srun_clients(job_id) == [] and provider.client_pids() == []
    with pytest.raises(AllocationEnded, match="released by this run"):
        provider.run(h1, ["true"])
    provider.release()  # twice: nothing more to do


ORCHESTRATOR = """
import json, pathlib, sys, time
from servebench.providers.slurm import SlurmProvider
from servebench.providers.slurm.spec import SlurmProviderSpec
provider = SlurmProvider(SlurmProviderSpec.model_validate_json(sys.argv[1]))
nodes = provider.allocate()
provider.start(nodes[1], ["sleep", "600"], {}, pathlib.Path(sys.argv[2]))
print(provider.job_id, provider.run_dir, provider.lease.warden_pid, flush=True)
time.sleep(600)
"""


@on_the_testbed
def test_a_killed_orchestrators_allocation_cancels_itself_and_leaves_nothing(testbed, tmp_path):
    """The run's lease (servebench/providers/slurm/lease.py): an orchestrator holding an allocation,
    with a process running on h2, is SIGKILLed with its whole process group; the allocation's
    warden (a task on each node) hears its end close, removes the run's directory on every node and
    cancels the job: nothing of the run is left in Slurm, on the hosts or here."""
    spec = spec_of(partition=testbed.partition, slurm_conf=str(testbed.slurm_conf), python="/usr/bin/python3",
                   lease_s=30)
    orchestrator = subprocess.Popen(
        [sys.executable, "-c", ORCHESTRATOR,
         spec.model_dump_json(), str(tmp_path / "sleep.log")],
        stdout=subprocess.PIPE, text=True, start_new_session=True, stdin=subprocess.DEVNULL,
        env=os.environ | {"TMPDIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).parents[2])})
    try:
        line = wait_until(lambda: orchestrator.stdout.readline(), "the orchestrator's allocation", TIMEOUT_S)
        job_id, run_dir, warden_pid = line.split()
        assert slurm(testbed, "squeue", "-h", "-j", job_id, "-o", "%T").stdout.strip() == "RUNNING"
    finally:
        os.killpg(orchestrator.pid, signal.SIGKILL)   # the orchestrator and all of its process group
        orchestrator.wait()
    killed = time.monotonic()
    wait_until(lambda: slurm(testbed, "squeue", "-h", "-j", job_id).stdout.strip() == "",
               "the allocation of the killed orchestrator to cancel itself", 90)
    print(f"job {job_id} gone {time.monotonic() - killed:.1f} s after its orchestrator was killed (lease 30 s)")
    wait_until(lambda: srun_clients(int(job_id)) == [], "the warden's srun client to end", 30)
    # this run's processes only: the module's `provider` fixture holds an allocation (and its warden) throughout
    ours = ("sleep 600", run_dir, f"servebench-lease-{job_id} ")
    for host in testbed.hosts:
        def left_on_host() -> str:
            found = subprocess.run(enter_argv(testbed, host) + ["sh", "-c", f"test -e {run_dir} && echo found"],
                                   capture_output=True, text=True, timeout=TIMEOUT_S).stdout.strip()
            return "\n".join(([run_dir] if found else []) + processes_naming(ours))  # (one PID space for all hosts)
        try:  # Slurm signals the job's processes, then SIGKILLs them KillWait (5 s here) later
            wait_until(lambda: left_on_host() == "", f"nothing of the run left on {host.name}", 30)
        except AssertionError:
            raise AssertionError(f"{host.name}: {left_on_host()}") from None
