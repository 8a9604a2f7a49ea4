"""Every run at a glance (`servebench runs --html`, runs/index.html after each run) and `servebench best`
from a run's cells under its campaign's SLO, on two synthetic nights (tp2-ray a third slower on the second)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from servebench import warehouse
from servebench.cli import main
from servebench.warehouse import landing
from tests.support import synthetic_runs

# tp1's TTFT p99 is 40 ms; tp2-ray's 67 ms on the first night, 100 ms on the second
SLO_CAMPAIGN = synthetic_runs.CAMPAIGN + "slo: {ttft_p99_ms: 80}\n"


@pytest.fixture
def nights(tmp_path, monkeypatch) -> Path:
    """Two nights of the synthetic campaign with an SLO, each run in its own directory under runs/."""
    from servebench.analysis.regression.history import analyze_run
    from servebench.config.detection import DetectionSettings

    monkeypatch.setattr(synthetic_runs, "CAMPAIGN", SLO_CAMPAIGN)
    db = tmp_path / "w.duckdb"
    con = warehouse.connect(db)
    for run_id, speed in (("r0", 0.6), ("r1", 0.4)):
        run_dir = tmp_path / "runs" / run_id
        run_dir.mkdir(parents=True)
        synthetic_runs.land_night(con, run_dir, run_id, tp2_speed=speed)
        analyze_run(con, run_id, DetectionSettings())   # their series, as each run's detection gives them
    con.close()
    return db


def test_the_index_lists_every_run_newest_first_with_cells_valid_links_and_the_comparison(nights, tmp_path, capsys):
    (tmp_path / "runs" / "r0" / "report.html").write_text("<html></html>")
    (tmp_path / "runs" / "r1" / "report.html").write_text("<html></html>")
    page = tmp_path / "runs" / "index.html"
    assert main(["runs", "--html", str(page), "--warehouse", str(nights)]) == 0
    assert capsys.readouterr().out.strip() == str(page)
    text = page.read_text()
    rows = re.findall(r"<tr><td>(.*?)</tr>", text)
    assert [row.split("</td>")[0] for row in rows] == ["r1", "r0"]
    newer, older = rows
    assert "50 of 50" in newer and "50 of 50" in older and "synthetic" in newer
    assert '<a href="r1/report.html">report</a>' in newer and '<a href="r0/report.html">report</a>' in older
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d", newer)          # the start, 24-hour UTC
    assert 'tp2-ray <span class="worse">worse</span>' in newer and "servebench compare r0 r1" in newer
    assert "tp1 <span" in newer and "within noise" in newer
    assert "first run of the campaign" in older
    assert "tok/s, tp1 at 8 clients" in newer                      # the headline, with its unit
    assert "http://" not in text and "https://" not in text and "<script" not in text   # nothing fetched


def test_the_comparison_line_of_the_second_night_says_tp2_ray_worse(nights):
    from servebench.analysis.runs_index import index_entries

    with warehouse.connect(nights, read_only=True) as con:
        newer, older = index_entries(con)
    assert (newer.run_id, newer.previous, older.previous) == ("r1", "r0", None)
    assert newer.comparison.startswith("vs r0: tp2-ray worse (") and "tp1 within noise" in newer.comparison, \
        newer.comparison
    assert [change.verdict for change in newer.changes] == ["worse", "within noise"]


def test_a_report_not_written_is_said_not_linked(nights, tmp_path):
    from servebench.analysis.runs_index import write_index

    with warehouse.connect(nights, read_only=True) as con:
        text = write_index(con, tmp_path / "elsewhere" / "index.html").read_text()
    assert "<a href" not in text and "not written (servebench report --run r1)" in text


def test_best_without_a_capacity_search_names_a_mode_per_load_point_with_its_margin(nights, capsys):
    assert main(["best", "--warehouse", str(nights), "--run", "r0"]) == 0
    header, *lines = capsys.readouterr().out.splitlines()
    assert "run r0 (synthetic" in header and "SLO ttft_p99_ms 80" in header and "no capacity search" in header
    assert [line.split()[0:2] for line in lines] == [["1", "client"], ["4", "clients"], ["8", "clients"],
                                                       ["2", "req/s"], ["8", "req/s"]]
    for line in lines:  # tp1 100 tok/s against tp2-ray's 60: both met the SLO, tp1 by its margin
        assert re.search(r"tp1  \d+(\.\d+)? tok/s, SLO headroom 50%, \+6\d\.\d% over tp2-ray \(significant\)", line), \
            line


def test_best_names_the_modes_that_missed_the_slo(nights, capsys):
    assert main(["best", "--warehouse", str(nights)]) == 0   # the campaign's latest run: r1
    header, *lines = capsys.readouterr().out.splitlines()
    assert header.startswith("run r1 (synthetic") and len(lines) == 5
    for line in lines:
        assert "tp1" in line and "the only mode that met it; missed the SLO: tp2-ray (ttft_p99_ms 100 > 80)" in line, \
            line
    assert main(["best", "--warehouse", str(nights), "--run", "r1", "--format", "json"]) == 0
    import json

    said = json.loads(capsys.readouterr().out)
    assert said["capacity"] == [] and said["per_point"][0]["slo"] == {"ttft_p99_ms": 80.0}
    assert {point["best"] for point in said["per_point"][0]["points"]} == {"tp1"}


def test_best_of_a_run_without_a_valid_cell_says_so(nights, tmp_path, capsys):
    con = warehouse.connect(nights)
    landing.insert_run(con, "r2", landing.RunRecord(
        campaign="other", spec_hash="h", spec_text="", spec_normalized={}, campaign_file="other.yaml",
        run_dir=tmp_path))
    landing.update_run(con, "r2", landing.RunUpdate(status="failed", ended_at=landing.now()))
    con.close()
    assert main(["best", "--warehouse", str(nights), "--run", "r2"]) == 1
    assert "run r2 (other, failed) has no valid cell" in capsys.readouterr().err
    assert main(["best", "--warehouse", str(nights), "--run", "nope"]) == 1
    assert "no run 'nope'" in capsys.readouterr().err


def test_cells_landed_with_a_verdict_are_judged_by_it():
    from servebench.analysis.best import best_per_point

    def cell(mode, repeat, throughput, slo_met, valid=True, ttft=50.0):
        return dict(cell_key=f"{mode}.c4.r{repeat}", mode=mode, load_kind="closed", clients=4, offered_rate=None,
                    repeat=repeat, status="completed", valid=valid, slo_met=slo_met, output_throughput=throughput,
                    invalid_reasons=None if valid else ["schedule lag p99 30 ms over 10"], ttft_p99_ms=ttft)

    slo = {"ttft_p99_ms": 100.0}
    cells = [cell("a", 0, 90.0, True), cell("a", 1, 92.0, True), cell("b", 0, 120.0, True),
             cell("b", 1, 130.0, False, valid=False), cell("c", 0, 80.0, True), cell("c", 1, 81.0, True),
             cell("d", 0, 200.0, False, ttft=150.0)]
    (point,) = best_per_point(cells, slo)
    assert (point.best, point.runner_up) == ("a", "c")      # b's second repeat not valid, d over the limit
    assert point.margin == pytest.approx(91.0 / 80.5 - 1)
    assert {mode.mode: mode.missed for mode in point.missed} == {
        "b": ["not valid: schedule lag p99 30 ms over 10"], "d": ["ttft_p99_ms 150 > 100"]}
    assert point.slo_headroom == pytest.approx(0.5)


def test_each_run_writes_the_index_beside_the_run_directories_and_a_failure_is_only_said(nights, tmp_path):
    from servebench.orchestration.run import write_runs_index
    from servebench.warehouse.sink import RunResults

    write_runs_index(RunResults(str(nights), "r1"), tmp_path / "runs")
    assert "<td>r1</td>" in (tmp_path / "runs" / "index.html").read_text()
    write_runs_index(RunResults(str(tmp_path / "missing.duckdb"), "r1"), tmp_path / "other")   # said, not raised
    assert not (tmp_path / "other" / "index.html").exists()


