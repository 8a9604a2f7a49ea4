"""Scrape an engine's Prometheus /metrics at a fixed rate into JSON lines.

Parsed with prometheus_client's parser; keeps the gauges and counters a campaign needs
(KV-cache usage, running/waiting, preemptions, prompt/generation token counters), summed
over label sets. Which sample fills which column is the engine's metric map, given as
`--metric NAME=COLUMN` flags; an engine with more state than its metrics say (llama.cpp's
`/slots`) names a `--state module:function` called with the URL at every tick. Same monotonic
clock as the load generator, so every sample falls in a cell.
`python -m servebench.telemetry.scraper --url http://127.0.0.1:8000 --hz 1
--metric engine:kv_usage=kv_usage --out s.jsonl`
"""

from __future__ import annotations

import argparse
import importlib
import time
import urllib.error
import urllib.request
from typing import Callable

from prometheus_client.parser import text_string_to_metric_families

from servebench.telemetry.periodic import run_periodic

StateSampler = Callable[[str], "dict[str, float] | None"]

def parse(text: str, wanted: dict[str, str]) -> dict[str, float]:
    """The wanted samples (name -> column), each summed over its label sets."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            column = wanted.get(sample.name)
            if column is not None:
                values[column] = values.get(column, 0.0) + sample.value
    return values


def scrape_once(url: str, wanted: dict[str, str], timeout_s: float = 2.0) -> dict[str, float] | None:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout_s) as response:
            return parse(response.read().decode(errors="replace"), wanted)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def state_sampler(name: str) -> StateSampler:
    """'package.module:function' -> the function."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def run(url: str, hz: float, out: str, mode: str, wanted: dict[str, str], state: StateSampler | None = None) -> int:
    def row() -> dict | None:
        t_mono, t_wall = time.monotonic(), time.time()
        values = scrape_once(url, wanted)
        if values is not None and state is not None:
            values.update(state(url) or {})
        return None if values is None else {"mode": mode, "t_mono": t_mono, "t_wall": t_wall, **values}

    return run_periodic(hz, out, row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--hz", type=float, default=1.0)
    parser.add_argument("--out", required=True)
    parser.add_argument("--metric", action="append", default=[], metavar="NAME=COLUMN",
                        help="a Prometheus sample to keep and its column (repeat; the engine's metric map)")
    parser.add_argument("--state", metavar="MODULE:FUNCTION",
                        help="the engine's sampler of more server state (url -> {column: value})")
    args = parser.parse_args()
    wanted = dict(item.split("=", 1) for item in args.metric)
    run(args.url, args.hz, args.out, args.mode, wanted, state_sampler(args.state) if args.state else None)


if __name__ == "__main__":
    main()
