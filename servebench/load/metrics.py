"""Metrics derived from request records: pure functions, no I/O.

Percentiles use linear interpolation between closest ranks (Hyndman-Fan type 7, numpy's
default, as `vllm bench serve` does); the estimator is named in every summary.
"""

from __future__ import annotations

import math
from typing import Iterable

from servebench.load.records import RequestRecord

PERCENTILES = {"p50": 50, "p90": 90, "p95": 95, "p99": 99, "p999": 99.9}
ESTIMATOR = "linear interpolation (Hyndman-Fan type 7)"


def percentile(sorted_values: list[float], q: float) -> float | None:
    """None for no values: a JSON-safe 'not measured', unlike NaN."""
    if not sorted_values:
        return None
    position = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def distribution(values: Iterable[float], scale: float = 1.0) -> dict:
    data = sorted(v * scale for v in values)
    summary = {"count": len(data), "mean": (sum(data) / len(data)) if data else None}
    summary.update({name: percentile(data, q) for name, q in PERCENTILES.items()})
    return summary


def ttft(r: RequestRecord) -> float | None:
    return None if r.first_token_s is None or r.sent_s is None else r.first_token_s - r.sent_s


def e2el(r: RequestRecord) -> float | None:
    return None if r.last_token_s is None or r.sent_s is None else r.last_token_s - r.sent_s


def tpot(r: RequestRecord) -> float | None:
    if r.output_tokens is None or r.output_tokens < 2 or r.first_token_s is None or r.last_token_s is None:
        return None
    return (r.last_token_s - r.first_token_s) / (r.output_tokens - 1)


def schedule_lag(r: RequestRecord) -> float | None:
    return None if r.sent_s is None or r.scheduled_s is None else r.sent_s - r.scheduled_s


def summarize(records: list[RequestRecord], offered_rate: float | None) -> dict:
    """Summary over the steady window: the requests after warmup, first send to last token."""
    steady = [r for r in records if not r.warmup]
    ok = [r for r in steady if r.ok]
    window = _window(steady)
    sent = [r.sent_s for r in steady if r.sent_s is not None]
    achieved = (len(sent) - 1) / (max(sent) - min(sent)) if len(sent) > 1 and max(sent) > min(sent) else None
    output_tokens = sum(r.output_tokens or 0 for r in ok)
    return {
        "completed": len(ok),
        "failed": len(steady) - len(ok),
        "warmup_requests": len(records) - len(steady),
        "duration_s": window,
        "offered_rate": offered_rate,
        "achieved_rate": achieved,
        "request_throughput": len(ok) / window if window else None,
        "output_throughput": output_tokens / window if window else None,
        "total_output_tokens": output_tokens,
        "total_input_tokens": sum(r.input_tokens or 0 for r in ok),
        "ttft_ms": distribution(_values(ok, ttft), 1000.0),
        "tpot_ms": distribution(_values(ok, tpot), 1000.0),
        "e2el_ms": distribution(_values(ok, e2el), 1000.0),
        "schedule_lag_ms": distribution(_values(steady, schedule_lag), 1000.0),
        "percentile_estimator": ESTIMATOR,
        "errors": _error_counts(steady),
    }


def _values(records: list[RequestRecord], metric) -> list[float]:
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
