"""The warehouse side of detection, on two synthetic nights (tp2-ray a third slower on the
second): series ids, findings landed with their runs and versions, the CLI's exit codes,
`compare`, and annotations that accept the change or exclude the night."""

import json
import subprocess
import sys

import pytest

from servebench import warehouse
from tests.support.synthetic_runs import synthetic_warehouse


@pytest.fixture()
def db(tmp_path):
    path = tmp_path / "w.duckdb"
    synthetic_warehouse(path, tmp_path)
    return path


def servebench(db, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "servebench", *args, "--warehouse", str(db)], capture_output=True,
                          text=True, timeout=120)


def test_the_slower_night_is_a_regression_of_the_slower_mode_only(db):
    con = warehouse.connect(db, read_only=True)
    found = con.execute("select mode, metric, kind, status, last_good_run, first_bad_run, change from regressions "
                        "where run_id = 'r1' and kind <> 'noisy'").fetchall()
    fingerprints = con.execute("select distinct hardware_fingerprint from runs").fetchall()
    con.close()
    assert len(fingerprints) == 1
    assert {mode for mode, *_ in found} == {"tp2-ray"}
    throughput = [f for f in found if f[1] == "output_throughput"]
    assert len(throughput) == 5                     # one per load point
    for _, _, kind, status, good, bad, change in throughput:
        assert (kind, status, good, bad) == ("regression", "suspected", "r0", "r1") and -0.4 < change < -0.25


def test_cli_fails_on_regression_compares_and_accepts(db):
    listed = servebench(db, "regressions", "--fail-on-regression")
    assert listed.returncode == 3 and "tp2-ray" in listed.stdout, listed.stdout + listed.stderr
    compared = json.loads(servebench(db, "compare", "r0", "r1", "--format", "json").stdout)
    verdicts = {(d["point"], d["metric"]): d["verdict"] for d in compared}
    assert verdicts[("tp2-ray.c4", "output_throughput")] == "worse"
    assert verdicts[("tp1.c4", "output_throughput")] == "within noise"   # the nights' intervals overlap
    accepted = servebench(db, "annotate", "accept", "r1", "--note", "tp2-ray moved to gloo on purpose")
    assert accepted.returncode == 0, accepted.stderr
    assert servebench(db, "regressions", "--fail-on-regression").returncode == 0


def test_an_excluded_night_raises_nothing_and_bad_annotations_are_refused(db):
    assert servebench(db, "annotate", "exclude", "r1", "--note", "node1 throttled").returncode == 0
    assert servebench(db, "regressions", "--fail-on-regression").returncode == 0
    refused = servebench(db, "annotate", "exclude", "nope", "--note", "x")
    assert refused.returncode == 1 and "no run 'nope'" in refused.stderr
    refused = servebench(db, "annotate", "exclude", "r1", "--metric", "speed", "--note", "x")
    assert refused.returncode == 1 and "unknown metric 'speed'" in refused.stderr


def test_every_series_gets_a_verdict_in_the_cli_and_the_markdown(db):
    listed = servebench(db, "regressions")
    line = next(line for line in listed.stdout.splitlines() if line.startswith("run r1: "))
    # 2 modes x 5 load points x the cells' metrics: tp2-ray's slower night is found, tp1 is judged unchanged
    assert "regression" in line and "no change" in line and "not enough history" not in line, line
    md = servebench(db, "regressions", "--format", "markdown").stdout
    assert md.startswith("# servebench: regressions in run `r1`") and "series judged:" in md, md
    data = json.loads(servebench(db, "regressions", "--format", "json").stdout)
    kinds = {(v["metric"], v["verdict"]) for v in data["verdicts"]["r1"]}
    assert ("output_throughput", "no change") in kinds and ("output_throughput", "regression") in kinds


def test_two_nights_of_one_repeat_are_not_enough_history_and_say_what_they_need():
    from datetime import datetime, timedelta, timezone

    from servebench.analysis.regression.detect import nights_needed, series_verdict, smallest_p_value
    from servebench.analysis.regression.series import METRICS, Night
    from servebench.analysis.regression.summary import verdict_counts

    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    nights = [Night(run_id=f"r{i}", at=start + timedelta(days=i), values=[value])
              for i, value in enumerate([100.0, 64.0])]                  # -36%, one repeat a night
    verdict = series_verdict("s", nights, METRICS["output_throughput"])
    assert verdict is not None and verdict.verdict == "not enough history"
    assert (verdict.nights, verdict.repeats, verdict.nights_needed) == (2, 1, 200)
    assert "raise load.repeats" in verdict.detail                        # beyond the 7-night baseline
    assert verdict_counts([verdict]) == "1 series judged: 1 not enough history (has 2 nights, needs 200 at 1 " \
                                        "repeat a night)"
    assert smallest_p_value(5, 5) == pytest.approx(1 / 252) and nights_needed(3, 0.005) == 4
    planted = [Night(run_id=f"r{i}", at=start + timedelta(days=i), values=[v, v * 1.01, v * 0.99])
               for i, v in enumerate([100.0, 100.5, 99.8, 100.2, 64.0])]    # enough history: a drop is found
    assert series_verdict("s", planted, METRICS["output_throughput"]).verdict == "regression"
