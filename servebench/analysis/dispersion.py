"""How far a cell's repeats are apart: the coefficient of variation and a seeded bootstrap 95%
interval of the median of repeats. Pure: numbers in, numbers out (no warehouse, no clock).

Why the median, and why a bootstrap of it. A cell's figure is the median of its repeats (the
history's nights, `servebench compare`), because one repeat can be far off for a reason that is
not the engine's (the first cell after a server starts runs slow, another process wakes on a
core) and a median does not follow one outlier as a mean does. The interval must be about that
same figure. Latency percentiles and throughput under load are not normal, and with a handful of
repeats a t-interval of the mean rests on that assumption and on a t factor of 4.3 at N=3; the
percentile bootstrap assumes nothing about the shape: resample the repeats with replacement,
take each resample's median, and the interval is the 2.5th and 97.5th percentiles of those
medians (the lower and higher attained medians at those ranks, never an interpolation between
them). The generator is seeded, so the same repeats always give the same interval.

What it means with few repeats, honestly. A resample of N values can only have a median among
the repeats (or, for even N, halfway between two of them), and with N = 2 to 5 a resample made
of the smallest repeat alone (or mostly) is more likely than 2.5%: the interval is exactly the
range of the repeats, [min, max]. The chance that the range of N repeats holds the true median
is 1 - 2^(1-N): 50% for 2 repeats, 75% for 3, 87.5% for 4, 94% for 5, so below 6 repeats the
"95%" interval is a coarse range, not a 95% promise. It still says what a reader needs: how far
apart the repeats were, and whether two runs' ranges overlap (`servebench compare` says
"within noise" then). From 6 repeats on it narrows inside the range; on skewed (lognormal) draws
it held the true median 94% of the time at 6 repeats, 86% at 7, 94% at 10 and 93-96% from 20.
`minimum` and `maximum` are kept beside it so a reader can see which of the two it is.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

import numpy as np

LEVEL = 0.95
RESAMPLES = 2000        # the endpoints are stable to the repeats' own resolution at this count
SEED = 0


@dataclass(frozen=True)
class Spread:
    """One figure of a cell over its repeats."""

    repeats: int
    median: float
    cv: float | None           # sample stdev / |mean|; None: one repeat, or a mean of 0
    low: float | None          # bootstrap interval of the median; None with one repeat
    high: float | None
    minimum: float
    maximum: float

    def overlaps(self, other: Spread) -> bool | None:
        """Whether the two intervals share a value; None when either has no interval."""
        if self.low is None or self.high is None or other.low is None or other.high is None:
            return None
        return self.low <= other.high and other.low <= self.high

    def text(self, digits: int = 1) -> str:
        """'81.2 ±3% [78.9, 83.0]': the median, ±CV, the interval; the median alone for one repeat."""
        value = f"{self.median:.{digits}f}"
        if self.low is None or self.high is None:
            return value
        cv = "" if self.cv is None else f" ±{self.cv:.0%}"
        return f"{value}{cv} [{self.low:.{digits}f}, {self.high:.{digits}f}]"


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    """Sample standard deviation over |mean| (the history's noisy-night test uses the same);
    undefined (None) for one value or a mean of zero, e.g. a goodput of 0 in every repeat."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / abs(mean) if mean else None


def median_interval(values: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES,
                    seed: int = SEED) -> tuple[float, float]:
    """The percentile-bootstrap interval of the median (see the module's docstring for what it is
    worth with few values). Needs at least two values."""
    if len(values) < 2:
        raise ValueError(f"a bootstrap interval needs at least 2 values, got {len(values)}")
    if not 0 < level < 1:
        raise ValueError(f"level must be between 0 and 1, got {level}")
    sample = np.asarray(values, dtype=float)
    picks = np.random.default_rng(seed).integers(0, len(sample), size=(resamples, len(sample)))
    medians = np.median(sample[picks], axis=1)
    tail = (1 - level) / 2
    return float(np.quantile(medians, tail, method="lower")), float(np.quantile(medians, 1 - tail, method="higher"))


def spread(values: Sequence[float], level: float = LEVEL, resamples: int = RESAMPLES, seed: int = SEED) -> Spread:
    """A figure's median, CV and interval over its repeats (no interval for a single repeat)."""
    if not values:
        raise ValueError("no values to spread")
    low, high = median_interval(values, level, resamples, seed) if len(values) > 1 else (None, None)
    return Spread(repeats=len(values), median=float(statistics.median(values)), cv=coefficient_of_variation(values),
                  low=low, high=high, minimum=float(min(values)), maximum=float(max(values)))


def range_coverage(repeats: int) -> float:
    """The chance that [min, max] of `repeats` independent values holds the true median
    (continuous distribution): 1 - 2 * 0.5^N. What the interval is worth below 6 repeats."""
    if repeats < 2:
        raise ValueError("a range needs at least 2 repeats")
    return 1 - 2 * 0.5 ** repeats
