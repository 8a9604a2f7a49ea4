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

A point "meets the SLO" only if its probe is also valid. A probe the server made invalid (no
request completed, token counts that disagree) is a miss. A probe invalid because of the client
alone (it fell behind its schedule, sent below the rate, was too busy on its core:
`servebench.load.metrics.client_limited`) says nothing about the server: the point is measured
again (`client_retries`, counted against `max_probes`), and if the client limits it again the
search stops there, not converged, saying so. Taking it as a miss would descend on a busy
machine's noise, each probe twice as long as the last. Except where the server missed the SLO by
more than the client's lag could add (`missed_despite_client`): that is the server's miss, and the
search goes on as for any miss.

How low a search may go is the caller's bound on a probe's duration: a probe of N requests at
r req/s lasts N / r, so `probe_floor` gives the lowest rate whose probe lasts at most
`MAX_PROBE_S` (the search's `min_value`).
"""

from __future__ import annotations

import math
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field

from servebench.load.metrics import CLIENT_CPU, client_limited

MAX_PROBE_S = 300.0  # the longest probe a search schedules (docs/capacity.md): 8 probes, at most 40 minutes


class SearchSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    start: float = Field(1.0, gt=0, description="First point probed (req/s, or clients).")
    max_value: float = Field(1024.0, gt=0, description="Never probe above this.")
    min_value: float = Field(0.01, gt=0, description="Give up below this: nothing meets the SLO (`probe_floor`: "
                             "where one probe would last longer than the caller allows). The first probe is "
                             "never below it.")
    growth: float = Field(2.0, gt=1, description="Factor between bracketing probes.")
    precision: float = Field(0.05, gt=0, lt=1, description="Stop when (hi - lo) / hi is at most this.")
    max_probes: int = Field(8, ge=2, le=64)
    integer: bool = Field(False, description="Client counts: integer points; stop when hi - lo is 1.")
    client_retries: int = Field(1, ge=0, le=8, description=(
        "A probe invalid because of the client alone is measured again this many times (each counts against "
        "max_probes); invalid each time, the search stops there. 0 where the caller measured it again already."))


class Probe(BaseModel):
    """One measurement at one point (a rate, or a client count), and its verdict."""

    rate: float                             # the point probed: req/s, or clients
    observed: dict[str, float | None]       # e.g. {"ttft_p99_ms": 412.0}
    valid: bool = True
    margin: float                           # 1 - max(observed / limit); <= 0: the SLO was missed
    met: bool
    reasons: list[str] = []                 # why it is invalid (the load generator's words)
    client_limited: bool = False            # invalid because of the client alone: nothing said about the server
    attempts: int = 1                       # measurements behind this verdict (a cell measured again when invalid)


class CapacityResult(BaseModel):
    capacity: float | None                  # the highest point that met the SLO (None: none did)
    upper: float | None                     # the lowest point that missed it (None: none did, up to max_value)
    probes: list[Probe]
    converged: bool                         # the bracket is within `precision`
    why: str


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


def judge(rate: float, observed: dict[str, float | None], slo: dict[str, float], valid: bool = True,
          reasons: list[str] | tuple[str, ...] = (), attempts: int = 1,
          client_lag_ms: float | None = None) -> Probe:
    """A probe's margin and verdict: a missing percentile (no request completed) is a miss. An
    invalid probe whose `reasons` are all the client's is `client_limited` (the search measures
    it again rather than take it as the server's miss), unless `missed_despite_client` says the
    server missed the SLO by more than the client's lag (`client_lag_ms`, its schedule lag p99)
    could have added."""
    ratios = [math.inf if (value := observed.get(key)) is None else value / limit for key, limit in slo.items()]
    margin = 1.0 - max(ratios)
    reasons = [] if valid else list(reasons)
    limited = not valid and client_limited(reasons)
    if limited and missed_despite_client(observed, slo, reasons, client_lag_ms):
        limited = False
        reasons.append(f"{SERVER_MISS} by more than the client's lag p99 ({client_lag_ms:.1f} ms) could add: "
                       "the server's miss")
    return Probe(rate=rate, observed=observed, valid=valid, margin=margin if math.isfinite(margin) else -1.0,
                 met=valid and margin >= 0, reasons=reasons, client_limited=limited, attempts=attempts)


SERVER_MISS = "the SLO was missed"


def missed_despite_client(observed: dict[str, float | None], slo: dict[str, float], reasons: list[str],
                          client_lag_ms: float | None) -> bool:
    """Whether a run invalid for the client's lag or rate still shows the server missing the SLO.

    A client that fell behind its schedule sent later and so, if anything, less load than asked
    (the "achieved rate" reason says so too); its own delays add at most about its lag to any
    latency it stamps (TTFT counted from the scheduled time adds the lag itself). So when some
    limit is exceeded even with the lag taken off every observed latency, the server would miss
    it at the full rate as well: a miss, whatever the client's noise. A client that was busy on
    its core ("the load generator used ...") may have delayed reading responses by an amount
    nothing measured: never concluded on."""
    if client_lag_ms is None or any(reason.startswith(CLIENT_CPU) for reason in reasons):
        return False
    return any((value := observed.get(key)) is not None and value - client_lag_ms > limit
               for key, limit in slo.items())


def probe_floor(requests: int | None, duration_s: float | None, max_probe_s: float = MAX_PROBE_S) -> float:
    """The lowest rate a search over the rate may probe (its `min_value`): a probe of `requests`
    at r req/s lasts requests / r, so below requests / max_probe_s one probe alone would outlast
    max_probe_s (from 2 req/s with 20 requests, 7 descending probes would reach 1280 s). A probe
    bounded by its `duration_s` is bounded already: the search's default floor then."""
    if duration_s is not None or not requests:
        return SearchSettings.model_fields["min_value"].default
    return math.ceil(requests / max_probe_s * 1e6) / 1e6  # a point is probed rounded to 6 decimals


def search_capacity(probe: Callable[[float], Probe], settings: SearchSettings = SearchSettings()) -> CapacityResult:
    """Bracket, then bisect; see the module's docstring."""
    probes: list[Probe] = []
    try:
        return _search(probe, settings, probes)
    except _ClientLimited as stop:
        return _stopped(probes, settings, stop.args[0])


class _ClientLimited(Exception):
    """A point the client could not measure validly, again: the search ends there (`why`)."""


def _measurer(probe: Callable[[float], Probe], settings: SearchSettings, probes: list[Probe]
              ) -> Callable[[float], Probe]:
    """`probe` at a point (rounded), recorded; a client-limited verdict measured again up to
    `client_retries` times within the budget, and raised as _ClientLimited if it stays so."""
    def measure(value: float) -> Probe:
        point = max(1, round(value)) if settings.integer else round(value, 6)
        result = probe(point)
        probes.append(result)
        for _ in range(settings.client_retries):
            if not result.client_limited or len(probes) >= settings.max_probes:
                break
            result = probe(point)
            probes.append(result)
        if result.client_limited:
            raise _ClientLimited(_client_why(probes, settings))
        return result
    return measure


def _search(probe: Callable[[float], Probe], settings: SearchSettings, probes: list[Probe]) -> CapacityResult:
    """Bracket, then bisect, recording every probe in `probes`."""
    integer = settings.integer
    measure = _measurer(probe, settings, probes)
    first = measure(min(max(settings.start, settings.min_value), settings.max_value))
    lo, hi = (first, None) if first.met else (None, first)
    while lo is None or hi is None:
        if len(probes) >= settings.max_probes:
            return _result(lo, hi, probes, settings, "the probe budget ran out while bracketing")
        if hi is None:
            assert lo is not None, "the first probe set one of the two, and neither is ever reset to None"
            if lo.rate >= settings.max_value:
                return _result(lo, hi, probes, settings, f"the SLO held up to {settings.max_value:g}")
            step = measure(min(lo.rate * settings.growth, settings.max_value))
        else:
            if hi.rate <= round(settings.min_value, 6) or (integer and hi.rate <= 1):  # as measure rounds
                return _result(lo, hi, probes, settings, f"the SLO failed at the lowest point, {hi.rate:g}")
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


def _client_why(probes: list[Probe], settings: SearchSettings) -> str:
    """Why a search stopped on a client-limited point: how often it was measured, the client's words."""
    last = probes[-1]
    times = 0
    for earlier in reversed(probes):  # the point's measurements: the last ones, all limited by the client
        if earlier.rate != last.rate or not earlier.client_limited:
            break
        times += earlier.attempts
    unit = "clients" if settings.integer else "req/s"
    again = ("twice" if times == 2 else f"{times} times") if times > 1 else \
        ("once, and the probe budget left no second measurement" if len(probes) >= settings.max_probes
         else "once (not measured again: no retries)")
    return (f"the probe at {last.rate:g} {unit} was invalid {again}: {'; '.join(last.reasons)}; "
            "the client, not the server, limited it")


def _stopped(probes: list[Probe], settings: SearchSettings, why: str) -> CapacityResult:
    """The search cut short by the client: the highest point met and the lowest the server missed so
    far (what the bracket held), not converged."""
    met = [p.rate for p in probes if p.met]
    missed = [p.rate for p in probes if not p.met and not p.client_limited]
    return CapacityResult(capacity=max(met, default=None), upper=min(missed, default=None), probes=probes,
                          converged=False, why=why)


def _narrow(lo: float, hi: float, settings: SearchSettings) -> bool:
    return hi - lo <= 1 if settings.integer else (hi - lo) / hi <= settings.precision


def _result(lo: Probe | None, hi: Probe | None, probes: list[Probe], settings: SearchSettings,
            why: str) -> CapacityResult:
    converged = lo is not None and hi is not None and _narrow(lo.rate, hi.rate, settings)
    return CapacityResult(capacity=lo.rate if lo else None, upper=hi.rate if hi else None, probes=probes,
                          converged=converged, why=why)
