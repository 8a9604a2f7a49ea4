"""Arrival schedules for open-loop load, computed before the first request is sent.

Gaps are drawn from a seeded generator and summed; unlike `vllm bench serve` they are not
stretched to land the last arrival at N/rate, so a Poisson schedule is a Poisson process
(its realized rate over a finite run differs from the nominal one by chance; the summary
reports both).
"""

from __future__ import annotations

import random


def arrival_offsets(rate: float, arrival: str, seed: int, count: int | None = None,
                    duration: float | None = None, burstiness: float = 1.0) -> list[float]:
    """Seconds from t0 at which each request is due: `count` of them, or all within `duration`.

    gamma: gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)), mean 1/rate;
    burstiness 1 is Poisson, below 1 burstier, above 1 more regular.
    """
    if (count is None) == (duration is None):
        raise ValueError("give exactly one of count or duration")
    if arrival not in ("poisson", "constant", "gamma"):
        raise ValueError(f"unknown arrival process {arrival!r}")
    rng = random.Random(seed)
    offsets: list[float] = []
    t = 0.0
    while (count is None or len(offsets) < count) and (duration is None or t < duration):
        offsets.append(t)
        if arrival == "poisson":
            t += rng.expovariate(rate)
        elif arrival == "gamma":
            t += rng.gammavariate(burstiness, 1.0 / (rate * burstiness))
        else:
            t = len(offsets) / rate  # computed, not summed: no drift from rounding
    return offsets
