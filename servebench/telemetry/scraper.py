"""Scrape an engine's Prometheus /metrics at a fixed rate into JSON lines.

Parsed with prometheus_client's parser; keeps the gauges and counters a campaign needs
(KV-cache usage, running/waiting, preemptions, prompt/generation token counters, requests served).
Which sample fills which column is the engine's metric map, given as `--metric NAME=COLUMN` flags;
an engine with more state than its metrics say (llama.cpp's `/slots`) names a `--state
module:function` called with the URL at every tick. Same monotonic clock as the load generator, so
every sample falls in a cell.

Instances: a server of several engines or replicas is also kept per instance, so an imbalance shows.
vLLM's data-parallel engines label every series `engine="0"`, `engine="1"`: one server's samples come
apart by that label into instances `dp0`, `dp1`. A mode of replicas behind a balancer names each
replica's URL (`--instance r0=URL`, repeated): each is scraped, and a replica that has DP engines of
its own comes apart too (`r0.dp0`). A row's columns are then the server's aggregate over its
instances: counters and running/waiting summed, `kv_usage` (a 0-1 fraction of each engine's own pool)
the mean; its `instances` field holds each instance's columns (only with two or more instances). A
row of replicas is written only when every replica answered: a counter summed over fewer replicas
would drop, and a cell's change of it would be wrong.

`python -m servebench.telemetry.scraper --url http://127.0.0.1:8000 --hz 1
--metric engine:kv_usage=kv_usage --out s.jsonl`

A server that asks for a key (llama-server guards /metrics and /slots with it, vLLM every route but
/health): `--api-key-file PATH`, else the file `SERVEBENCH_API_KEY_FILE` names (how the orchestrator hands its
run's token file to the scraper it starts); every request to the scraped URLs then carries
`Authorization: Bearer <key>`. The key is read from the file, never from a command line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
import urllib.error
import urllib.request
from typing import Callable
from urllib.parse import urlsplit

from prometheus_client.parser import text_string_to_metric_families

from servebench.telemetry.periodic import run_periodic

StateSampler = Callable[[str], "dict[str, float] | None"]
KEY_FILE_VARIABLE = "SERVEBENCH_API_KEY_FILE"  # servebench.load.credentials' name for it (a layer apart)
ENGINE_LABEL = "engine"            # vLLM's data-parallel engine index on every series
MEAN_COLUMNS = frozenset({"kv_usage"})  # fractions of each instance's own pool: averaged, not summed


def parse_instances(text: str, wanted: dict[str, str]) -> dict[str, dict[str, float]]:
    """The wanted samples (name -> column) per instance: by vLLM's `engine` label (`dp0`, `dp1`; a
    series without it: ""), each summed over its other label sets (finished_reason, ...)."""
    instances: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            column = wanted.get(sample.name)
            if column is not None:
                engine = sample.labels.get(ENGINE_LABEL)
                values = instances.setdefault("" if engine is None else f"dp{engine}", {})
                values[column] = values.get(column, 0.0) + sample.value
    return dict(sorted(instances.items(), key=lambda item: _instance_order(item[0])))


def _instance_order(name: str) -> tuple:
    """dp2 before dp10; r1.dp0 before r10."""
    return tuple((0, int(part[2:]), "") if part.startswith("dp") and part[2:].isdigit()
                 else (1, int(part[1:]), "") if part.startswith("r") and part[1:].isdigit() else (2, 0, part)
                 for part in name.split("."))


def aggregate(instances: dict[str, dict[str, float]]) -> dict[str, float]:
    """The server's columns from its instances': summed, but MEAN_COLUMNS averaged over the instances
    that report them (two engines at 0.5 each are a server at 0.5, not 1.0)."""
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for values in instances.values():
        for column, value in values.items():
            totals[column] = totals.get(column, 0.0) + value
            counts[column] = counts.get(column, 0) + 1
    return {column: total / counts[column] if column in MEAN_COLUMNS else total for column, total in totals.items()}


def parse(text: str, wanted: dict[str, str]) -> dict[str, float]:
    """The wanted samples (name -> column) of one server, aggregated over its engines (`aggregate`)."""
    return aggregate(parse_instances(text, wanted))


def fetch_metrics(url: str, timeout_s: float = 2.0) -> str | None:
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout_s) as response:
            return response.read().decode(errors="replace")
    except (urllib.error.URLError, OSError, ValueError):
        return None


def scrape_instances(url: str, wanted: dict[str, str], state: StateSampler | None = None,
                     timeout_s: float = 2.0) -> dict[str, dict[str, float]] | None:
    """One server's instances (its DP engines; one instance "" without them), the state sampler's
    columns on the one instance it describes; None: no answer."""
    text = fetch_metrics(url, timeout_s)
    try:
        found = None if text is None else parse_instances(text, wanted)
    except ValueError:
        return None
    if found is None:
        return None
    if state is not None:
        extra = state(url) or {}
        if len(found) <= 1:  # one instance: the state is its own
            name = next(iter(found), "")
            found = {name: {**found.get(name, {}), **extra}}
        elif extra:          # a state sampler reads the whole server: kept apart from its engines
            found[""] = {**found.get("", {}), **extra}
    return found


def sample(url: str, wanted: dict[str, str], state: StateSampler | None = None,
           instance_urls: dict[str, str] | None = None) -> dict | None:
    """One row's values: the server's aggregate columns and, with two or more instances, `instances`
    (name -> columns). With `instance_urls` (replicas), every one of them scraped; None when any is
    silent. Without, the one server at `url`, its DP engines its instances."""
    if instance_urls:
        instances: dict[str, dict[str, float]] = {}
        for name, instance_url in instance_urls.items():
            found = scrape_instances(instance_url, wanted, state)
            if found is None:
                return None
            for engine, values in found.items():
                instances[name if not engine or len(found) == 1 else f"{name}.{engine}"] = values
    else:
        found = scrape_instances(url, wanted, state)
        if found is None:
            return None
        instances = found
    row: dict = aggregate(instances)
    named = {name: values for name, values in instances.items() if name}
    if instance_urls or len(named) > 1:
        row["instances"] = named
    return row


def state_sampler(name: str) -> StateSampler:
    """'package.module:function' -> the function."""
    module, _, function = name.partition(":")
    return getattr(importlib.import_module(module), function)


def run(url: str, hz: float, out: str, mode: str, wanted: dict[str, str], state: StateSampler | None = None,
        instance_urls: dict[str, str] | None = None) -> int:
    def row() -> dict | None:
        t_mono, t_wall = time.monotonic(), time.time()
        values = sample(url, wanted, state, instance_urls)
        return None if values is None else {"mode": mode, "t_mono": t_mono, "t_wall": t_wall, **values}

    written = run_periodic(hz, out, row)
    # stopped (before the server is): one last sample, so the last cell's counters have an end after it
    # even when it ended within a scrape period of the stop
    last = row()
    if last is not None:
        with open(out, "a") as sink:
            sink.write(json.dumps(last) + "\n")
        written += 1
    return written


class BearerHandler(urllib.request.BaseHandler):
    """Adds `Authorization: Bearer <key>` to this process's urllib requests to the given hosts."""

    handler_order = 400

    def __init__(self, key: str, urls: list[str]):
        self.value = f"Bearer {key}"
        self.netlocs = {urlsplit(url).netloc for url in urls}

    def http_request(self, request: urllib.request.Request) -> urllib.request.Request:
        if urlsplit(request.full_url).netloc in self.netlocs and not request.has_header("Authorization"):
            request.add_unredirected_header("Authorization", self.value)
        return request


def use_api_key(key_file: str | None, urls: list[str]) -> bool:
    """Send the key in `key_file` (else `SERVEBENCH_API_KEY_FILE`'s) with every request to `urls`; False: no key."""
    path = key_file or os.environ.get(KEY_FILE_VARIABLE)
    if not path:
        return False
    try:
        with open(path) as handle:
            key = handle.read().strip()
    except OSError as exc:
        raise SystemExit(f"scraper: the API key file {path}: {exc.strerror or exc}") from None
    if not key:
        raise SystemExit(f"scraper: the API key file {path} holds no key")
    urllib.request.install_opener(urllib.request.build_opener(BearerHandler(key, urls)))
    return True


def named_urls(items: list[str]) -> dict[str, str]:
    """`--instance NAME=URL` flags -> {name: url}, in the order given."""
    found: dict[str, str] = {}
    for item in items:
        name, sep, url = item.partition("=")
        if not sep or not name or not url:
            raise SystemExit(f"scraper: --instance {item!r} is not NAME=URL")
        found[name] = url
    return found


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
    parser.add_argument("--instance", action="append", default=[], metavar="NAME=URL",
                        help="an instance of the server scraped on its own (repeat; a replica behind the balancer "
                             "at --url): the server's row is then their aggregate")
    parser.add_argument("--api-key-file", metavar="PATH",
                        help=f"a file holding the server's API key (default: the file ${KEY_FILE_VARIABLE} names)")
    args = parser.parse_args()
    wanted = dict(item.split("=", 1) for item in args.metric)
    use_api_key(args.api_key_file, [args.url, *named_urls(args.instance).values()])
    run(args.url, args.hz, args.out, args.mode, wanted, state_sampler(args.state) if args.state else None,
        named_urls(args.instance))


if __name__ == "__main__":
    main()
