"""The orchestrator SIGKILLed mid-campaign, then `servebench resume`.

Here the nightly lane's (skipped by the test command, each with its reason); the test command's are in
tests/e2e/test_resume.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from servebench import warehouse
from tests.support.campaign_process import CAPACITY_CAMPAIGN, echo_campaign_dir, finish, servebench
from tests.support.resume import SUPERSEDED, nothing_left, results
from tests.support.waiting import wait_until

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
