"""Bisect over engine commits: which commit made a metric worse.

Pure functions; `flows/bisect.py` builds and measures, these decide. The good commit is measured
first (its repeats are the baseline); the bad commit is the user's or the nightly detector's word
and is not built, as `git bisect` trusts its marks. Each midpoint is measured with the same
repeats and judged against the noise of both commits' repeats, not only their medians:

- bad: every repeat of the midpoint is worse than every repeat of the baseline by more than the
  threshold (relative to the baseline's median): the two sets of repeats are apart;
- good: its median is not worse than the baseline's by more than the threshold;
- otherwise the repeats overlap across the threshold and cannot tell (`undecided`): the bisect
  lands the step and stops, saying so (more repeats or requests per cell, or another threshold);
  it never guesses.

So a search over the commits after `good` up to `bad` builds at most 1 + ceil(log2(len)) commits.
"""

from __future__ import annotations

import math
import statistics
from typing import Callable, Literal

from pydantic import BaseModel, Field

Direction = Literal["higher", "lower"]


class BisectError(ValueError):
    """A bisect that cannot decide: the message says why and what to change."""


class Step(BaseModel):
    """One measured commit against the baseline."""

    commit: str
    values: list[float] = Field(min_length=1)   # the metric of each repeat
    value: float                                # their median
    change: float                               # median against the baseline's median; positive = worse
    separation: float                           # the least any repeat is worse than any baseline repeat
    bad: bool
    undecided: str | None = None                # why the repeats cannot tell (then `bad` is False)

    @property
    def verdict(self) -> str:
        return "undecided" if self.undecided else ("bad" if self.bad else "good")


def worse_by(baseline: float, value: float, direction: Direction) -> float:
    """How much worse `value` is than `baseline`, relative (0.25: a quarter worse; negative: better)."""
    if baseline == 0:
        raise BisectError("the good commit's metric is 0: choose a metric it measures (e.g. tpot_p50_ms)")
    change = (value - baseline) / abs(baseline)
    return change if direction == "lower" else -change


def judge(commit: str, baseline: list[float], values: list[float], direction: Direction,
          threshold: float) -> Step:
    """Bad when the repeats are apart by more than the threshold, good when the median is within it."""
    reference = statistics.median(baseline)
    value = statistics.median(values)
    change = worse_by(reference, value, direction)
    best_of_step = min(values) if direction == "lower" else max(values)
    worst_of_baseline = max(baseline) if direction == "lower" else min(baseline)
    separation = worse_by(reference, best_of_step, direction) - worse_by(reference, worst_of_baseline, direction)
    undecided = None
    if separation <= threshold < change:
        undecided = (f"commit {commit[:12]}: its median is {change:.0%} worse than the good commit's, beyond the "
                     f"threshold ({threshold:.0%}), but its repeats {_values(values)} and the good commit's "
                     f"{_values(baseline)} overlap: give more --repeats or requests per cell (or another --threshold)")
    return Step(commit=commit, values=values, value=value, change=change, separation=separation,
                bad=separation > threshold, undecided=undecided)


def _values(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.3g}" for v in values) + "]"


def search(commits: list[str], is_bad: Callable[[str], bool]) -> tuple[int, list[int]]:
    """Binary search over `commits` (oldest first: [good, ..., bad]) for the first bad one, asking
    `is_bad` only about commits strictly between the two ends. Returns (its index, indices asked)."""
    if len(commits) < 2:
        raise BisectError("a bisect needs a good and a later bad commit")
    low, high = 0, len(commits) - 1   # low is known good, high known bad
    asked = []
    while high - low > 1:
        middle = (low + high) // 2
        asked.append(middle)
        if is_bad(commits[middle]):
            high = middle
        else:
            low = middle
    return high, asked


def most_builds(commits: int) -> int:
    """The builds a bisect over `commits` commits ([good, ..., bad]) may need: the good one and the
    midpoints of the rest."""
    return 1 + math.ceil(math.log2(commits - 1)) if commits > 2 else 1
