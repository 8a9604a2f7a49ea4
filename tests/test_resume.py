"""The orchestrator SIGKILLed mid-campaign, then `servebench resume`.

`servebench run` is started as a process of its own (the test-only echo engine and plain
provider come in through SERVEBENCH_PLUGINS), killed with SIGKILL (its whole process group)
once two cells have results, and resumed. Asserted: the killed run left servers running (what
a resume must reclaim), the resumed run's cells are exactly the ones a clean run measures (the
campaign's plan: a clean run of it is every other campaign test's), each once, each with all its
requests and its attempts (`cell_attempts`); nothing of the run is left running; a finished run is
not resumed again, and `resume --failed` measures only failed cells. A capacity search killed midway
is finished by the resume, and the search it lands is the whole search's (the probes as cells, their
verdicts, the capacity). A test that fails before its resume stops what the killed run left
(`nothing_left`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from servebench import warehouse
from servebench.providers import node_tools, run_tag
from servebench.providers.this_host import scratch_path
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


SUPERSEDED = re.compile(r"\.attempt\d+\.json$")  # an invalid measurement taken again (validity.retries)


def results(tmp_path: Path, part: str = "") -> list[Path]:
    """The current result files of the cells measured so far (whose name has `part`), of every run
    under tmp_path: not the attempts a cell's measuring again superseded (`<key>.attempt<N>.json`),
    which would count one cell twice."""
    return [path for path in (tmp_path / "runs").glob("*/cells/*.json")
            if not SUPERSEDED.search(path.name) and part in path.name]


def under_way(tmp_path: Path) -> list[Path]:
    """Progress files of cells whose load runs now: a load generator's, without a result yet."""
    return [path for path in (tmp_path / "runs").glob("*/cells/*.progress") if not path.with_suffix(".json").exists()]


@contextmanager
def nothing_left(tmp_path: Path) -> Iterator[list[subprocess.Popen]]:
    """Processes the test starts go in the list. On the way out, a failed assertion included: each
    still running is killed with its process group, and whatever a run under tmp_path left (every
    process carrying its tag: servers, node samplers, the scraper; its scratch directory) is stopped
    and removed, as a resume would have, so a test failing before its resume leaves nothing behind."""
    started: list[subprocess.Popen] = []
    try:
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait(timeout=30)  # not its pipe: a server the run left may hold it until stopped below
        for run_dir in (tmp_path / "runs").glob("*"):
            node_tools.stop_marked(f"{run_tag(run_dir.name)}.", grace_s=5.0)
            shutil.rmtree(scratch_path(run_tag(run_dir.name)), ignore_errors=True)


@pytest.fixture
def campaign(tmp_path) -> Path:
    return echo_campaign_dir(tmp_path, {"campaign.yaml": CAMPAIGN}) / "campaign.yaml"


def test_a_sigkilled_orchestrator_is_resumed_to_a_clean_runs_cells_each_measured_once(campaign, tmp_path):
    with nothing_left(tmp_path) as started:
        sigkilled_and_resumed(campaign, tmp_path, started)


def planned_cells(campaign: Path) -> list[str]:
    """The keys of the cells a clean run of the campaign measures (`servebench plan`'s), sorted."""
    import tests.support.plugins  # noqa: F401  (the echo engine and plain provider, registered)
    from servebench.campaign.loading import load_campaign
    from servebench.config.sweep import expand

    return sorted(cell.key for cell in expand(load_campaign(campaign)))


def sigkilled_and_resumed(campaign: Path, tmp_path: Path, started: list[subprocess.Popen]) -> None:
    """The killed run and its resume (every process started goes in `started`)."""
    clean = planned_cells(campaign)
    assert len(clean) == 6, clean
    started.append(killed := servebench(tmp_path, "run", str(campaign), "--warehouse", str(tmp_path / "w.duckdb")))
    wait_until(lambda: len(results(tmp_path)) >= 2, "two cells of the run to land", timeout_s=300, poll_s=0.05)
    wait_until(lambda: under_way(tmp_path), "the next cell's load to start", timeout_s=300, poll_s=0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    run_dirs = sorted((tmp_path / "runs").iterdir(), key=lambda d: d.stat().st_mtime)
    run_id = run_dirs[-1].name
    tag = f"{run_tag(run_id)}."
    left = node_tools._marked(node_tools._table(), tag, prefix=True)
    assert left, "the killed orchestrator left nothing running: nothing for resume to reclaim"

    started.append(resume := servebench(tmp_path, "resume", run_id, "--warehouse", str(tmp_path / "w.duckdb")))
    code, out = finish(resume)
    assert code == 0, out
    assert "reclaimed: this host: stopped" in out, out
    resumed = cells_of(tmp_path / "w.duckdb")
    assert [key for key, _, _ in resumed] == clean  # the cells a clean run measures, each once
    assert all(status == "completed" and n == 12 for _, status, n in resumed), resumed
    con = warehouse.connect(tmp_path / "w.duckdb", read_only=True)
    status, resumes = con.execute("select status, resumes from runs where run_id = ?", [run_id]).fetchone()
    attempts = con.execute("select cell_key, c.attempts, count(a.attempt), count(a.attempt) filter (not a.superseded) "
                           "from cells c left join cell_attempts a using (run_id, cell_key) group by all").fetchall()
    con.close()
    # every cell with its attempts, those landed from the killed run's files too; the last is the cell's
    assert len(attempts) == 6 and all(n == rows and last == 1 for _, n, rows, last in attempts), attempts
    note = json.loads(resumes)[-1]
    assert status == "completed" and note["kind"] == "resume" and note["status_before"] == "running", note
    assert 0 < len(note["measured"]) < 6 and set(note["measured"]).isdisjoint(note["landed_from_run_dir"]), note
    assert node_tools._marked(node_tools._table(), tag, prefix=True) == {}  # nothing of the run left

    started.append(again := servebench(tmp_path, "resume", run_id, "--warehouse", str(tmp_path / "w.duckdb")))
    code, out = finish(again)
    assert code != 0 and "finished (completed): nothing to resume" in out, out
    started.append(rerun := servebench(tmp_path, "resume", "--failed", run_id,
                                       "--warehouse", str(tmp_path / "w.duckdb")))
    code, out = finish(rerun)
    assert code == 0 and "0 to measure" in out, out
    assert cells_of(tmp_path / "w.duckdb") == resumed


SEARCH = CAPACITY_CAMPAIGN  # killed mid-search here


@pytest.mark.nightly(reason=(
    "a capacity search cut by SIGKILL and finished by resume; the test command keeps a SIGKILLed campaign "
    "resumed (the test above) and a capacity search through the flow (test_tuning)"))
def test_a_capacity_search_cut_by_a_sigkill_is_finished_by_resume_reusing_its_probes(tmp_path):
    """Killed after its load point and two probes: the resume finishes the search, reusing the
    probes already measured (their result files untouched), and the search it lands is what an
    uncut one lands: every probe a cell `single.cap.rate<r>.r0` with `search_probe` and all its
    requests, `slo_met` true exactly at the rates up to the capacity, the probes in `capacity`
    those cells, at most 8, converged near the echo engine's 10 req/s (one 100 ms prefill
    engine; the 400 ms p99 allows a little more)."""
    campaign = echo_campaign_dir(tmp_path, {"campaign.yaml": SEARCH}) / "campaign.yaml"
    with nothing_left(tmp_path) as started:
        run_id, before = killed_after_two_probes(campaign, tmp_path, started)
        started.append(resume := servebench(tmp_path, "resume", run_id, "--warehouse", str(tmp_path / "w.duckdb")))
        code, out = finish(resume)
    assert code == 0, out
    assert "capacity searches to finish: single" in out, out
    after = {path.name: path.stat().st_mtime_ns for path in (tmp_path / "runs" / run_id / "cells").glob("*.json")}
    assert all(after[name] == mtime for name, mtime in before.items()), (before, after)  # nothing measured twice
    con = warehouse.connect(tmp_path / "w.duckdb", read_only=True)
    capacity, upper, probes, converged, probe_cells = con.execute(
        "select capacity, upper, probes, converged, probe_cells from capacity where mode = 'single'").fetchone()
    cells = {key: (rate, probe, met, n) for key, rate, probe, met, n in con.execute(
        "select cell_key, offered_rate, search_probe, slo_met, completed + failed from cells").fetchall()}
    status = con.execute("select status from runs").fetchone()[0]
    con.close()
    assert status == "completed", (status, out)
    assert cells.pop("single.rate1.r0") == (1.0, False, True, 20)  # the campaign's own point, within the SLO
    assert sorted(cells) == sorted(json.loads(probe_cells)) and len(cells) == probes <= 8 and converged, cells
    assert all(probe and n == 20 and met == (rate <= capacity) for rate, probe, met, n in cells.values()), cells
    assert 8 <= capacity < upper <= 14, (capacity, upper)
    assert {name.removesuffix(".json") for name in before if not SUPERSEDED.search(name)} - {"single.rate1.r0"} \
        <= set(cells)  # the killed run's probes are the search's
    print(f"capacity {capacity:g} req/s, missed at {upper:g}, {probes} probes: {sorted(r for r, *_ in cells.values())}")


def killed_after_two_probes(campaign: Path, tmp_path: Path, started: list[subprocess.Popen]
                            ) -> tuple[str, dict[str, int]]:
    """The search's run, SIGKILLed once two probes have results; its id and its result files'
    mtimes (superseded attempts too) then."""
    started.append(killed := servebench(tmp_path, "run", str(campaign), "--warehouse", str(tmp_path / "w.duckdb")))
    wait_until(lambda: len(results(tmp_path, ".cap.")) >= 2, "two probes of the search to land", timeout_s=300,
               poll_s=0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=30)
    run_id = next((tmp_path / "runs").iterdir()).name
    assert len(results(tmp_path, ".cap.")) >= 2 and results(tmp_path, "single.rate1.r0"), results(tmp_path)
    return run_id, {path.name: path.stat().st_mtime_ns
                    for path in (tmp_path / "runs" / run_id / "cells").glob("*.json")}
