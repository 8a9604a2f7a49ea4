"""The slurm provider: its command lines, parsers and node-side scripts without
a cluster, then what only Slurm does against a testbed of 2 real hosts with a real Slurm controller
(the job allocated and recorded, steps, an allocation cancelled from outside or refused, release
cancelling the job, the lease of a killed orchestrator). What every provider does (run, ports,
inventory, processes started, watched and stopped on the node, files, /dev/shm, the clock,
release) is the provider contract: tests/unit/test_provider_contract.py.

The testbed half needs root and the testbed's Debian packages (docs/testbed.md); without them
it is skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from pydantic import ValidationError

from servebench.providers.base import Node
from servebench.providers.slurm import SlurmError, SlurmProvider
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
from tests.support.slurm_provider import TIMEOUT_S, spec_of

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


