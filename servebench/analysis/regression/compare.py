"""Two runs side by side: per load point (the cell key without its repeat), the change of each
main metric and whether it is significant (two-sided U test over the repeats, and the
minimum effect), so "is B faster than A" has one answer per cell and metric.

Its level is 0.05, not the nightly gate's 0.005: one comparison asked on purpose is not a
year of nights times every series, where the stricter level keeps false alarms rare."""

from __future__ import annotations

import statistics

from pydantic import BaseModel

from servebench.analysis.regression.detect import relative_change, u_test
from servebench.analysis.regression.series import METRICS


class Delta(BaseModel):
    point: str               # e.g. tp2.c4
    metric: str
    direction: str
    a: float
    b: float
    change: float            # b / a - 1
    repeats_a: int
    repeats_b: int
    p_value: float | None    # None: one repeat on a side, no test possible
    verdict: str             # better | worse | same | untested


COMPARE_ALPHA = 0.05
MIN_EFFECT = 0.05


def compare_runs(a: dict[tuple[str, str], list[float]], b: dict[tuple[str, str], list[float]],
                 alpha: float = COMPARE_ALPHA, min_effect: float = MIN_EFFECT) -> list[Delta]:
    """a, b: (point, metric) -> the repeats' values. Points measured in only one run are skipped."""
    deltas = []
    for point, metric in sorted(set(a) & set(b)):
        values_a, values_b = a[(point, metric)], b[(point, metric)]
        median_a, median_b = statistics.median(values_a), statistics.median(values_b)
        change = relative_change(median_b, median_a)
        testable = len(values_a) > 1 and len(values_b) > 1
        p = u_test(values_b, values_a, "two-sided") if testable else None
        info = METRICS[metric]
        if p is None:
            verdict = "untested"
        elif p < alpha and abs(change) >= min_effect:
            verdict = "better" if (change > 0) == (info.direction == "higher") else "worse"
        else:
            verdict = "same"
        deltas.append(Delta(point=point, metric=metric, direction=info.direction, a=median_a, b=median_b,
                            change=change, repeats_a=len(values_a), repeats_b=len(values_b), p_value=p,
                            verdict=verdict))
    return deltas
