"""Capacity under an SLO: the highest open-loop request rate (or the most closed-loop clients)
at which every SLO limit holds.

Pure: `search_capacity(probe, settings)` asks `probe(x)` for a verdict at a rate or a client
count (any callable: a load run against a server, a model in a test) and decides the next one:

1. **Bracket** geometrically from `start` (x`growth` while the SLO holds, / `growth` while it
   does not) until one point passes and a higher one fails.
2. **Bisect** the bracket at its geometric mean (clients: the integer midpoint) until it is
   within `precision` of its upper end ((hi - lo) / hi), or `max_probes` were used.
3. The capacity is the highest point that met the SLO (`lo`): always a measured point, never an
   interpolation.

Why plain bisection on pass/fail: its probe count does not depend on the shape of the latency
curve. Bracketing takes about log_growth(capacity / start) + 1 probes and bisecting a bracket of
`growth` down to `precision` log2(ln(growth) / ln(1 + precision)) more: with growth 2 and 5 %,
4; so 8 probes reach 5 % when the capacity is within about 0.25x-7x of `start`. Regula falsi on
the SLO margin was simulated over three curve shapes (hockey stick, M/M/1-like, exponential wall)
and gained nothing: up to 12 probes where bisection took 11, with a count that depends on the
curve (docs/capacity.md).

A probe that is not valid (the generator fell behind its schedule, the server failed) is a miss
for the SLO: a point "meets the SLO" only if it is also valid.
"""

from __future__ import annotations

import math
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field

SLO_METRICS = ("ttft", "tpot", "itl", "e2el")
SLO_PERCENTILES = ("p50", "p90", "p95", "p99")


class SearchSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    start: float = Field(1.0, gt=0, description="First point probed (req/s, or clients).")
    max_value: float = Field(1024.0, gt=0, description="Never probe above this.")
    min_value: float = Field(0.01, gt=0, description="Give up below this: nothing meets the SLO.")
    growth: float = Field(2.0, gt=1, description="Factor between bracketing probes.")
    precision: float = Field(0.05, gt=0, lt=1, description="Stop when (hi - lo) / hi is at most this.")
    max_probes: int = Field(8, ge=2, le=64)
    integer: bool = Field(False, description="Client counts: integer points; stop when hi - lo is 1.")


class Probe(BaseModel):
    """One measurement at one point (a rate, or a client count), and its verdict."""

    rate: float                             # the point probed: req/s, or clients
    observed: dict[str, float | None]       # e.g. {"ttft_p99_ms": 412.0}
    valid: bool = True
    margin: float                           # 1 - max(observed / limit); <= 0: the SLO was missed
    met: bool


class CapacityResult(BaseModel):
    capacity: float | None                  # the highest point that met the SLO (None: none did)
    upper: float | None                     # the lowest point that missed it (None: none did, up to max_value)
    probes: list[Probe]
    converged: bool                         # the bracket is within `precision`
    why: str


def parse_slo(items: dict[str, float]) -> dict[str, float]:
    """{'ttft_p99_ms': 500, ...}: every key a metric and percentile the load generator reports."""
    for key, limit in items.items():
        parts = key.split("_")
        if len(parts) != 3 or parts[0] not in SLO_METRICS or parts[1] not in SLO_PERCENTILES or parts[2] != "ms":
            raise ValueError(f"SLO {key!r}: give METRIC_PCT_ms, METRIC one of {', '.join(SLO_METRICS)}, PCT one "
                             f"of {', '.join(SLO_PERCENTILES)} (e.g. ttft_p99_ms)")
        if not limit > 0:
            raise ValueError(f"SLO {key!r}: the limit must be positive, not {limit}")
    return dict(items)


def observed_from_summary(summary: dict, slo: dict[str, float]) -> dict[str, float | None]:
    """The SLO's percentiles from a load run's summary (`ttft_ms: {p99: ...}`). TTFT is taken from
    each request's scheduled time where the summary has it: a request the generator sent late
    still counts its wait (no coordinated omission)."""
    found = {}
    for key in slo:
        metric, pct, _ = key.split("_")
        distribution = (summary.get("ttft_from_scheduled_ms") if metric == "ttft" else None) or \
            summary.get(f"{metric}_ms") or {}
        found[key] = distribution.get(pct)
    return found


def judge(rate: float, observed: dict[str, float | None], slo: dict[str, float], valid: bool = True) -> Probe:
    """A probe's margin and verdict: a missing percentile (no request completed) is a miss."""
    ratios = [math.inf if observed.get(key) is None else observed[key] / limit for key, limit in slo.items()]
    margin = 1.0 - max(ratios)
    return Probe(rate=rate, observed=observed, valid=valid, margin=margin if math.isfinite(margin) else -1.0,
                 met=valid and margin >= 0)


def search_capacity(probe: Callable[[float], Probe], settings: SearchSettings = SearchSettings()) -> CapacityResult:
    """Bracket, then bisect; see the module's docstring."""
    probes: list[Probe] = []
    integer = settings.integer

    def measure(value: float) -> Probe:
        result = probe(max(1, round(value)) if integer else round(value, 6))
        probes.append(result)
        return result

    first = measure(min(settings.start, settings.max_value))
    lo, hi = (first, None) if first.met else (None, first)
    while lo is None or hi is None:
        if len(probes) >= settings.max_probes:
            return _result(lo, hi, probes, settings, "the probe budget ran out while bracketing")
        if hi is None:
            if lo.rate >= settings.max_value:
                return _result(lo, hi, probes, settings, f"the SLO held up to {settings.max_value:g}")
            step = measure(min(lo.rate * settings.growth, settings.max_value))
        else:
            if hi.rate <= settings.min_value or (integer and hi.rate <= 1):
                return _result(lo, hi, probes, settings, "the SLO failed at the lowest point")
            step = measure(max(hi.rate / settings.growth, settings.min_value))
        if step.met:
            lo = step if lo is None or step.rate > lo.rate else lo
        else:
            hi = step if hi is None or step.rate < hi.rate else hi
    while not _narrow(lo.rate, hi.rate, settings):
        if len(probes) >= settings.max_probes:
            return _result(lo, hi, probes, settings, "the probe budget ran out while bisecting")
        step = measure((lo.rate + hi.rate) // 2 if integer else math.sqrt(lo.rate * hi.rate))
        if step.met:
            lo = step
        else:
            hi = step
    return _result(lo, hi, probes, settings, "bracket narrowed to the precision asked")


def _narrow(lo: float, hi: float, settings: SearchSettings) -> bool:
    return hi - lo <= 1 if settings.integer else (hi - lo) / hi <= settings.precision


def _result(lo: Probe | None, hi: Probe | None, probes: list[Probe], settings: SearchSettings,
            why: str) -> CapacityResult:
    converged = lo is not None and hi is not None and _narrow(lo.rate, hi.rate, settings)
    return CapacityResult(capacity=lo.rate if lo else None, upper=hi.rate if hi else None, probes=probes,
                          converged=converged, why=why)
