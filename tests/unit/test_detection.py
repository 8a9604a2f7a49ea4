"""Regression detection on synthetic histories, at the default settings.

The figures over many seeds are in benchmarks/detection.py; these pin what a user is promised:
a 10% step under 3% noise is found within 3 nights, 200 nights of pure noise raise nothing,
a single outlier night is never confirmed, a drift is caught, annotations are honoured.
"""

import pytest

from servebench.analysis.regression.detect import analyze
from servebench.analysis.regression.series import METRICS, Night, hardware_fingerprint, series_id
from servebench.analysis.regression.synthetic import drift, history, outlier_night, replay, step


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_ten_percent_step_under_three_percent_noise_is_found_within_three_nights(seed):
    nights = history(step(36, 30, -0.10), noise=0.03, repeats=3, seed=seed)
    alarms = [i for i in replay(nights, start=29).alarms() if i >= 30]
    assert alarms and alarms[0] <= 32, alarms
    assert 29 not in replay(nights, start=29).any_alarm()


def test_the_step_is_confirmed_located_and_names_the_engine_versions():
    nights = history(step(36, 30, -0.10), noise=0.03, repeats=3, seed=0)
    found = replay(nights, start=29).findings
    confirmed = [f for i, f in sorted(found.items()) if f.status == "confirmed"]
    assert confirmed, found
    first = confirmed[0]
    assert first.kind == "regression" and first.first_bad_run == "night030" and first.last_good_run == "night029"
    assert -0.13 < first.change < -0.07 and first.p_value < 0.005


def test_two_hundred_nights_of_pure_noise_raise_no_alarm():
    nights = history([1.0] * 200, noise=0.03, repeats=3, seed=0)
    assert replay(nights).any_alarm() == []


def test_a_step_in_a_lower_is_better_metric_is_a_regression_when_it_rises():
    nights = history(step(34, 30, +0.15), noise=0.03, repeats=3, seed=3)
    found = replay(nights, metric="ttft_p50_ms", start=29)
    assert found.alarms() and found.alarms()[0] <= 32
    assert found.alarms(kind="improvement") == []


def test_a_single_outlier_night_is_suspected_that_night_and_never_confirmed():
    nights = history(outlier_night(40, 30, -0.15), noise=0.03, repeats=3, seed=1)
    found = replay(nights, start=29)
    assert found.alarms(status=("suspected",)) == [30]
    assert found.alarms(status=("confirmed",)) == [] and found.alarms(kind="improvement") == []


def test_a_single_outlier_repeat_raises_nothing():
    nights = history([1.0] * 40, noise=0.03, repeats=3, seed=2, outlier_repeats={30: 0.6})
    assert replay(nights, start=29).any_alarm() == []


def test_a_slow_drift_is_caught_before_it_costs_fifteen_percent():
    nights = history(drift(70, 30, -0.005), noise=0.03, repeats=3, seed=4)
    alarms = [i for i in replay(nights, start=29).alarms() if i >= 30]
    assert alarms and alarms[0] - 30 + 1 <= 30, alarms


def test_a_noisy_night_without_a_gross_change_is_flagged_noisy():
    nights = history([1.0] * 12, noise=0.03, repeats=3, seed=5)
    nights[-1].values = [100.0, 60.0, 140.0]
    finding = analyze(nights, METRICS["output_throughput"])
    assert finding.kind == "noisy" and "no change beyond the noise" in finding.detail


def test_an_accepted_change_becomes_the_new_baseline_and_an_excluded_night_vanishes():
    nights = history(step(36, 30, -0.10), noise=0.03, repeats=3, seed=0)
    assert analyze(nights, METRICS["output_throughput"]).kind == "regression"
    nights[30].accepted = True
    assert analyze(nights, METRICS["output_throughput"]) is None
    bad_night = history(outlier_night(20, 19, -0.3), noise=0.03, repeats=3, seed=0)
    assert analyze(bad_night, METRICS["output_throughput"]).kind == "regression"
    bad_night[19].excluded = True
    assert analyze(bad_night, METRICS["output_throughput"]) is None


def test_two_nights_with_enough_repeats_are_enough_for_the_gate():
    nights = [Night(run_id="a", at=history([1.0], 0.0, 1, 0)[0].at, values=[100, 101, 99, 103, 102]),
              Night(run_id="b", at=history([1.0, 1.0], 0.0, 1, 0)[1].at, values=[80, 81, 79, 82, 78])]
    finding = analyze(nights, METRICS["output_throughput"])
    assert finding.kind == "regression" and finding.status == "suspected" and finding.p_value < 0.005


def test_series_ids_ignore_the_engine_and_follow_the_hardware():
    node = {"node": "n0", "cpus": [0, 1], "cpu_model": "Xeon", "arch": "x86_64", "logical_cores": 2,
            "mem_total_bytes": 24 * 2**30 + 12345, "numa_nodes": 1}
    same = hardware_fingerprint([{**node, "mem_total_bytes": 24 * 2**30}])
    assert hardware_fingerprint([node]) == same
    assert hardware_fingerprint([{**node, "cpu_model": "Graviton"}]) != same
    identity = dict(campaign="c", mode="tp1", tp=1, pp=1, executor="mp", load_kind="closed", rate=None,
                    clients=4, input_len=32, output_len=32)
    assert series_id(identity, same) == series_id(dict(identity), same)
    assert series_id({**identity, "clients": 8}, same) != series_id(identity, same)


def test_a_noisy_night_with_a_gross_drop_is_still_a_regression_and_never_a_baseline():
    nights = history([1.0] * 12, noise=0.03, repeats=3, seed=5)
    nights[-1].values = [30.0, 22.0, 26.0]          # CV 15%, far below the baseline
    finding = analyze(nights, METRICS["output_throughput"])
    assert finding.kind == "regression" and "vary by" in finding.detail
    nights.append(history([1.0] * 13, noise=0.03, repeats=3, seed=6)[-1])
    assert analyze(nights, METRICS["output_throughput"]) is None   # tonight is compared with clean nights


def test_with_only_noisy_nights_before_a_gross_drop_still_shows():
    nights = history([1.0, 1.0], noise=0.0, repeats=6, seed=0)
    nights[0].values = [421.0, 388.0, 436.0, 565.0, 573.0, 489.0]    # CV 16%: an engine warming up
    nights[1].values = [137.0, 126.0, 121.0, 129.0, 133.0, 118.0]
    finding = analyze(nights, METRICS["output_throughput"])
    assert finding.kind == "regression" and "baseline is noisy nights" in finding.detail
    nights[1].values = [430.0, 470.0, 455.0, 500.0, 480.0, 445.0]    # no change: nothing to say
    assert analyze(nights, METRICS["output_throughput"]) is None
