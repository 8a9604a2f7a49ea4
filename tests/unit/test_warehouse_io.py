"""warehouse/store.py against a real DuckDB warehouse: the writes flows and tasks leave to
it (capacity, tuning, faults, a bisect step) land what those flows record, through the store
rather than SQL of their own, and its reads give back what a resume, a search going on and a
bisect step read of a run."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from servebench import warehouse
from servebench.analysis.capacity import CapacityResult, judge
from servebench.analysis.tuning import ConfigurationCapacity, tune_verdict
from servebench.campaign.loading import parse_campaign
from servebench.config.campaign import FaultSpec
from servebench.config.sweep import expand
from servebench.serving.faults import InjectedFault
from servebench.warehouse import landing, store
from tests.support.small_campaign import small_campaign_text

CAMPAIGN = small_campaign_text("{rates: [2, 4], requests: 2}", slo="{ttft_p99_ms: 500}")
SLO = {"ttft_p99_ms": 500.0}


def landed_run(tmp_path):
    """A run with its two cells (TPOT p50 10 and 12 ms, the second failed) and its server, stopped."""
    campaign = parse_campaign(CAMPAIGN)
    cells = expand(campaign)
    con = warehouse.connect(tmp_path / "w.duckdb")
    landing.insert_run(con, "r1", landing.RunRecord(
        campaign="t", spec_hash=campaign.spec_hash(), spec_text=CAMPAIGN, spec_normalized=campaign.normalized(),
        campaign_file="t.yaml", run_dir=tmp_path))
    for cell, tpot, status in zip(cells, (10.0, 12.0), ("completed", "failed")):
        summary = {"completed": 2, "failed": 0, "tpot_ms": {"p50": tpot}, "valid": True}
        landing.land_cell(con, "r1", landing.CellRecord(
            cell=cell, input_len=8, output_len=4, status=status, slo_met=True,
            measured=landing.CellMeasurement(result={"t0": {"monotonic": 1.0}, "summary": summary})))
    landing.land_server(con, "r1", landing.ServerRecord(
        mode="tp1", layout=landing.ServerLayout.of(campaign.modes[0]), pid=1, port=8000, command=["serve"],
        ready_seconds=1.0, stopped_at=landing.now(), status="ready", build_key="echo-abc"))
    return con, campaign, cells


def test_a_runs_landed_state_reads_back(tmp_path):
    con, _, cells = landed_run(tmp_path)
    try:
        assert store.completed_metric(con, "r1", "tp1", "tpot_p50_ms") == [10.0]
        assert store.run_build_key(con, "r1") == "echo-abc" and store.run_build_key(con, "r2") is None
        assert store.finished_modes(con, "r1") == {"tp1"}
        assert store.landed_cell(con, "r1", cells[1].key)["status"] == "failed"
        assert store.capacities(con, "r1") == []
    finally:
        con.close()


def test_a_capacity_and_the_tuners_verdict_land_with_the_probes_tpot(tmp_path):
    con, campaign, cells = landed_run(tmp_path)
    try:
        probes = [judge(2.0, {"ttft_p99_ms": 100.0}, SLO), judge(4.0, {"ttft_p99_ms": 900.0}, SLO)]
        result = CapacityResult(capacity=2.0, upper=4.0, probes=probes, converged=True, why="bracketed")
        store.land_capacity(con, "r1", campaign.modes[0], "rate", SLO, result, [c.key for c in cells])
        assert store.capacities(con, "r1") == [("tp1", 2.0)]
        row = warehouse.rows(con, "select * from capacity where run_id = 'r1'")[0]
        assert (row["tpot_p50_ms"], row["probes"], json.loads(row["probe_cells"])) == (10.0, 2, [c.key for c in cells])

        found = [ConfigurationCapacity(**row) for row in landing.capacity_configurations(con, "r1")]
        verdict = tune_verdict(found, "tp1")
        store.land_tuning(con, "r1", "rate", SLO, verdict, configurations=1)
        tuning = warehouse.rows(con, "select * from tuning where run_id = 'r1'")[0]
        assert (tuning["default_mode"], tuning["configurations"], tuning["launches"]) == ("tp1", 1, 1)
    finally:
        con.close()


def test_faults_and_a_bisect_step_land_by_column_name(tmp_path):
    con, _, cells = landed_run(tmp_path)
    try:
        fault = InjectedFault(spec=FaultSpec(cell=cells[0].key, action="kill", at_s=1.0), node="n0",
                              at=datetime.now(timezone.utc), t_mono=2.0, hit=[[123, "echo serve"]], fired_s=1.5)
        store.land_faults(con, "r1", cells[0].key, "tp1", [fault])
        landed = warehouse.rows(con, "select * from faults where run_id = 'r1'")[0]
        assert (landed["action"], landed["node"], landed["at_s"], json.loads(landed["hit"])) == (
            "kill", "n0", 1.5, [[123, "echo serve"]])

        step = dict(bisect_id="b1", step=0, campaign="t", mode="tp1", metric="tpot_p50_ms", direction="lower",
                    good="a" * 40, bad="b" * 40, commit_hash="a" * 40, subject="first", run_id="r1",
                    build_key="echo-abc", repeat_values=[10.0], value=10.0, change=None, separation=None,
                    verdict="baseline", measured_at=datetime.now(timezone.utc))
        store.land_bisect_step(con, step)
        assert warehouse.rows(con, "select verdict, repeat_values from bisect_steps")[0] == {
            "verdict": "baseline", "repeat_values": [10.0]}
    finally:
        con.close()
