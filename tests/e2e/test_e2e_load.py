"""`servebench load` against a real vLLM server: token ids, exact-length text, chat, and
where the generator runs.

One tp1 server on CPU 0 (from the campaign machinery: engine venv, tiny model, local
provider) serves every load run; each must agree with the server's usage and its own
counter, and a generator sharing the server's CPU must find its own measurement invalid.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from servebench.builds.venv import ensure_build
from servebench.campaign.loading import load_campaign
from servebench.engines import LaunchRequest, get_engine
from servebench.models.artifact import ensure_model
from servebench.paths import cache_dir
from servebench.processes import shm_entries
from servebench.providers import get_provider
from servebench.serving.server import start_server, stop_server, wait_ready
from tests.support.processes import engine_processes

CAMPAIGN = Path(__file__).parents[1] / "campaigns" / "good" / "e2e.yaml"
pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    campaign = load_campaign(CAMPAIGN)
    engine = get_engine(campaign.engine.kind)
    build = ensure_build(engine.build_recipe(campaign.engine), cache_dir(), log=lambda _: None)
    model_dir = ensure_model(campaign.model, build.python, cache_dir())
    provider = get_provider(campaign)
    nodes = provider.allocate()[:1]
    launch = engine.launch(LaunchRequest(
        python=build.python, build_dir=build.venv_path, spec=campaign.engine, mode=campaign.modes[0],
        model_dir=str(model_dir), served_name="tiny", dtype="auto", nodes=nodes, ports=provider))
    shm_before = shm_entries()
    server = start_server(provider, nodes, launch, "tp1", tmp_path_factory.mktemp("logs"), 600)
    try:
        wait_ready(server, 600)
        yield server, model_dir, build
    finally:
        stop_server(provider, server)
        provider.release()
    assert engine_processes() == []
    assert shm_entries() - shm_before == set()


def load(server, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "load.json"
    done = subprocess.run([sys.executable, "-m", "servebench", "load", "--engine", "vllm", "--base-url", server.url,
                           "--model", "tiny", "--output-len", "8", "--requests", "6", "--clients", "3",
                           "--output-json", str(out),
                           "--export", f"vllm-bench={tmp_path / 'vllm.json'}", *extra],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "load summary" in done.stdout and "valid" in done.stdout
    return json.loads(out.read_text())


def check(result: dict, input_len: int | None) -> None:
    summary = result["summary"]
    assert summary["valid"], summary["invalid_reasons"]
    assert summary["completed"] == 6 and summary["failed"] == 0
    assert summary["server_output_tokens"] == summary["client_output_tokens"] == 6 * 8
    for r in result["requests"]:
        assert r["output_tokens"] == 8 and sum(r["chunk_tokens"]) == 8 and r["token_source"] == "usage"
        if input_len is not None:
            assert r["input_tokens"] == input_len
        assert r["sent_s"] < r["first_token_s"] <= r["last_token_s"]


def test_completions_with_token_ids(vllm_server, tmp_path):
    server, model_dir, _ = vllm_server
    check(load(server, tmp_path, "--input-len", "24", "--vocab-size", "1000"), input_len=24)
    vllm_format = json.loads((tmp_path / "vllm.json").read_text())
    assert vllm_format["completed"] == 6 and vllm_format["output_lens"] == [8] * 6


def test_completions_with_exact_length_text(vllm_server, tmp_path):
    server, model_dir, _ = vllm_server
    check(load(server, tmp_path, "--input-len", "40", "--tokenizer", str(model_dir)), input_len=40)


def test_chat_endpoint(vllm_server, tmp_path):
    server, model_dir, _ = vllm_server
    result = load(server, tmp_path, "--endpoint", "chat", "--input-len", "16", "--tokenizer", str(model_dir))
    check(result, input_len=None)
    assert all(r["input_tokens"] > 16 for r in result["requests"])  # the chat template adds tokens


def test_workloads_send_exact_token_ids_and_shared_prefixes_hit_the_cache(vllm_server, tmp_path):
    """Workloads (docs/workloads.md): lengths from a distribution, shared prefixes (G=2, P=256, Q=16),
    a Mooncake trace replayed on its schedule; every prompt's tokens as the server counted them."""
    server, _, _ = vllm_server
    synthetic = load(server, tmp_path, "--vocab-size", "1000", "--workload",
                     "{kind: synthetic, input: {dist: uniform, min: 8, max: 64}, output: 8}")
    check(synthetic, input_len=None)
    sent = [(r["input_tokens"], r["expected_input_tokens"]) for r in synthetic["requests"]]
    assert all(served == asked for served, asked in sent) and len(set(sent)) > 1, sent
    prefix = load(server, tmp_path, "--vocab-size", "1000", "--clients", "1", "--workload",
                  "{kind: shared-prefix, groups: 2, prefix_len: 256, suffix_len: 16, output: 8}")
    check(prefix, input_len=272)
    assert [r["prefix_group"] for r in prefix["requests"]] == [0, 1, 0, 1, 0, 1]
    assert prefix["summary"]["prefix_cache_hit_rate"] > 0.5, prefix["summary"]["prefix_cache_hit_rate"]
    trace = tmp_path / "trace.jsonl"
    rows = [{"timestamp": 300 * i, "input_length": 100 + 150 * (i % 3), "output_length": 8, "hash_ids": [7, i % 2]}
            for i in range(6)]
    trace.write_text("".join(json.dumps(row) + "\n" for row in rows))
    replay = load(server, tmp_path, "--vocab-size", "1000", "--clients", "6", "--workload",
                  json.dumps({"kind": "trace", "format": "mooncake", "path": str(trace), "block_size": 128}))
    check(replay, input_len=None)
    assert [r["input_tokens"] for r in replay["requests"]] == [row["input_length"] for row in rows]
    assert [r["scheduled_s"] for r in replay["requests"]] == pytest.approx([0.3 * i for i in range(6)], abs=1e-6)


def open_loop(server, tmp_path: Path, name: str, *extra: str) -> dict:
    """One open-loop run of the placement test; the generator's verdict on itself is what counts."""
    out = tmp_path / f"{name}.json"
    done = subprocess.run([sys.executable, "-m", "servebench", "load", "--engine", "vllm", "--base-url", server.url,
                           "--model", "tiny", "--input-len", "32", "--output-len", "16", "--vocab-size", "1000",
                           "--seed", "3",
                           "--output-json", str(out), "--quiet", *extra],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())["summary"]


@pytest.mark.root  # the generator's nice -10
def test_generator_on_its_own_cpu_stays_valid_near_the_servers_capacity(vllm_server, tmp_path):
    """The server runs on CPU 0 (e2e.yaml), the generator on CPU 1 at raised priority.
    Near the server's capacity (measured here with 32 clients, so it holds on any CPU) an
    open-loop cell stays valid. (The check failing for a starved generator: tests/e2e/test_cell_retry.py.)"""
    server, _, _ = vllm_server
    capacity = open_loop(server, tmp_path, "capacity", "--clients", "32", "--requests", "96", "--cpus", "1")
    rate = 0.9 * capacity["request_throughput"]
    own = open_loop(server, tmp_path, "own-cpu", "--rate", f"{rate:.3f}", "--requests", "120", "--warmup", "4",
                    "--cpus", "1", "--nice", "-10")
    print(f"capacity {capacity['request_throughput']:.2f} req/s, cell at {rate:.2f} req/s: schedule lag p99 "
          f"{own['schedule_lag_ms']['p99']:.2f} ms, generator CPU {own['client']['core_fraction']:.1%}")
    assert own["client"]["cpus"] == "1" and own["client"]["nice"] == -10
    assert own["valid"], own["invalid_reasons"]
    assert own["client"]["core_fraction"] < 0.8
