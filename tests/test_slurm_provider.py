"""The slurm provider: its command lines, parsers and node-side scripts without
a cluster, then what only Slurm does against a testbed of 2 real hosts with a real Slurm controller
(the job allocated and recorded, steps, an allocation cancelled from outside or refused, release
cancelling the job, the lease of a killed orchestrator). What every provider does (run, ports,
inventory, processes started, watched and stopped on the node, files, /dev/shm, the clock,
release) is the provider contract: tests/test_provider_contract.py.

The testbed half needs root and the testbed's Debian packages (docs/testbed.md); without them
it is skipped with the reason.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from servebench.devtools.testbed import enter_argv, slurm_client_env
from servebench.providers.base import Node
from servebench.providers.slurm import AllocationEnded, SlurmError, SlurmProvider
from servebench.providers.slurm.argv import (
    client_env,
    ended_message,
    job_state,
    launch_argv,
    parse_granted,
    parse_probe,
    parse_record,
    parse_records,
    parse_started,
    parse_status,
    probe_argv,
    remote_files,
    remote_run_dir,
    salloc_argv,
    status_argv,
    step_argv,
    strip_srun_noise,
)
from servebench.providers.slurm.spec import SlurmProviderSpec
from tests.support.shared_testbed import shared_testbed
from tests.support.testbed import allocated, node_named, on_the_testbed
from tests.support.waiting import wait_until

TIMEOUT_S = 60


def spec_of(**fields) -> SlurmProviderSpec:
    return SlurmProviderSpec.model_validate({"kind": "slurm", "nodes": 2, "cpus_per_node": 1, "time_limit": "10",
                                             **fields})


# ---------------------------------------------------------------------------- the campaign's block

def test_spec_reads_the_block_and_gives_node_specs():
    spec = spec_of(nodes=3, cpus_per_node=4, partition="batch", time_limit="1-02:00:00", account="proj",
                   client_env={"SLURM_CLUSTERS": "c1", "X": 1})
    assert [(n.name, n.cpus) for n in spec.node_specs()] == [(f"node{i}", [0, 1, 2, 3]) for i in (1, 2, 3)]
    assert spec.total_cpus == 12 and spec.client_env == {"SLURM_CLUSTERS": "c1", "X": "1"}
    assert [n.name for n in spec_of(nodelist=["h1", "h3"]).node_specs()] == ["h1", "h3"]
    assert SlurmProviderSpec.nodes_on_this_host is False and SlurmProviderSpec.nodes_field == "nodes"
    for time_limit in ("30", "1:30", "01:30:00", "2-0", "2-12:00"):
        assert spec_of(time_limit=time_limit).time_limit == time_limit
    assert spec_of(time_limit=45).time_limit == "45"  # minutes
    for bad in ({"time_limit": "infinite"}, {"time_limit": "1h"}, {"partition": "-x"}, {"account": "a b"},
                {"nodes": 0}, {"cpus_per_node": 0}, {"nodelist": ["h1"]}, {"nodelist": ["h1", "h1"]},
                {"nodelist": ["h1", "-w"]}, {"salloc_args": ["qos"]}, {"typo": 1}):
        with pytest.raises(ValidationError):
            spec_of(**bad)


def test_spec_problems_are_sanity_checks(tmp_path):
    assert SlurmProvider.spec_problems(spec_of(), {0}) == []
    missing = SlurmProvider.spec_problems(spec_of(slurm_conf=str(tmp_path / "no.conf")), {0})
    assert [path for path, _ in missing] == [("provider", "slurm_conf")]
    conf = tmp_path / "slurm.conf"
    conf.write_text("")
    both = SlurmProvider.spec_problems(spec_of(slurm_conf=str(conf), client_env={"SLURM_CONF": "/other"}), {0})
    assert [path for path, _ in both] == [("provider", "client_env", "SLURM_CONF")]


def test_nodes_before_allocating_and_no_step_without_an_allocation():
    provider = SlurmProvider(spec_of(cpus_per_node=2), run_id="ab12cd34")
    assert provider.nodes() == [Node(name=name, address="", cpus=[0, 1]) for name in ("node1", "node2")]
    assert provider.job_id is None and provider.node_list is None and provider.allocation_state() == "NOT_ALLOCATED"
    command = provider.command(provider.nodes()[0], ["echo", "x y"])
    assert command[:3] == ["srun", "--overlap", "--jobid=<job id>"] and "--nodelist=node1" in command
    assert command[-5:] == ["taskset", "-c", "0-1", "echo", "x y"] and "--cpus-per-task=2" in command
    with pytest.raises(SlurmError, match="no allocation yet"):
        provider.run(provider.nodes()[0], ["true"])
    provider.release()  # nothing allocated: nothing to do


# ---------------------------------------------------------------------------- command lines and parsers (pure)

def test_salloc_argv():
    argv = salloc_argv(spec_of(nodes=2, cpus_per_node=3, partition="p", account="a", time_limit="5",
                               nodelist=["h1", "h2"], exclusive=True, salloc_args=["--qos=short"],
                               allocate_timeout_s=30), "servebench-ab12")
    assert argv == ["salloc", "--no-shell", "--job-name=servebench-ab12", "--nodes=2", "--ntasks-per-node=1",
                    "--cpus-per-task=3", "--time=5", "--immediate=30", "--partition=p", "--account=a",
                    "--nodelist=h1,h2", "--exclusive", "--qos=short"]
    assert "--partition" not in " ".join(salloc_argv(spec_of(), "n"))


def test_qos_and_constraint_go_to_salloc_and_leave_the_spec_hash_alone_when_unset():
    argv = salloc_argv(spec_of(partition="p", account="a", qos="normal", constraint="intel&avx512",
                               salloc_args=["--reservation=bench"]), "n")
    assert argv[-4:] == ["--account=a", "--qos=normal", "--constraint=intel&avx512", "--reservation=bench"]
    for constraint in ("sapphirerapids", "grace|neoverse_v2", "[rack1|rack2]", "intel&(avx512|amx)"):
        assert spec_of(constraint=constraint).constraint == constraint
    for bad in ({"qos": "-x"}, {"qos": "a b"}, {"constraint": "-w h1"}, {"constraint": "a b"}):
        with pytest.raises(ValidationError):
            spec_of(**bad)
    unset = spec_of().model_dump(mode="json")   # a campaign without them: the same normalized spec as before
    assert "qos" not in unset and "constraint" not in unset
    assert spec_of(qos="q").model_dump(mode="json")["qos"] == "q"


def test_client_env_drops_the_orchestrators_job_context(tmp_path):
    environ = {"PATH": "/bin", "SLURM_JOB_ID": "9", "SLURM_CPUS_PER_TASK": "8", "SRUN_CPUS_PER_TASK": "8",
               "SALLOC_PARTITION": "x", "SLURM_CONF": "/etc/a.conf", "SLURM_CLUSTERS": "c"}
    assert client_env(environ, spec_of()) == {"PATH": "/bin", "SLURM_CONF": "/etc/a.conf", "SLURM_CLUSTERS": "c"}
    env = client_env(environ, spec_of(slurm_conf=str(tmp_path / "b.conf"), client_env={"MUNGE": "1"}))
    assert env["SLURM_CONF"] == str(tmp_path / "b.conf") and env["MUNGE"] == "1"


def test_parsers():
    assert parse_granted("salloc: Pending job allocation 12\nsalloc: Granted job allocation 12\n") == 12
    assert parse_granted("salloc: error: Job submit/allocate failed: Invalid partition name specified") is None
    line = ("JobId=7 JobName=servebench-ab JobState=RUNNING Reason=None NodeList=h[1-2] "
            "Command=(null) Comment=two words here TimeLimit=00:05:00")
    record = parse_record(line)
    assert record["NodeList"] == "h[1-2]" and record["Comment"] == "two words here" and job_state(record) == "RUNNING"
    assert job_state({}) == "UNKNOWN"
    nodes = parse_records("NodeName=h1 Arch=x86_64 NodeAddr=198.18.0.1 OS=Linux 6.1.0 #1 SMP\n"
                          "NodeName=h2 NodeAddr=198.18.0.2\n")
    assert [(n["NodeName"], n["NodeAddr"]) for n in nodes] == [("h1", "198.18.0.1"), ("h2", "198.18.0.2")]
    assert nodes[0]["OS"] == "Linux 6.1.0 #1 SMP"
    assert parse_probe('["h2", [0, 1]]\n["h1", [0, 1]]\n') == {"h1": [0, 1], "h2": [0, 1]}
    assert parse_started("started 123 456") == (123, 456)
    for bad in ("", "123 456", "started x 1", "srun: error"):
        with pytest.raises(ValueError):
            parse_started(bad)
    assert parse_status("alive\n") == (True, None) and parse_status("exit 7") == (False, 7)
    assert parse_status("gone") == (False, None)


def test_ended_messages_name_the_cause():
    assert ended_message(7, "CANCELLED", "h[1-2]") == "slurm job 7 on h[1-2]: allocation cancelled"
    assert ended_message(7, "TIMEOUT", "h1").endswith("allocation ended: TIMEOUT")
    assert ended_message(7, "NODE_FAIL", "").endswith("slurm job 7: allocation ended: NODE_FAIL")
    assert "no longer knows" in ended_message(7, "GONE", "h1")
    assert "released by this run" in ended_message(7, "RELEASED", "h1")


def test_step_argv():
    argv = step_argv(7, "h2", ["printf", "%s", "a b"], "/tmp", cpus=2, name="servebench-x.1")
    assert argv == ["srun", "--overlap", "--jobid=7", "--nodelist=h2", "--nodes=1", "--ntasks=1", "--export=ALL",
                    "--mpi=none", "--quiet", "--chdir=/tmp", "--cpus-per-task=2", "--job-name=servebench-x.1", "--",
                    "printf", "%s", "a b"]
    probe = probe_argv(7, 3, 2, "python3", "/tmp")
    assert "--nodes=3" in probe and "--ntasks-per-node=1" in probe and probe[-3:-1] == ["python3", "-c"]


def test_strip_srun_noise():
    stderr = ("real error\nsrun: error: h2: task 0: Exited with exit code 3\nsrun: error: h1: task 0: Terminated\n"
              "srun: Force Terminated StepId=7.3\nsrun: error: Unable to create step for job 7: x\n")
    assert strip_srun_noise(stderr) == "real error\nsrun: error: Unable to create step for job 7: x\n"


def test_launch_and_status_scripts_here(tmp_path):
    """The task's scripts are plain sh: run here, they record, report and exit as on a node."""
    run_dir = str(tmp_path / "run")
    files = remote_files(run_dir, 1, "p 1.log")
    assert files.log == f"{run_dir}/001-p_1.log" and files.pid.endswith("001-p_1.pid")
    result = subprocess.run(launch_argv(run_dir, files, ["sh", "-c", "echo out $0; echo err >&2; exit 3", "x y"]),
                            capture_output=True, text=True, timeout=TIMEOUT_S)
    pid, ticks = parse_started(result.stdout.splitlines()[0])
    assert result.returncode == 3 and result.stdout.count("\n") == 1  # the command's output went to the log
    assert Path(files.pid).read_text().split() == [str(pid), str(ticks)]
    assert Path(files.exit).read_text() == "3\n" and Path(files.log).read_text() == "out x y\nerr\n"
    assert oct(Path(run_dir).stat().st_mode)[-3:] == "700"
    status = subprocess.run(status_argv(pid, ticks, files.exit), capture_output=True, text=True).stdout
    assert parse_status(status) == (False, 3)
    status = subprocess.run(status_argv(os.getpid(), 1, files.exit + "x"), capture_output=True, text=True).stdout
    assert parse_status(status) == (False, None)  # a live PID with another start time is not the process
    assert remote_run_dir("/tmp/", "ab12cd34") == "/tmp/servebench-ab12cd34"


# ---------------------------------------------------------------------------- two real hosts

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
    tests/test_provider_contract.py): the job cancelled and gone from squeue, every srun client of the
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
        env=os.environ | {"TMPDIR": str(tmp_path), "PYTHONPATH": str(Path(__file__).parent.parent)})
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
