"""Scrape an engine's Prometheus /metrics at a fixed rate into JSON lines.

Parsed with prometheus_client's parser; keeps the gauges and counters a campaign needs
(KV-cache usage, running/waiting, preemptions, prompt/generation token counters), summed
over label sets. Same monotonic clock as the load generator, so every sample falls in a
cell. `python -m servebench.telemetry.scraper --url http://127.0.0.1:8000 --hz 1 --out s.jsonl`
"""

from __future__ import annotations

import argparse
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from servebench.telemetry.periodic import run_periodic

VLLM_SAMPLES = {
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:num_preemptions_total": "preemptions_total",
    "vllm:prompt_tokens_total": "prompt_tokens_total",
    "vllm:generation_tokens_total": "generation_tokens_total",
}


def parse(text: str, wanted: dict[str, str] = VLLM_SAMPLES) -> dict[str, float]:
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            column = wanted.get(sample.name)
            if column is not None:
                values[column] = values.get(column, 0.0) + sample.value
    return values


def scrape_once(url: str, timeout_s: float = 2.0) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout_s) as response:
            return parse(response.read().decode(errors="replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def run(url: str, hz: float, out: str, mode: str) -> int:
    def row() -> dict | None:
        t_mono, t_wall = time.monotonic(), time.time()
        values = scrape_once(url)
        return None if values is None else {"mode": mode, "t_mono": t_mono, "t_wall": t_wall, **values}

    return run_periodic(hz, out, row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--hz", type=float, default=1.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    run(args.url, args.hz, args.out, args.mode)


if __name__ == "__main__":
    main()
