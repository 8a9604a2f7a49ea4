"""Each stage of a run timed (`StageClock`) and landed in `stage_timings` (warehouse/stage_timings.py), on a
DuckDB file with the table its migration makes."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest

from warehouse.stage_timings import StageClock, land_stage_timings

MIGRATIONS = Path(__file__).resolve().parents[2] / "warehouse" / "migrations"


@pytest.fixture
def con(tmp_path):
    migration = next(MIGRATIONS.glob("*_stage_timings.sql*"))
    connection = duckdb.connect(str(tmp_path / "w.duckdb"))
    connection.execute(migration.read_text())
    yield connection
    connection.close()


def test_stages_are_numbered_in_order_and_a_failed_one_keeps_its_error():
    clock = StageClock()
    with clock.stage("provision", hosts=32):
        pass
    with pytest.raises(RuntimeError):
        with clock.stage("placement", hosts=32, subject="llamacpp"):
            raise RuntimeError("node h7: the copy does not verify")
    first, second = clock.timings
    assert (first.seq, first.stage, first.ok, first.error) == (0, "provision", True, None)
    assert (second.seq, second.subject, second.ok) == (1, "llamacpp", False)
    assert second.error == "RuntimeError: node h7: the copy does not verify"


def test_a_stage_counts_the_orchestrators_cpu_and_threads():
    clock = StageClock()
    stop = threading.Event()
    with clock.stage("busy", hosts=1):
        worker = threading.Thread(target=stop.wait)
        worker.start()
        sum(i * i for i in range(300_000))  # some CPU time of the orchestrator's own
        stop.set()
    worker.join()
    timing = clock.timings[0]
    assert timing.orchestrator_cpu_s is not None and timing.orchestrator_cpu_s > 0
    assert timing.orchestrator_threads is not None and timing.orchestrator_threads >= 2
    assert timing.seconds >= timing.orchestrator_cpu_s * 0.5


def test_landing_again_replaces_the_rows(con):
    clock = StageClock()
    for name in ("provision", "placement", "release"):
        with clock.stage(name, hosts=4):
            pass
    land_stage_timings(con, "r1", clock.timings)
    land_stage_timings(con, "r1", clock.timings)
    rows = con.execute("select seq, stage, hosts, ok from stage_timings where run_id = 'r1' order by seq").fetchall()
    assert rows == [(0, "provision", 4, True), (1, "placement", 4, True), (2, "release", 4, True)]


def test_the_campaign_s_runs_at_several_sizes_give_the_orchestration_cost_chart(con):
    from servebench.analysis.scale_report import orchestration_cost_chart, stage_points
    from warehouse.reads import stage_costs

    con.execute("create table runs (run_id varchar, campaign varchar, started_at timestamp)")
    con.execute("insert into runs values ('a', 'scale', '2026-01-01 00:00'), ('b', 'scale', '2026-01-01 01:00'), "
                "('c', 'scale', '2026-01-01 02:00'), ('x', 'other', '2026-01-01 01:30')")
    for run_id, hosts in (("a", 2), ("b", 32), ("c", 64), ("x", 8)):
        clock = StageClock()
        for name in ("provision", "server-start", "server-start", "release"):
            with clock.stage(name, hosts=hosts):
                pass
        land_stage_timings(con, run_id, clock.timings)
    found = stage_costs(con, "b")   # its campaign's runs up to it: a and b, not the later c nor another's x
    assert sorted({(r["run_id"], r["hosts"]) for r in found}) == [("a", 2), ("b", 32)]
    assert {r["stage"] for r in found} == {"provision", "server-start", "release"}  # a stage's rows summed
    assert all(p["cpu_per_host"] is not None for p in stage_points(found))
    assert orchestration_cost_chart(found) is not None
    assert orchestration_cost_chart([r for r in found if r["run_id"] == "b"]) is None   # one size: no growth
