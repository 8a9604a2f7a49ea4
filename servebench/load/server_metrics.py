"""The server's own token counter, read from its Prometheus /metrics before and after a run,
so the client's count can be checked against the server's; and a sample per engine (vLLM labels each
data-parallel engine's series `engine="0"`, `engine="1"`...), so the load each rank took shows."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def counter_value(text: str, sample_name: str) -> float | None:
    """Sum of a counter over all its label sets (e.g. one per engine), or None if absent."""
    total, found = 0.0, False
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == sample_name:
                total += sample.value
                found = True
    return total if found else None


def counter_by_label(text: str, sample_name: str, label: str = "engine") -> dict[str, float]:
    """A sample summed per value of one label (the other labels, e.g. finished_reason, summed over):
    {"0": 5.0, "1": 8.0} for vLLM's DP engines; {} if absent. A series without the label counts as ""."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == sample_name:
                key = sample.labels.get(label, "")
                totals[key] = totals.get(key, 0.0) + sample.value
    return totals


def scrape_counter(base_url: str, sample_name: str, timeout_s: float = 5.0) -> float | None:
    """None when the server has no /metrics or no such counter: the check is then skipped."""
    try:
        with urllib.request.urlopen(base_url.rstrip("/") + "/metrics", timeout=timeout_s) as response:
            return counter_value(response.read().decode(errors="replace"), sample_name)
    except (urllib.error.URLError, OSError, ValueError):
        return None
