"""The server's own token counter, read from its Prometheus /metrics before and after a run,
so the client's count can be checked against the server's."""

from __future__ import annotations

import aiohttp
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


async def scrape_counter(session: aiohttp.ClientSession, base_url: str, sample_name: str) -> float | None:
    """None when the server has no /metrics or no such counter: the check is then skipped."""
    try:
        async with session.get(base_url.rstrip("/") + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as resp:
            if resp.status != 200:
                return None
            return counter_value(await resp.text(), sample_name)
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
