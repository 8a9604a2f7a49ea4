"""The node sampler run for real against a live process, and the scraper's parsing."""

import json
import os
import subprocess
import sys

from servebench.engines.vllm import VllmEngine
from servebench.processes import ManagedProcess
from servebench.telemetry.scraper import parse
from tests.support.waiting import wait_until

VLLM_METRICS = """# HELP vllm:kv_cache_usage_perc KV-cache usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="tiny"} 0.5
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="tiny"} 7.0
vllm:num_preemptions_created{engine="0",model_name="tiny"} 1.7e+09
# TYPE vllm:generation_tokens counter
vllm:generation_tokens_total{engine="0",model_name="tiny"} 768.0
"""


def test_scraper_parses_and_sums_label_sets():
    values = parse(VLLM_METRICS, VllmEngine.api.metrics)
    assert values == {"kv_usage": 0.75, "running": 3.0, "preemptions_total": 7.0, "generation_tokens_total": 768.0}


def test_node_sampler_follows_a_process_tree(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(50_000_000); time.sleep(30)"])
    out = tmp_path / "s.jsonl"
    cpus = ",".join(map(str, sorted(os.sched_getaffinity(0))))
    sampler = ManagedProcess.start([sys.executable, "-m", "servebench.telemetry.node_sampler", "--node", "n0",
                                    "--cpus", cpus, "--pids", str(child.pid), "--hz", "10", "--out", str(out)],
                                   log_path=tmp_path / "s.log")
    try:  # a second of samples at 10 Hz, however long the sampler took to start
        wait_until(lambda: out.exists() and out.read_text().count("\n") >= 10, "ten samples", timeout_s=30)
    finally:
        sampler.stop(grace_s=5)
        child.kill()
        child.wait()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert 8 <= len(rows) <= 20
    row = rows[-1]
    assert row["node"] == "n0" and 0 <= row["cpu_pct"] <= 100
    assert set(row["cpu_pct_per_core"]) == set(cpus.split(","))
    assert row["engine_rss_bytes"] > 50_000_000 and row["engine_processes"] == 1
    assert row["mem_available_bytes"] > 0 and "lo" in row["net"]
    times = [r["t_mono"] for r in rows]
    assert times == sorted(times) and abs((times[-1] - times[0]) / (len(times) - 1) - 0.1) < 0.03
