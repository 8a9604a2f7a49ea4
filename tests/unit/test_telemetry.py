"""The node sampler run for real against a live process, and the scraper's parsing."""

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from servebench.engines.vllm import VllmEngine
from servebench.processes import ManagedProcess
from servebench.telemetry.scraper import parse, parse_instances, sample
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


def test_scraper_sums_a_servers_engines_but_averages_their_kv_usage():
    values = parse(VLLM_METRICS, VllmEngine.api.metrics)
    # two engines at 25% and 50% of their own pools: the server at 37.5%, not 75%
    assert values == {"kv_usage": 0.375, "running": 3.0, "preemptions_total": 7.0, "generation_tokens_total": 768.0}
    assert parse_instances(VLLM_METRICS, VllmEngine.api.metrics) == {
        "dp0": {"kv_usage": 0.25, "running": 3.0, "preemptions_total": 7.0, "generation_tokens_total": 768.0},
        "dp1": {"kv_usage": 0.5}}


# /metrics of a real vLLM 0.32.0 server with --data-parallel-size 2 (the tiny Llama, float32, both engines on
# CPU 0; docs/parallel-modes.md, "Per DP engine and replica"): `after` once 11 requests of 64 tokens had
# finished (8 at once, then 3 one by one); `during` later, while 7 of 12 requests of 1,900 tokens ran
DP2_DURING = Path(__file__).parents[1] / "data" / "vllm_dp2_metrics_during.txt"
DP2_AFTER = Path(__file__).parents[1] / "data" / "vllm_dp2_metrics_after.txt"


def test_a_real_dp2_servers_metrics_come_apart_by_engine():
    wanted = VllmEngine.api.metrics
    after = parse_instances(DP2_AFTER.read_text(), wanted)
    assert list(after) == ["dp0", "dp1"], after
    # 11 requests of 64 tokens, each engine a share of them
    assert all(engine["requests_total"] > 0 for engine in after.values()), after
    assert sum(engine["requests_total"] for engine in after.values()) == 11
    assert sum(engine["generation_tokens_total"] for engine in after.values()) == 11 * 64
    during = parse_instances(DP2_DURING.read_text(), wanted)
    server = parse(DP2_DURING.read_text(), wanted)
    assert server["kv_usage"] == pytest.approx(sum(e["kv_usage"] for e in during.values()) / 2)
    assert 0 < server["kv_usage"] <= 1 and server["running"] + server["waiting"] == sum(
        e["running"] + e["waiting"] for e in during.values()) > 0


class MetricsPage(http.server.BaseHTTPRequestHandler):
    """A replica's /metrics: the text its server (`self.server.text`) was given."""

    def do_GET(self) -> None:
        body = self.server.text.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def replicas():
    """Two replicas' /metrics on local ports: r0 a DP=2 server (the real text), r1 one engine (its dp0)."""
    one_engine = "\n".join(line for line in DP2_AFTER.read_text().splitlines() if 'engine="1"' not in line) + "\n"
    servers = []
    for text in (DP2_AFTER.read_text(), one_engine):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), MetricsPage)
        server.text = text  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    yield {f"r{k}": f"http://127.0.0.1:{s.server_address[1]}" for k, s in enumerate(servers)}, servers
    for server in servers:
        server.shutdown()
        server.server_close()


def test_replicas_are_scraped_one_by_one_into_the_servers_aggregate(replicas, tmp_path):
    """The argv servebench starts the scraper with, for a server with instance URLs, run for real."""
    from servebench.engines import get_engine
    from servebench.serving.telemetry import scraper_argv

    urls, servers = replicas
    deployment = SimpleNamespace(engine=get_engine("vllm"), campaign=SimpleNamespace(
        telemetry=SimpleNamespace(scrape_hz=20)))
    server = SimpleNamespace(url=urls["r0"], mode="r2", instance_urls=urls)  # the balancer's URL: unused
    out = tmp_path / "s.jsonl"
    argv = scraper_argv(deployment, server, out)
    assert argv[argv.index("--instance") + 1] == f"r0={urls['r0']}"
    scraper = ManagedProcess.start(argv, log_path=tmp_path / "s.log")
    try:
        wait_until(lambda: out.exists() and out.read_text().count("\n") >= 3, "three samples", timeout_s=30)
    finally:
        scraper.stop(grace_s=5)
    row = json.loads(out.read_text().splitlines()[-1])
    instances = row["instances"]
    assert list(instances) == ["r0.dp0", "r0.dp1", "r1"], instances
    assert instances["r1"] == instances["r0.dp0"]
    assert row["requests_total"] == 11 + instances["r1"]["requests_total"]
    assert row["kv_usage"] == pytest.approx(sum(i["kv_usage"] for i in instances.values()) / 3)


def test_a_row_of_replicas_is_written_only_when_every_replica_answered(replicas):
    urls, servers = replicas
    wanted = VllmEngine.api.metrics
    assert set(sample(urls["r0"], wanted, instance_urls=urls)["instances"]) == {"r0.dp0", "r0.dp1", "r1"}
    servers[1].shutdown()
    servers[1].server_close()
    assert sample(urls["r0"], wanted, instance_urls=urls) is None
    one = sample(urls["r0"], wanted)    # one server: its DP engines its instances
    assert set(one["instances"]) == {"dp0", "dp1"} and one["requests_total"] == 11


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
