"""Warm until steady: before a cell is measured, send warm-up requests until the server's latencies
stop drifting, instead of a fixed count.

Why: the first cell after a server starts runs slow (compiled graphs for new batch shapes,
allocator growth, caches), and a fixed count of warm-up requests does not know when that is over:
docs/across-hosts.md measured a TP=2 cell at 14.7 tok/s first and 18.2 tok/s later on a worse
link. Here the warm-up runs at the cell's concurrency and ends when the medians of the last two
windows of completed requests agree within a tolerance, for TTFT and for TPOT; it is bounded in
time and in requests, and a server that never steadied is said to be so (the cell is measured
anyway, and the result carries it).

Warm-up prompts come from the cell's workload with another data seed: never the prompts the
cell then measures, whose prefixes would otherwise be in the server's prefix cache already.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from typing import Awaitable, Callable

from pydantic import BaseModel, ConfigDict, Field

from servebench.load import metrics
from servebench.load.records import RequestRecord

WARMUP_SEED_OFFSET = 1_000_003  # warm-up prompts: another data seed than any cell's
MAX_CONCURRENCY = 64


class SteadyWarmup(BaseModel):
    """`load.warm_until_steady` (campaign) and `--warm-until-steady` (servebench load)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window: int = Field(4, ge=2, le=64, description="Completed requests per window; two windows are compared.")
    tolerance: float = Field(0.10, gt=0, lt=1, description="Steady when the two windows' medians (TTFT and "
                                                           "TPOT) differ by at most this share.")
    max_s: float = Field(60.0, gt=0, description="Give up after this long: the cell is measured, marked unsteady.")
    max_requests: int = Field(200, ge=4, description="Give up after this many warm-up requests.")
    floor_ms: float = Field(0.5, ge=0, description="Medians this close agree whatever their share (a 1 ms TTFT "
                                                   "that becomes 1.3 ms is steady: the clock's and the network's "
                                                   "jitter, not a server warming up).")


class WarmupOutcome(BaseModel):
    """What a warm-up took, as landed with the cell (`summary.warm_until_steady`)."""

    model_config = ConfigDict(extra="forbid")

    steady: bool
    requests: int
    seconds: float
    concurrency: int
    ttft_medians_ms: list[float | None]   # the last two windows' (older first)
    tpot_medians_ms: list[float | None]
    why: str


def ttft_ms(record: RequestRecord) -> float | None:
    value = metrics.ttft(record) if record.ok else None
    return None if value is None else value * 1000


def tpot_ms(record: RequestRecord) -> float | None:
    value = metrics.tpot(record) if record.ok else None
    return None if value is None else value * 1000


def window_medians(values: list[float | None], window: int) -> tuple[float | None, float | None]:
    """Medians of the two last windows of values (older first); None where a window has no value."""
    older = [x for x in values[-2 * window:-window] if x is not None]
    newer = [x for x in values[-window:] if x is not None]
    return (statistics.median(older) if older else None, statistics.median(newer) if newer else None)


def agree(medians: tuple[float | None, float | None], tolerance: float, floor_ms: float = 0.0) -> bool:
    older, newer = medians
    if older is None or newer is None:
        return False
    return abs(newer - older) <= max(tolerance * abs(older), floor_ms)


def is_steady(records: list[RequestRecord], spec: SteadyWarmup) -> bool:
    """Steady: at least two full windows of successful requests, and both metrics' window medians
    agree (TPOT only where the answers are longer than one token)."""
    done = [r for r in records if r.ok and r.last_token_s is not None]
    if len(done) < 2 * spec.window:
        return False
    ttfts = [ttft_ms(r) for r in done]
    tpots = [tpot_ms(r) for r in done]
    tpot_ok = agree(window_medians(tpots, spec.window), spec.tolerance, spec.floor_ms) \
        if any(t is not None for t in tpots) else True
    return agree(window_medians(ttfts, spec.window), spec.tolerance, spec.floor_ms) and tpot_ok


def warmup_concurrency(clients: int | None, rate: float | None, first_e2el_s: float | None) -> int:
    """The cell's concurrency: its clients (closed loop), else what its rate keeps in flight by
    Little's law (rate x one request's latency, measured by the first warm-up request)."""
    if clients:
        return min(clients, MAX_CONCURRENCY)
    if rate and first_e2el_s:
        return max(1, min(MAX_CONCURRENCY, math.ceil(rate * first_e2el_s)))
    return 1


async def warm_until_steady(spec: SteadyWarmup, clients: int | None, rate: float | None,
                            send: Callable[[int], Awaitable[RequestRecord]]) -> WarmupOutcome:
    """Send warm-up requests (`send(i)` sends the i-th and returns its record once answered) at the
    cell's concurrency until steady, or until `max_s` or `max_requests`."""
    started = time.monotonic()
    deadline = started + spec.max_s
    records: list[RequestRecord] = [await send(0)]
    first = records[0]
    concurrency = warmup_concurrency(clients, rate, metrics.e2el(first) if first.ok else None)
    next_index = 1
    steady_at: list[int] = []   # how many records had come back when the server was found steady

    async def worker() -> None:
        nonlocal next_index
        while not steady_at and next_index < spec.max_requests and time.monotonic() < deadline:
            index = next_index
            next_index += 1
            records.append(await send(index))
            if not steady_at and is_steady(records, spec):
                steady_at.append(len(records))

    await asyncio.gather(*(worker() for _ in range(concurrency)))   # the requests in flight finish
    steady = bool(steady_at)
    judged = records[:steady_at[0]] if steady else records
    ok = [r for r in judged if r.ok and r.last_token_s is not None]
    seconds = time.monotonic() - started
    if steady:
        why = f"steady after {len(records)} requests ({seconds:.1f} s)"
    elif len(records) >= spec.max_requests:
        why = f"not steady after {spec.max_requests} requests ({seconds:.1f} s)"
    else:
        why = f"not steady after {spec.max_s:g} s ({len(records)} requests, {len(ok)} answered)"
    return WarmupOutcome(steady=steady, requests=len(records), seconds=round(seconds, 3), concurrency=concurrency,
                         ttft_medians_ms=list(window_medians([ttft_ms(r) for r in ok], spec.window)),
                         tpot_medians_ms=list(window_medians([tpot_ms(r) for r in ok], spec.window)), why=why)
