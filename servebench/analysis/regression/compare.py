"""Two runs side by side: per load point (the cell key without its repeat), the change of each
main metric and whether it is significant (two-sided U test over the repeats, and the
minimum effect), so "is B faster than A" has one answer per cell and metric.

With repeats on both sides each side also has its spread (servebench/analysis/dispersion.py:
CV and the bootstrap 95% interval of the median). Where the test finds no significant change of
at least the minimum effect and the two intervals overlap, the verdict is "within noise": the
difference is no larger than the runs' own scatter. Intervals apart without a significant test
stay "same" (with 3 repeats a side a two-sided U test cannot go below p = 0.1, so the intervals
are what tells a reader more there). A significant test with its minimum effect says better or
worse even where 95% intervals overlap: overlapping intervals do not mean no difference, and
the test uses every repeat.

Its level is 0.05, not the nightly gate's 0.005: one comparison asked on purpose is not a
year of nights times every series, where the stricter level keeps false alarms rare."""

from __future__ import annotations

from pydantic import BaseModel

from servebench.analysis.dispersion import Spread, spread
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
    verdict: str             # better | worse | within noise | same | untested
    cv_a: float | None = None          # each side's coefficient of variation over its repeats
    cv_b: float | None = None
    interval_a: tuple[float, float] | None = None   # bootstrap 95% interval of the median; None: one repeat
    interval_b: tuple[float, float] | None = None
    intervals_overlap: bool | None = None           # None: a side without an interval


COMPARE_ALPHA = 0.05
MIN_EFFECT = 0.05


def compare_runs(a: dict[tuple[str, str], list[float]], b: dict[tuple[str, str], list[float]],
                 alpha: float = COMPARE_ALPHA, min_effect: float = MIN_EFFECT) -> list[Delta]:
    """a, b: (point, metric) -> the repeats' values. Points measured in only one run are skipped."""
    deltas = []
    for point, metric in sorted(set(a) & set(b)):
        values_a, values_b = a[(point, metric)], b[(point, metric)]
        spread_a, spread_b = spread(values_a), spread(values_b)
        change = relative_change(spread_b.median, spread_a.median)
        testable = len(values_a) > 1 and len(values_b) > 1
        p = u_test(values_b, values_a, "two-sided") if testable else None
        info = METRICS[metric]
        overlap = spread_a.overlaps(spread_b)
        deltas.append(Delta(point=point, metric=metric, direction=info.direction, a=spread_a.median,
                            b=spread_b.median, change=change, repeats_a=len(values_a), repeats_b=len(values_b),
                            p_value=p, verdict=verdict(p, change, overlap, info.direction, alpha, min_effect),
                            cv_a=spread_a.cv, cv_b=spread_b.cv, interval_a=interval(spread_a),
                            interval_b=interval(spread_b), intervals_overlap=overlap))
    return deltas


def verdict(p: float | None, change: float, overlap: bool | None, direction: str, alpha: float,
            min_effect: float) -> str:
    """better/worse: significant and at least the minimum effect; within noise: not that, and
    the intervals overlap; same: not that, intervals apart; untested: one repeat on a side."""
    if p is None:
        return "untested"
    if p < alpha and abs(change) >= min_effect:
        return "better" if (change > 0) == (direction == "higher") else "worse"
    return "within noise" if overlap else "same"


def interval(side: Spread) -> tuple[float, float] | None:
    return None if side.low is None or side.high is None else (side.low, side.high)


def side_text(median: float, cv: float | None, interval: tuple[float, float] | None) -> str:
    """'81.2 ±3% [78.9, 83]' (4 significant digits); the median alone for one repeat."""
    if interval is None:
        return f"{median:.4g}"
    return f"{median:.4g}{'' if cv is None else f' ±{cv:.0%}'} [{interval[0]:.4g}, {interval[1]:.4g}]"
