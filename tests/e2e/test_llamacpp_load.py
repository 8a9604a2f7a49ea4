"""`servebench load --engine llamacpp --workload ...` against a real llama.cpp server (the load
generator works against any server): the warm build's `llama-server` on CPU 0 serving the tiny GGUF
(two slots), the generator on CPU 1. Every request is valid and served at exactly its asked token counts, and the
cell's prefix-cache hit rate comes from the responses' timings (cached / (cached + processed)): well
above 0 for shared prefixes and for a conversation's later turns, about 0 for prompts of their own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.served import first_mode_served

CAMPAIGN = Path(__file__).parents[1] / "campaigns" / "good" / "e2e-llamacpp.yaml"
pytestmark = pytest.mark.llamacpp


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with first_mode_served(CAMPAIGN, tmp_path_factory.mktemp("logs")) as (served, _, _):
        yield served


def load(server, tmp_path: Path, name: str, workload: str, *extra: str) -> dict:
    out = tmp_path / f"{name}.json"
    done = subprocess.run([sys.executable, "-m", "servebench", "load", "--engine", "llamacpp", "--base-url", server.url,
                           "--model", "tiny", "--clients", "2", "--vocab-size", "1024", "--max-context", "2048",
                           "--cpus", "1", "--workload", workload, "--output-json", str(out), "--quiet", *extra],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    summary = result["summary"]
    assert summary["valid"], summary["invalid_reasons"]
    assert summary["failed"] == 0 and summary["server_output_tokens"] == summary["client_output_tokens"]
    for r in result["requests"]:
        assert (r["input_tokens"], r["output_tokens"]) == (r["expected_input_tokens"], r["requested_output_tokens"])
        assert r["cached_input_tokens"] + r["processed_input_tokens"] == r["input_tokens"], r
    print(name, summary["prefix_cache_hit_rate"], summary["prompt_cache_tokens"])
    return result


def test_workloads_run_exactly_and_show_the_prefix_cache_effect(server, tmp_path):
    prefix = load(server, tmp_path, "prefix",
                  "{kind: shared-prefix, groups: 2, prefix_len: 256, suffix_len: 16, output: 8}", "--requests", "16")
    assert len(prefix["requests"]) == 16 and {r["input_tokens"] for r in prefix["requests"]} == {272}
    # each group's first request computes its prefix, the others find it (0.82 when all 14 do: 14 x 256 of
    # 16 x 272); a request sent while its group's slot still answers may not
    cached = [r["cached_input_tokens"] for r in prefix["requests"]]
    assert prefix["summary"]["prefix_cache_hit_rate"] > 0.6 and cached.count(256) >= 12, cached

    sessions = load(server, tmp_path, "sessions",
                    "{kind: sessions, sessions: 2, turns: 3, first_input: 64, turn_input: 16, output: 8}")
    turns = {(r["session"], r["turn"]): r for r in sessions["requests"]}
    assert [turns[0, t]["input_tokens"] for t in range(3)] == [64, 88, 112]
    # a later turn reuses the prompt before it (the answer enters as filler, not what the slot generated)
    assert [turns[s, t]["cached_input_tokens"] for s in range(2) for t in (1, 2)] == [64, 88] * 2
    assert sessions["summary"]["prefix_cache_hit_rate"] > 0.5

    unique = load(server, tmp_path, "unique", "{kind: synthetic, input: 272, output: 8}", "--requests", "8")
    assert unique["summary"]["prefix_cache_hit_rate"] < 0.05
