"""The campaign's `roofline:` block (max age, busy share) reaches the measurement on the nodes: the
`measure-roofline` task hands it to `measure_nodes` as the cache's limits."""

from __future__ import annotations

import json
import subprocess
import time

from servebench.builds.venv import EngineBuild
from servebench.config.campaign import RooflineSpec
from servebench.providers import Node
from servebench.roofline import nodes as node_roofline
from servebench.tasks.roofline import measure_roofline

NODE = Node(name="n0", address="127.0.0.1", cpus=[0])
FACTS = {"n0": {"hostname": "h", "cpu_model": "cpu", "arch": "x86_64"}}
BUILD = EngineBuild(key="k1", engine="vllm", engine_version="0", packages=[], python_version="3.11",
                    platform="linux-x86_64", venv_path="/venv", pip_freeze="", build_seconds=None,
                    created_at="2026-01-01T00:00:00", inputs={}, tool_version="0")


class Measuring:
    """Answers the roofline program with figures taken while others kept the cores `busy` busy."""

    def __init__(self, busy: float = 0.0) -> None:
        self.runs, self.busy = 0, busy

    def run(self, node, argv, timeout=None):
        self.runs += 1
        out = "ROOFLINE " + json.dumps({"cpus": [0], "library": "torch", "mem_bandwidth_gbps": 10.0,
                                        "matmul_peak_gflops_fp32": 50.0, "busy_before": self.busy})
        return subprocess.CompletedProcess(argv, 0, out, "")

    def node_python(self, node):
        return "/usr/bin/python3"


def measure(provider: Measuring, limits: RooflineSpec | None = None) -> dict:
    return measure_roofline.fn(provider, [NODE], FACTS, BUILD, limits)["n0"]


def age_cached_figures(cache, days: float) -> None:
    path = next((cache / "roofline").glob("*.json"))
    path.write_text(json.dumps(json.loads(path.read_text()) | {"measured_at": time.time() - days * 86400}))


def test_the_block_becomes_the_caches_limits_and_no_block_the_defaults():
    assert node_roofline.cache_limits(RooflineSpec(max_age_days=2, max_busy=0.5)) == node_roofline.CacheLimits(2, 0.5)
    assert node_roofline.cache_limits(None) == node_roofline.DEFAULT_LIMITS
    assert node_roofline.cache_limits(RooflineSpec()) == node_roofline.DEFAULT_LIMITS   # one default, not two


def test_the_campaigns_max_age_reaches_the_measurement(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path))
    provider = Measuring()
    assert measure(provider)["cached"] is False
    age_cached_figures(tmp_path, 2)
    assert measure(provider)["cached"] is True                                    # the default: 7 days
    again = measure(provider, RooflineSpec(max_age_days=1))
    assert again["cached"] is False and "at most 1" in again["remeasured"] and provider.runs == 2


def test_the_campaigns_busy_share_reaches_the_measurement(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path))
    measure(Measuring(busy=0.4), RooflineSpec(max_busy=0.5))
    quiet = Measuring(busy=0.0)
    assert measure(quiet, RooflineSpec(max_busy=0.5))["cached"] is True and quiet.runs == 0   # 40% allowed
    again = measure(quiet)                                                       # the default: 25%
    assert again["cached"] is False and "40% busy (at most 25%)" in again["remeasured"] and quiet.runs == 1
