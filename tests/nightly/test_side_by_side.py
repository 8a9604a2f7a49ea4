"""The shipped campaigns/side-by-side.yaml's two engines in one run, through the real flow:
vLLM and llama.cpp each built (or found) by key, the tiny model generated in each one's format from
one seed, each engine's modes gated against its own single-process reference, the servers recorded
with their engine, and the report's "Engines side by side" section.

Lighter than the shipped campaign: vLLM's mode is TP=1 (its own reference: one vLLM start instead
of two), one request rate.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servebench import warehouse
from tests.support.campaign_process import run_shipped_campaign

CAMPAIGN = Path(__file__).parents[2] / "campaigns" / "side-by-side.yaml"
pytestmark = [pytest.mark.vllm, pytest.mark.llamacpp, pytest.mark.nightly(reason=(
    "vLLM and llama.cpp in one campaign; the test command keeps each engine built, served and gated through the "
    "flow (vLLM: test_e2e_campaign, test_e2e_testbed; llama.cpp: "
    "test_llamacpp_testbed) and the report's engines section (test_report_charts)"))]


def lighter(data: dict) -> None:
    data["modes"] = [{"name": "vllm-tp1", "executor": "mp", "knobs": {"enforce_eager": True}},
                     *[m for m in data["modes"] if m.get("engine")]]
    data["load"].update(rates=[4], requests=12, warmup=0)
    data["validity"] = {"on_invalid": "warn"}  # timing verdicts depend on the machine; this is about the plumbing


def test_vllm_and_llama_cpp_side_by_side_in_one_campaign(isolated, tmp_path):
    outcome = run_shipped_campaign(CAMPAIGN, tmp_path, isolated, lighter)
    assert outcome["status"] == "completed", outcome

    con = warehouse.connect(isolated, read_only=True)
    servers = {mode: (engine, gate) for mode, engine, gate in con.execute(
        "select mode, engine, correctness from servers").fetchall()}
    builds = {engine for (engine,) in con.execute("select engine from builds").fetchall()}
    cells = con.execute("select mode, status, client_output_tokens, server_output_tokens from cells").fetchall()
    con.close()
    assert servers == {"vllm-tp1": ("vllm", "reference"), "reference-llamacpp": ("llamacpp", "reference"),
                       "llamacpp-rpc2": ("llamacpp", "passed")}, servers
    assert builds == {"vllm", "llamacpp"}
    assert sorted(c[0] for c in cells) == ["llamacpp-rpc2", "vllm-tp1"]
    assert all(c[1] == "completed" and c[2] == c[3] == 12 * 32 for c in cells), cells
    report = Path(outcome["report"]).read_text()
    assert "Engines side by side" in report and "llamacpp-rpc2" in report
