"""Issue 19: the orchestrator SIGKILLed mid-campaign, then `servebench resume`.

`servebench run` is started as a process of its own (the test-only echo engine and plain
provider come in through SERVEBENCH_PLUGINS), killed with SIGKILL (its whole process group)
once two cells have results, and resumed. Asserted: the killed run left servers running (what
a resume must reclaim), the resumed run's cells are exactly a clean run's, each once, each with
all its requests; nothing of the run is left running; a finished run is not resumed again, and
`rerun-failed` measures only failed cells.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from servebench import warehouse
from servebench.providers import node_tools, run_tag
from tests.support.campaign_process import CAPACITY_CAMPAIGN, cells_of, echo_campaign_dir, finish, servebench
from tests.support.waiting import wait_until

pytestmark = pytest.mark.e2e

CAMPAIGN = """
name: resume-me
provider: {kind: plain, nodes: [{name: a, cpus: "0"}, {name: b, cpus: "0"}]}
engine: {kind: echo, token_delay_ms: 40}
model: {path: model}
modes:
  - {name: single}
  - {name: split, pp: 2, executor: split}
load: {clients: [1, 2], rates: [8], requests: 12, input_len: 8, output_len: 8, client: {cpus: "1"}}
validity: {on_invalid: warn}   # timing verdicts depend on the machine; this test is about the plumbing
"""


def results(tmp_path: Path) -> list[Path]:
    """The result files of the cells measured so far, of every run under tmp_path."""
    return list((tmp_path / "runs").glob("*/cells/*.json"))


def under_way(tmp_path: Path) -> list[Path]:
    """Progress files of cells whose load runs now: a load generator's, without a result yet."""
    return [path for path in (tmp_path / "runs").glob("*/cells/*.progress") if not path.with_suffix(".json").exists()]


@pytest.fixture
def campaign(tmp_path) -> Path:
    return echo_campaign_dir(tmp_path, {"campaign.yaml": CAMPAIGN}) / "campaign.yaml"


def test_a_sigkilled_orchestrator_is_resumed_to_a_clean_runs_cells_each_measured_once(campaign, tmp_path):
    code, out = finish(servebench(tmp_path, "run", str(campaign), "--warehouse", str(tmp_path / "clean.duckdb")))
    assert code == 0, out
    clean = cells_of(tmp_path / "clean.duckdb")
    assert len(clean) == 6 and all(status == "completed" and n == 12 for _, status, n in clean), clean

    killed = servebench(tmp_path, "run", str(campaign), "--warehouse", str(tmp_path / "w.duckdb"))
    wait_until(lambda: len(results(tmp_path)) >= 6 + 2, "two cells of this run to land (after the clean run's six)",
               timeout_s=300, poll_s=0.05)
    wait_until(lambda: under_way(tmp_path), "the next cell's load to start", timeout_s=300, poll_s=0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    run_dirs = sorted((tmp_path / "runs").iterdir(), key=lambda d: d.stat().st_mtime)
    run_id = run_dirs[-1].name
    tag = f"{run_tag(run_id)}."
    left = node_tools._marked(node_tools._table(), tag, prefix=True)
    assert left, "the killed orchestrator left nothing running: nothing for resume to reclaim"

    code, out = finish(servebench(tmp_path, "resume", run_id, "--warehouse", str(tmp_path / "w.duckdb")))
    assert code == 0, out
    assert "reclaimed: this host: stopped" in out, out
    resumed = cells_of(tmp_path / "w.duckdb")
    assert [key for key, _, _ in resumed] == [key for key, _, _ in clean]  # the same cells, each once
    assert all(status == "completed" and n == 12 for _, status, n in resumed), resumed
    con = warehouse.connect(tmp_path / "w.duckdb", read_only=True)
    status, resumes = con.execute("select status, resumes from runs where run_id = ?", [run_id]).fetchone()
    con.close()
    note = json.loads(resumes)[-1]
    assert status == "completed" and note["kind"] == "resume" and note["status_before"] == "running", note
    assert 0 < len(note["measured"]) < 6 and set(note["measured"]).isdisjoint(note["landed_from_run_dir"]), note
    assert node_tools._marked(node_tools._table(), tag, prefix=True) == {}  # nothing of the run left

    code, out = finish(servebench(tmp_path, "resume", run_id, "--warehouse", str(tmp_path / "w.duckdb")))
    assert code != 0 and "finished (completed): nothing to resume" in out, out
    code, out = finish(servebench(tmp_path, "rerun-failed", run_id, "--warehouse", str(tmp_path / "w.duckdb")))
    assert code == 0 and "0 to measure" in out, out
    assert cells_of(tmp_path / "w.duckdb") == resumed


SEARCH = CAPACITY_CAMPAIGN  # killed mid-search here


def test_a_capacity_search_cut_by_a_sigkill_is_finished_by_resume_reusing_its_probes(tmp_path):
    """Killed after its load point and two probes: the resume finishes the search, reusing the
    probes already measured (their result files untouched) and lands the capacity."""
    campaign = echo_campaign_dir(tmp_path, {"campaign.yaml": SEARCH}) / "campaign.yaml"
    killed = servebench(tmp_path, "run", str(campaign), "--warehouse", str(tmp_path / "w.duckdb"))
    wait_until(lambda: len(results(tmp_path)) >= 3, "the load point and two probes to land", timeout_s=300,
               poll_s=0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    run_id = next((tmp_path / "runs").iterdir()).name
    before = {path.name: path.stat().st_mtime_ns for path in (tmp_path / "runs" / run_id / "cells").glob("*.json")}
    assert len([name for name in before if ".cap." in name]) >= 2, before

    code, out = finish(servebench(tmp_path, "resume", run_id, "--warehouse", str(tmp_path / "w.duckdb")))
    assert code == 0, out
    assert "capacity searches to finish: single" in out, out
    after = {path.name: path.stat().st_mtime_ns for path in (tmp_path / "runs" / run_id / "cells").glob("*.json")}
    assert all(after[name] == mtime for name, mtime in before.items()), (before, after)  # nothing measured twice
    con = warehouse.connect(tmp_path / "w.duckdb", read_only=True)
    capacity, probes, probe_cells = con.execute("select capacity, probes, probe_cells from capacity").fetchone()
    landed = {key for (key,) in con.execute("select cell_key from cells where search_probe").fetchall()}
    status = con.execute("select status from runs").fetchone()[0]
    con.close()
    assert status == "completed" and 8 <= capacity <= 14 and probes == len(landed), (status, capacity, probes)
    assert set(json.loads(probe_cells)) == landed and {name.removesuffix(".json") for name in before} - {"single.rate1.r0"} <= landed
