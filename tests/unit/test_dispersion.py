"""Dispersion over repeats: the CV and the bootstrap interval of the median on
known inputs; the `cell_dispersion` view and `cell_intervals` on a synthetic warehouse landed
through servebench's own landing code; the end-of-run table's spread rows; the report's error
bars; `servebench compare` saying "within noise"."""

import json
import statistics
import subprocess
import sys

import numpy as np
import pytest

from servebench import warehouse
from servebench.analysis.cell_dispersion import land_intervals, run_spreads
from servebench.analysis.dispersion import coefficient_of_variation, median_interval, range_coverage, spread
from servebench.analysis.regression.compare import compare_runs
from servebench.analysis.report import build_charts, run_report
from servebench.analysis.run_summary import summarize
from tests.support.synthetic_runs import synthetic_warehouse


def test_cv_is_the_sample_stdev_over_the_mean():
    assert coefficient_of_variation([90.0, 100.0, 110.0]) == pytest.approx(10 / 100)
    assert coefficient_of_variation([5.0, 5.0]) == 0.0
    assert coefficient_of_variation([7.0]) is None              # one repeat: no spread
    assert coefficient_of_variation([0.0, 0.0, 0.0]) is None    # a goodput of 0 every time: undefined


@pytest.mark.parametrize("values", [[10.0, 12.0], [78.9, 81.2, 83.0], [3.0, 1.0, 2.0, 9.0], [5.0, 1.0, 4.0, 2.0, 3.0]])
def test_below_six_repeats_the_interval_is_the_range(values):
    assert median_interval(values) == (min(values), max(values))


def test_from_six_repeats_the_interval_narrows_inside_the_range_and_holds_the_median():
    values = [float(v) for v in range(1, 22)]                       # 21 repeats, median 11
    low, high = median_interval(values)
    assert 1.0 < low < 11.0 < high < 21.0
    assert median_interval(values) == (low, high)                    # seeded: the same every time


def test_the_bootstrap_interval_holds_the_true_median_about_95_percent_with_many_repeats():
    rng = np.random.default_rng(3)
    draws = [rng.lognormal(0.0, 0.3, 25) for _ in range(200)]        # true median exp(0) = 1
    held = sum(lo <= 1.0 <= hi for lo, hi in (median_interval(list(d)) for d in draws)) / len(draws)
    assert 0.88 <= held <= 0.99


def test_a_spread_reads_as_median_cv_and_interval():
    s = spread([78.9, 81.2, 83.0])
    assert (s.repeats, s.median, s.minimum, s.maximum) == (3, 81.2, 78.9, 83.0)
    assert s.text() == "81.2 ±3% [78.9, 83.0]"
    single = spread([81.2])
    assert (single.low, single.high, single.cv) == (None, None, None) and single.text() == "81.2"
    assert s.overlaps(spread([82.0, 84.0, 86.0])) and not s.overlaps(spread([90.0, 91.0]))
    assert s.overlaps(single) is None
    assert [range_coverage(n) for n in (2, 3, 5)] == [0.5, 0.75, 0.9375]
    with pytest.raises(ValueError, match="at least 2 values"):
        median_interval([1.0])


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """Two synthetic nights of 5 repeats (tp2-ray a third slower on r1), intervals landed for r1 only."""
    tmp = tmp_path_factory.mktemp("dispersion")
    path = tmp / "w.duckdb"
    synthetic_warehouse(path, tmp)
    con = warehouse.connect(path)
    landed = land_intervals(con, "r1")
    assert landed == land_intervals(con, "r1")                        # idempotent: replaced, not added
    con.close()
    return path


def test_the_view_has_median_cv_range_and_the_landed_interval_per_point_and_metric(db):
    con = warehouse.connect(db, read_only=True)
    rows = warehouse.rows(con, "select * from cell_dispersion where run_id = 'r1' and cell_point = 'tp1.c4' "
                               "order by metric")
    values = [v for (v,) in con.execute("select output_throughput from cells where run_id = 'r1' and cell_key like "
                                        "'tp1.c4.r%' order by \"repeat\"").fetchall()]
    spreads = run_spreads(con, "r1")
    unlanded = con.execute("select count(*), count(ci_low) from cell_dispersion where run_id = 'r0'").fetchone()
    con.close()
    assert {r["metric"] for r in rows} == {"output_throughput", "request_throughput", "ttft_p50_ms", "ttft_p99_ms",
                                           "tpot_p50_ms"}   # the synthetic summary has no E2EL, no SLO (goodput)
    throughput = next(r for r in rows if r["metric"] == "output_throughput")
    assert throughput["repeats"] == 5 and throughput["repeat_values"] == values
    assert throughput["median"] == pytest.approx(statistics.median(values))
    assert throughput["cv"] == pytest.approx(statistics.stdev(values) / statistics.fmean(values))
    assert (throughput["min_value"], throughput["max_value"]) == (min(values), max(values))
    expected = spreads[("tp1.c4", "output_throughput")]               # what the table and the report show
    assert (throughput["ci_low"], throughput["ci_high"]) == (expected.low, expected.high) == (min(values), max(values))
    assert unlanded[0] > 0 and unlanded[1] == 0                       # CV for every run, intervals where landed


def test_an_interval_of_other_values_is_not_shown(db):
    con = warehouse.connect(db)
    con.execute("update cells set valid = false where cell_key = 'tp1.c4.r0' and run_id = 'r1'")
    stale = con.execute("select repeats, ci_low from cell_dispersion where run_id = 'r1' and cell_point = 'tp1.c4' "
                        "and metric = 'output_throughput'").fetchone()
    land_intervals(con, "r1")
    fresh = con.execute("select repeats, ci_low from cell_dispersion where run_id = 'r1' and cell_point = 'tp1.c4' "
                        "and metric = 'output_throughput'").fetchone()
    con.execute("update cells set valid = true where cell_key = 'tp1.c4.r0' and run_id = 'r1'")
    land_intervals(con, "r1")
    con.close()
    assert stale == (4, None) and fresh[0] == 4 and fresh[1] is not None


def test_servebench_query_shows_the_view(db):
    done = subprocess.run([sys.executable, "-m", "servebench", "query", "--warehouse", str(db), "--format", "json",
                           "select cell_point, metric, repeats, cv, ci_low, ci_high from cell_dispersion "
                           "where run_id = 'r1' and metric = 'output_throughput' order by cell_point"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert len(shown) == 10 and all(r["repeats"] == 5 and r["cv"] > 0 and r["ci_low"] < r["ci_high"] for r in shown)


def test_the_end_of_run_table_has_a_spread_row_after_each_repeated_point(db):
    con = warehouse.connect(db, read_only=True)
    summary = summarize(con, "r1")
    con.close()
    keys = [row[0] for row in summary.rows]
    at = keys.index("tp1.c4")
    assert keys[at - 5:at] == [f"tp1.c4.r{r}" for r in range(5)]     # right after its last repeat
    row = summary.rows[at]
    assert row[1] == "median of 5"
    assert float(row[4]) == pytest.approx(statistics.median(
        float(r[4]) for r in summary.rows[at - 5:at]), abs=0.06)       # the median of the repeats' tok/s
    assert row[5].startswith("±CV [95% interval]: tok/s ") and row[5].count("±") == 4   # tok/s, TTFT, TPOT
    assert "TTFT p50" in row[5] and "TPOT p50" in row[5]
    assert summary.cells == 50 and len(summary.rows) == 60


def test_the_report_draws_error_bars_and_lists_the_spread(db, tmp_path):
    con = warehouse.connect(db, read_only=True)
    charts = build_charts(con, "r1")
    path = run_report(con, "r1", tmp_path / "out")
    con.close()
    ttft = json.dumps(charts["throughput_vs_ttft"].to_dict())
    side = json.dumps(charts["modes_side_by_side"].to_dict())
    assert '"errorbar"' in ttft and "output_throughput_low" in ttft and "ttft_p50_ms_high" in ttft
    assert '"errorbar"' in side and "bootstrap 95% interval" in side
    page = path.read_text()
    assert "Spread over repeats" in page and "±" in page
    summary_at, history_at = page.index('id="context"'), page.index('id="regressions"')
    assert summary_at < history_at < page.index('id="previous-run"') < page.index("Spread over repeats")
    assert "series judged" in page and "servebench compare r0 r1" in page   # the history, under the answer


def test_the_report_draws_no_error_bar_for_single_repeats():
    cells = [{"cell_id": f"r/tp1.rate{rate}.r0", "cell_key": f"tp1.rate{rate}.r0", "mode": "tp1", "executor": "mp",
              "load_kind": "open", "offered_rate": rate, "clients": None, "output_throughput": 10.0 * rate,
              "request_throughput": rate,
              "ttft_p50_ms": 5.0 * rate, "tpot_p50_ms": 2.0, "ttft_p99_ms": 9.0, "tpot_p99_ms": 3.0, "valid": True,
              "invalid_reasons": []} for rate in (2, 8)]
    from servebench.analysis.report import modes_side_by_side, throughput_vs_latency
    assert '"errorbar"' not in json.dumps(throughput_vs_latency(cells, "ttft_p50_ms", "TTFT p50").to_dict())
    assert '"errorbar"' not in json.dumps(modes_side_by_side(cells).to_dict())


def test_compare_says_within_noise_where_the_intervals_overlap():
    a = {("tp1.c4", "output_throughput"): [100.0, 104.0, 98.0], ("tp1.c8", "output_throughput"): [100.0, 101.0, 99.0],
         ("tp2.c4", "output_throughput"): [100.0, 101.0, 99.0, 100.5, 99.5],
         ("tp1.c1", "output_throughput"): [100.0]}
    b = {("tp1.c4", "output_throughput"): [103.0, 99.0, 106.0], ("tp1.c8", "output_throughput"): [110.0, 111.0, 109.0],
         ("tp2.c4", "output_throughput"): [80.0, 81.0, 79.0, 80.5, 79.5],
         ("tp1.c1", "output_throughput"): [90.0, 95.0]}
    deltas = {d.point: d for d in compare_runs(a, b)}
    assert deltas["tp1.c4"].verdict == "within noise" and deltas["tp1.c4"].intervals_overlap
    # apart, but 3 repeats a side cannot reach p < 0.05 in a two-sided U test
    assert deltas["tp1.c8"].verdict == "same" and deltas["tp1.c8"].intervals_overlap is False
    assert deltas["tp1.c8"].p_value == pytest.approx(0.1)
    assert deltas["tp2.c4"].verdict == "worse" and deltas["tp2.c4"].interval_b == (79.0, 81.0)
    assert deltas["tp1.c1"].verdict == "untested" and deltas["tp1.c1"].intervals_overlap is None


def test_servebench_compare_prints_the_spreads_and_within_noise(db):
    done = subprocess.run([sys.executable, "-m", "servebench", "compare", "r0", "r1", "--warehouse", str(db)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    tp1 = [line for line in done.stdout.splitlines() if "tp1.c4 " in line and "output_throughput" in line]
    assert len(tp1) == 1 and "within noise" in tp1[0] and tp1[0].count("±") == 2, done.stdout
    assert "within noise: no significant change and the intervals overlap" in done.stdout
