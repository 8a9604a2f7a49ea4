"""What a series is: one metric of one cell identity on one hardware fingerprint.

The engine version is deliberately *not* part of the identity, so that a vLLM commit, a
setting or a degraded node shows up as a change *within* a series. Nights are runs; a
night's value is the median of its repeats, and a night whose repeats disagree more than
the metric's coefficient-of-variation limit is flagged noisy and kept out of baselines.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, Field

from servebench.config.sweep import LoadPoint

Direction = Literal["higher", "lower"]


class Metric(BaseModel):
    name: str                  # a column of `cells` (capacity: of `capacity`, a series of its own)
    direction: Direction       # which way is better
    cv_limit: float            # a night whose repeats vary more than this is noisy
    unit: str


# Latency percentiles vary more between repeats than throughput does; p99 most of all.
METRICS: dict[str, Metric] = {m.name: m for m in [
    Metric(name="output_throughput", direction="higher", cv_limit=0.10, unit="tok/s"),
    Metric(name="request_throughput", direction="higher", cv_limit=0.10, unit="req/s"),
    Metric(name="ttft_p50_ms", direction="lower", cv_limit=0.20, unit="ms"),
    Metric(name="ttft_p99_ms", direction="lower", cv_limit=0.30, unit="ms"),
    Metric(name="tpot_p50_ms", direction="lower", cv_limit=0.15, unit="ms"),
    Metric(name="goodput", direction="higher", cv_limit=0.15, unit="req/s"),
    # a capacity search's result (rate or clients): one value a night, its bracket's precision apart
    Metric(name="capacity", direction="higher", cv_limit=0.15, unit="req/s or clients"),
]}

# cells columns (but campaign, the run's); an id hashes their values in this order, not their names
IDENTITY_FIELDS = ("campaign", "mode", "tp", "pp", "executor", "load_kind", "offered_rate", "clients",
                   "input_len", "output_len")
# Part of the identity only where set: a series without them keeps the id it always had.
OPTIONAL_IDENTITY_FIELDS = ("link", "knobs", "workload")


class Night(BaseModel):
    """One run's measurements of one series."""

    run_id: str
    at: datetime
    engine_version: str | None = None
    values: list[float] = Field(min_length=1)   # one per repeat
    excluded: bool = False                       # a user excluded this night (annotation)
    accepted: bool = False                       # a user accepted this night as a new baseline

    @property
    def value(self) -> float:
        return statistics.median(self.values)

    @property
    def cv(self) -> float:
        if len(self.values) < 2:
            return 0.0
        mean = statistics.fmean(self.values)
        return statistics.stdev(self.values) / abs(mean) if mean else float("inf")

    def noisy(self, metric: Metric) -> bool:
        return self.cv > metric.cv_limit


def hardware_fingerprint(nodes: list[dict]) -> str:
    """A short hash of what the campaign ran on: per node, CPU model, architecture, the cores it
    may use and has, memory (GiB, as kernels report a few MB differently) and NUMA nodes."""
    described = [
        [n.get("cpu_model"), n.get("arch"), len(n.get("cpus") or []), n.get("logical_cores"),
         round((n.get("mem_total_bytes") or 0) / 2**30), n.get("numa_nodes")]
        for n in sorted(nodes, key=lambda n: n["node"])
    ]
    return hashlib.sha256(json.dumps(described).encode()).hexdigest()[:12]


def series_id(identity: dict, fingerprint: str) -> str:
    """Stable across runs and engine versions; the metric is kept apart (series_id, metric)."""
    key = [identity.get(f) for f in IDENTITY_FIELDS] + [fingerprint]
    key += [[f, identity[f]] for f in OPTIONAL_IDENTITY_FIELDS if identity.get(f) is not None]
    return hashlib.sha256(json.dumps(key, default=str).encode()).hexdigest()[:16]


def capacity_series_id(identity: dict, fingerprint: str) -> str:
    """A capacity's series: the campaign, the configuration (mode and knobs), what was searched
    (rate or clients) under which SLO and the workload's lengths, on one hardware fingerprint."""
    key = ["capacity", identity["campaign"], identity["mode"], identity.get("knobs"), identity["search_over"],
           json.dumps(json.loads(identity["slo"]), sort_keys=True), identity.get("input_len"),
           identity.get("output_len"), fingerprint]
    return hashlib.sha256(json.dumps(key, default=str).encode()).hexdigest()[:16]


def series_label(identity: dict) -> str:
    if identity["load_kind"] == "capacity":
        return f"{identity['campaign']}/{identity['mode']} capacity ({identity.get('search_over') or 'rate'})"
    point = LoadPoint(kind=identity["load_kind"], clients=identity.get("clients"), rate=identity.get("offered_rate"))
    network = f" {identity['link']}" if identity.get("link") else ""
    return (f"{identity['campaign']}/{identity['mode']}{network} {point.label} "
            f"in{identity['input_len']}/out{identity['output_len']}")


def cell_point(cell_key: str) -> str:
    """tp2.c4.r1 -> tp2.c4: the load point, the same in every repeat (sweep.cell_key's layout)."""
    return _REPEAT_SUFFIX.sub("", cell_key)


_REPEAT_SUFFIX = re.compile(r"\.r\d+$")
