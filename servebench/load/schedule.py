"""Arrival schedules for open-loop load, computed before the first request is sent.

Gaps are drawn from a seeded generator and summed; unlike `vllm bench serve` they are not
stretched to land the last arrival at N/rate, so a Poisson schedule is a Poisson process.
"""

from __future__ import annotations

import random


def arrival_offsets(rate: float, arrival: str, seed: int, count: int | None = None,
                    duration: float | None = None) -> list[float]:
    """Seconds from t0 at which each request is due: `count` of them, or all within `duration`."""
    if (count is None) == (duration is None):
        raise ValueError("give exactly one of count or duration")
    rng = random.Random(seed)
    offsets: list[float] = []
    t = 0.0
    while True:
        if count is not None and len(offsets) >= count:
            return offsets
        if duration is not None and t >= duration:
            return offsets
        offsets.append(t)
        t += rng.expovariate(rate) if arrival == "poisson" else 1.0 / rate
