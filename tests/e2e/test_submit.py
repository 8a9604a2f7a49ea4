"""`servebench submit` on the testbed's real Slurm: the campaign runs as one sbatch job, the orchestrator
on the job's first node using the job's own allocation (no second job); a job cut by its time limit
(Slurm's TERM before the limit) leaves a resumable run, and `submit --resume RUN` finishes it in a second
job, each cell landed once.

The engine is the test-only echo engine (tests/support/echo_engine): the test is about the batch job's
life, not an engine's. Everything the job reads or writes is under /var/tmp, which the testbed's hosts
see (their /tmp is their own), as a cluster's nodes see its shared file system.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from servebench import warehouse
from servebench.paths import CHECKOUT
from tests.support.testbed import echo_model, marked_processes_on, own_testbed

pytestmark = [pytest.mark.testbed, pytest.mark.root]

CAMPAIGN = """
name: submitted
provider: {{kind: slurm, nodes: 2, cpus_per_node: 1, partition: {partition}, time_limit: "10",
           slurm_conf: {slurm_conf}}}
engine: {{kind: echo, token_delay_ms: 40}}
model: {{path: {model}}}
modes:
  - {{name: single}}
load: {{clients: [1, 2, 3], repeats: 8, requests: 12, input_len: 8, output_len: 8}}   # 24 cells of ~4 s
validity: {{on_invalid: warn}}   # timing verdicts depend on the machine; this test is about the job
"""


def submit(layout, work: Path, *args: str) -> subprocess.CompletedProcess:
    """`servebench submit ARGS --wait` as a user would, with the testbed's Slurm as the cluster's."""
    env = {key: value for key, value in os.environ.items() if key != "PREFECT_API_URL"}  # the job starts its own
    env |= {"SERVEBENCH_PLUGINS": "tests.support.plugins", "PYTHONPATH": str(CHECKOUT),
            "SERVEBENCH_CACHE": str(work / "cache"), "SLURM_CONF": str(layout.slurm_conf)}
    return subprocess.run([sys.executable, "-m", "servebench", "submit", *args, "--wait",
                           "--warehouse", str(work / "w.duckdb"), "--runs", str(work / "runs")],
                          cwd=work, env=env, capture_output=True, text=True, timeout=900)


def job_log(work: Path, output: str) -> str:
    job = re.search(r"submitted job (\d+)", output)
    assert job, output
    found = list((work / "runs").glob(f"job-submitted-{job.group(1)}.out"))
    return found[0].read_text() if found else ""


def test_a_job_cut_by_its_time_limit_is_finished_by_submit_resume_each_cell_once():
    work = Path(tempfile.mkdtemp(prefix="servebench-submit-", dir="/var/tmp"))
    try:
        with own_testbed("sub", 2) as layout:
            (work / "campaign.yaml").write_text(CAMPAIGN.format(
                partition=layout.partition, slurm_conf=layout.slurm_conf, model=echo_model(work / "model")))
            first = submit(layout, work, str(work / "campaign.yaml"), "--time", "2")   # TERM 60 s before 2 min
            first_log = job_log(work, first.stdout)
            con = warehouse.connect(work / "w.duckdb", read_only=True)
            run_id, status, allocation = con.execute("select run_id, status, allocation from runs").fetchone()
            measured = dict(con.execute("select cell_key, status from cells").fetchall())
            con.close()
            assert first.returncode != 0 and "job" in first.stdout, first.stdout + first.stderr + first_log[-3000:]
            assert status == "interrupted" and 0 < len(measured) < 24, (status, measured, first_log[-3000:])
            assert '"job_id"' in allocation and "salloc" not in first_log, first_log   # the job's own nodes

            second = submit(layout, work, "--resume", run_id)
            assert "submitted job" in second.stdout, second.stdout + second.stderr
            second_log = job_log(work, second.stdout)
            assert second.returncode == 0 and "COMPLETED" in second.stdout, \
                second.stdout + second.stderr + second_log[-3000:]
            squeue = subprocess.run(["squeue", "-h"], env=os.environ | {"SLURM_CONF": str(layout.slurm_conf)},
                                    capture_output=True, text=True, timeout=60)
            assert squeue.stdout.strip() == "", squeue.stdout        # both jobs gone, no allocation of their own
            leftovers = {host.name: found for host in layout.hosts if (found := marked_processes_on(layout, host))}
            assert leftovers == {}, leftovers
        con = warehouse.connect(work / "w.duckdb", read_only=True)
        runs = con.execute("select run_id, status from runs").fetchall()
        stages = con.execute("select stage, hosts, seconds, ok from stage_timings order by seq").fetchall()
        cells = con.execute("select cell_key, status, count(*) over (partition by cell_key) from cells").fetchall()
        con.close()
        assert runs == [(run_id, "completed")], runs
        assert {"provision", "placement", "server-start", "release"} <= {stage for stage, *_ in stages}, stages
        assert all(seconds >= 0 and hosts in (1, 2) for _, hosts, seconds, _ in stages), stages
        assert sorted(key for key, *_ in cells) == sorted(f"single.c{n}.r{r}" for n in (1, 2, 3) for r in range(8))
        assert all(status == "completed" and once == 1 for _, status, once in cells), cells
        for key, earlier in measured.items():
            if earlier == "completed":
                assert (key, "completed", 1) in cells   # measured in the first job, kept, not measured again
    finally:
        shutil.rmtree(work, ignore_errors=True)
