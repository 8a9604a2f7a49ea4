"""An SLO as a campaign (or `servebench capacity`) states it: `{ttft_p99_ms: 500, ...}`."""

from __future__ import annotations

SLO_METRICS = ("ttft", "tpot", "itl", "e2el")
SLO_PERCENTILES = ("p50", "p90", "p95", "p99")


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
