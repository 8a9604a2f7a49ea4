"""Metrics derived from request records: pure functions, no I/O.

Definitions (all from the client's monotonic clock):
- a token is an event that carries one (servebench.load.sse), whatever its text: vLLM sends
  `text: ""` for a token that ends inside a UTF-8 sequence;
- TTFT = first token event - send (and, separately, first token - scheduled, which includes
  the client's own queueing: schedule lag or a concurrency cap); TTFT-text = first event
  with non-empty text - send, for the time to the first visible character;
- E2EL = last token event - send; TPOT = (last token - first token) / (output tokens - 1);
- ITL = every gap between consecutive token-carrying events of a request;
- throughput over the steady window: the requests after warmup, first send to last token;
- goodput: steady requests per second that met every SLO given (errors never do).

Percentiles use linear interpolation between closest ranks (Hyndman-Fan type 7, numpy's
default, as `vllm bench serve` does); the estimator is named in every summary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from servebench.load.records import RequestRecord
from servebench.load.summary import ClientUsage, Distribution, SteadySummary, WindowSummary

PERCENTILES = {"p50": 50, "p90": 90, "p95": 95, "p99": 99, "p999": 99.9}
ESTIMATOR = "linear interpolation between closest ranks (Hyndman-Fan type 7)"


def percentile(sorted_values: list[float], q: float) -> float | None:
    """None for no values: a JSON-safe 'not measured', unlike NaN."""
    if not sorted_values:
        return None
    position = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


class Judging(Protocol):
    """What a summary is judged by: a `LoadConfig`'s rate, SLOs and validity limits."""

    @property
    def rate(self) -> float | None: ...
    @property
    def slos(self) -> dict[str, float]: ...
    @property
    def max_schedule_lag_ms(self) -> float: ...
    @property
    def min_achieved_fraction(self) -> float: ...
    @property
    def max_client_cpu(self) -> float: ...


def distribution(values: Iterable[float], scale: float = 1.0) -> Distribution:
    data = sorted(v * scale for v in values)
    p50, p90, p95, p99, p999 = (percentile(data, q) for q in PERCENTILES.values())
    return Distribution(count=len(data), mean=(sum(data) / len(data)) if data else None,
                        p50=p50, p90=p90, p95=p95, p99=p99, p999=p999)


def ttft(r: RequestRecord) -> float | None:
    return None if r.first_token_s is None or r.sent_s is None else r.first_token_s - r.sent_s


def ttft_text(r: RequestRecord) -> float | None:
    return None if r.first_text_s is None or r.sent_s is None else r.first_text_s - r.sent_s


def ttft_from_scheduled(r: RequestRecord) -> float | None:
    return None if r.first_token_s is None or r.scheduled_s is None else r.first_token_s - r.scheduled_s


def e2el(r: RequestRecord) -> float | None:
    return None if r.last_token_s is None or r.sent_s is None else r.last_token_s - r.sent_s


def tpot(r: RequestRecord) -> float | None:
    if r.output_tokens is None or r.output_tokens < 2 or r.first_token_s is None or r.last_token_s is None:
        return None
    return (r.last_token_s - r.first_token_s) / (r.output_tokens - 1)


def schedule_lag(r: RequestRecord) -> float | None:
    return None if r.sent_s is None or r.scheduled_s is None else r.sent_s - r.scheduled_s


def itls(r: RequestRecord) -> list[float]:
    times = r.chunk_times
    return [b - a for a, b in zip(times, times[1:])]


def meets_slos(r: RequestRecord, slos: dict[str, float]) -> bool:
    if not r.ok:
        return False
    for name, limit_ms in slos.items():
        value = {"ttft_ms": ttft, "tpot_ms": tpot, "e2el_ms": e2el}[name](r)
        if value is None or value * 1000.0 > limit_ms:
            return False
    return True


def rate_of(times: list[float]) -> float | None:
    """Events per second between the first and the last: (n - 1) / span."""
    if len(times) < 2:
        return None
    span = max(times) - min(times)
    return (len(times) - 1) / span if span > 0 else None


def summarize(records: list[RequestRecord], config: Judging, client: ClientUsage | None = None) -> dict[str, Any]:
    """`steady_summary` as the result file holds it (plain JSON)."""
    return steady_summary(records, config, client).model_dump(mode="json")


def steady_summary(records: list[RequestRecord], config: Judging, client: ClientUsage | None = None
                   ) -> SteadySummary:
    """Steady-window summary plus the same over the whole run, with validity.

    `client` is the generator's own CPU use over the run (servebench.load.pinning)."""
    steady = [r for r in records if not r.warmup]
    window = window_summary(steady, config)
    reasons = invalid_reasons(config, steady, lag_p99_ms=window.schedule_lag_ms.p99,
                              scheduled_rate=window.scheduled_rate, achieved_rate=window.achieved_rate,
                              core_fraction=client.core_fraction if client is not None else None,
                              completed=window.completed)
    return SteadySummary(**dict(window), warmup_requests=len(records) - len(steady),
                         whole_run=window_summary(records, config), percentile_estimator=ESTIMATOR, client=client,
                         valid=not reasons, invalid_reasons=reasons)


def window_summary(records: list[RequestRecord], config: Judging) -> WindowSummary:
    ok = [r for r in records if r.ok]
    window = _window(records)
    output_tokens = sum(r.output_tokens or 0 for r in ok)
    input_tokens = sum(r.input_tokens or 0 for r in ok)
    slos = config.slos
    good = sum(1 for r in records if meets_slos(r, slos)) if slos else None
    scheduled = [r.scheduled_s for r in records if r.scheduled_s is not None]
    return WindowSummary(
        requests=len(records),
        completed=len(ok),
        failed=len(records) - len(ok),
        duration_s=window,
        offered_rate=config.rate,
        scheduled_rate=rate_of(scheduled) if config.rate is not None else None,
        achieved_rate=rate_of([r.sent_s for r in records if r.sent_s is not None]),
        request_throughput=len(ok) / window if window else None,
        output_throughput=output_tokens / window if window else None,
        total_token_throughput=(output_tokens + input_tokens) / window if window else None,
        goodput=good / window if good is not None and window else None,
        slos=slos,
        total_input_tokens=input_tokens,
        total_output_tokens=output_tokens,
        ttft_ms=distribution(_values(ok, ttft), 1000.0),
        ttft_from_scheduled_ms=distribution(_values(ok, ttft_from_scheduled), 1000.0),
        ttft_text_ms=distribution(_values(ok, ttft_text), 1000.0),
        tpot_ms=distribution(_values(ok, tpot), 1000.0),
        itl_ms=distribution((gap for r in ok for gap in itls(r)), 1000.0),
        e2el_ms=distribution(_values(ok, e2el), 1000.0),
        schedule_lag_ms=distribution(_values(records, schedule_lag), 1000.0),
        errors=_error_counts(records),
    )


# How each reason of the load generator's own limits begins (`validity` writes them so): a run
# invalid for these alone says nothing about the server (see `client_limited`).
CLIENT_LAG = "schedule lag p99"
CLIENT_RATE = "achieved rate"
CLIENT_CPU = "the load generator used"
CLIENT_REASONS = (CLIENT_LAG, CLIENT_RATE, CLIENT_CPU)


def client_limited(reasons: Iterable[str]) -> bool:
    """Whether a run was invalid because of the load generator alone (it fell behind its schedule,
    sent below the rate asked, or was too busy on its core): such a run measured the client, not
    the server. Any other reason ("no request completed", token counts that disagree with the
    server's) is the server's, and makes the run the server's failure."""
    reasons = list(reasons)
    return bool(reasons) and all(reason.startswith(CLIENT_REASONS) for reason in reasons)


def validity(summary: Mapping[str, Any], steady: list[RequestRecord], config: Judging) -> tuple[bool, list[str]]:
    """`invalid_reasons` over a summary's JSON form (its window figures and `client`)."""
    reasons = invalid_reasons(config, steady, lag_p99_ms=summary["schedule_lag_ms"]["p99"],
                              scheduled_rate=summary["scheduled_rate"], achieved_rate=summary["achieved_rate"],
                              core_fraction=(summary.get("client") or {}).get("core_fraction"),
                              completed=summary["completed"])
    return not reasons, reasons


def invalid_reasons(config: Judging, steady: list[RequestRecord], *, lag_p99_ms: float | None,
                    scheduled_rate: float | None, achieved_rate: float | None, core_fraction: float | None,
                    completed: int) -> list[str]:
    """Why a run is invalid (none: valid): its client could not keep its schedule or was too busy,
    its token counts disagree, or nothing was answered."""
    reasons = []
    if config.rate is not None and lag_p99_ms is not None and lag_p99_ms > config.max_schedule_lag_ms:
        reasons.append(f"{CLIENT_LAG} {lag_p99_ms:.2f} ms exceeds {config.max_schedule_lag_ms:g} ms: "
                       "the client fell behind its schedule")
    if scheduled_rate and achieved_rate is not None and achieved_rate < config.min_achieved_fraction * scheduled_rate:
        reasons.append(f"{CLIENT_RATE} {achieved_rate:.2f} req/s is below {config.min_achieved_fraction:.0%} of "
                       f"the scheduled {scheduled_rate:.2f} req/s")
    mismatched = [r.index for r in steady if r.ok and r.token_source == "usage"
                  and sum(r.chunk_tokens) != r.output_tokens]
    if mismatched:
        reasons.append(f"{len(mismatched)} requests' streamed token counts differ from the server's usage "
                       f"(first: request {mismatched[0]})")
    from_chunks = sum(1 for r in steady if r.ok and r.token_source == "chunks")
    if from_chunks:
        reasons.append(f"{from_chunks} requests had no running usage in the stream: their tokens were "
                       "counted from events, so TTFT/TPOT/ITL are approximate")
    if core_fraction is not None and core_fraction > config.max_client_cpu:
        reasons.append(f"{CLIENT_CPU} {core_fraction:.0%} of a core (limit {config.max_client_cpu:.0%}): "
                       "it may be the bottleneck, not the server")
    if not completed:
        reasons.append("no request completed")
    return reasons


def _values(records: list[RequestRecord], metric: Callable[[RequestRecord], float | None]) -> list[float]:
    return [v for v in (metric(r) for r in records) if v is not None]


def _window(records: list[RequestRecord]) -> float | None:
    starts = [r.sent_s for r in records if r.sent_s is not None]
    ends = [r.last_token_s for r in records if r.last_token_s is not None]
    if not starts or not ends:
        return None
    return max(ends) - min(starts)


def _error_counts(records: list[RequestRecord]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in records:
        if r.error_kind:
            counts[r.error_kind] = counts.get(r.error_kind, 0) + 1
    return counts
