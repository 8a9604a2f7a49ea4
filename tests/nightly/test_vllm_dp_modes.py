"""Data parallel (`dp`) and expert parallel (`ep`) modes (docs/parallel-modes.md): the spec, the plan-time
refusals (each naming the mode, the field and the reason), vLLM's server commands and core lists, the landed
rows, the per-rank metrics; and one real run, DP=2 on one node served by vLLM and gated against TP=1 (marked
e2e/vllm like the other vLLM runs).

Here the nightly lane's (skipped by the test command, each with its reason); the test command's are in
tests/unit/test_vllm_dp_modes.py."""

from __future__ import annotations

import json
import time

import pytest

from tests.support.vllm_dp_modes import E2E_CAMPAIGN


@pytest.mark.vllm
@pytest.mark.root  # the generator's nice -10
@pytest.mark.nightly(reason=(
    "DP=2 with expert parallelism served on the tiny MoE; the test command keeps the DP and EP plans and "
    "commands (this file) and the expert-parallel kernels over two gloo ranks (test_vllm_moe_parallel)"))
def test_dp2_with_expert_parallelism_on_one_node_serves_every_cell_and_passes_the_gate(tmp_path, monkeypatch):
    """DP=2 with expert parallelism on an MoE model, on one local node (both engines on CPU 0), served by real
    vLLM through the Prefect flow beside TP=1 at the same load: the gate against TP=1 passed (float32: equal
    tokens), every cell valid with exact token counts, the rows name dp and ep, vLLM started one engine core
    per DP rank, and servebench's expert-map fill-in was loaded (vLLM 0.32's CPU MoE kernel crashes without
    it, and its CPU communicator has no all_gatherv for the token dispatch: engine_side/.../vllm_cpu_moe)."""
    from servebench import warehouse
    from servebench.flows.campaign import campaign_run
    from tests.support.prefect_session import session_api_url

    monkeypatch.setenv("SERVEBENCH_RUNS", str(tmp_path / "runs"))
    session_api_url()
    db = tmp_path / "w.duckdb"
    started = time.monotonic()
    outcome = campaign_run(campaign_file=str(E2E_CAMPAIGN), warehouse_path=str(db))
    print(f"e2e-dp wall time {time.monotonic() - started:.0f} s, run {outcome.get('run_id')}")
    assert outcome["status"] == "completed", outcome
    con = warehouse.connect(db, read_only=True)
    servers = {mode: rest for mode, *rest in con.execute(
        "select mode, correctness, dp, ep, command from servers").fetchall()}
    assert set(servers) == {"tp1", "dp2-ep"} and servers["tp1"][:3] == ["reference", 1, False], servers
    correctness, dp, ep, command = servers["dp2-ep"]
    assert (correctness, dp, ep) == ("passed", 2, True), servers["dp2-ep"]
    assert command[command.index("--data-parallel-size") + 1] == "2"
    cells = con.execute("select cell_key, status, valid, correctness, dp, client_output_tokens, server_output_tokens, "
                        "output_throughput from cells order by cell_key").fetchall()
    # per DP engine: the scraper keeps each engine's columns; the server's kv_usage is their
    # mean (a fraction of each engine's own pool), never their sum
    samples = con.execute("select mode, kv_usage, requests_total, instances from server_samples "
                          "order by mode, t_mono").fetchall()
    balance = con.execute("select cell_key, instance, requests, requests_share, waiting_max, samples "
                          "from cell_balance order by cell_key, instance").fetchall()
    ranks = con.execute("select mode, label, node, rank, dp_rank, tp_rank, ep_rank from server_ranks "
                        "order by mode, process").fetchall()
    con.close()
    # the rank map landed with each server (server_ranks): both DP engines' workers on the one node
    assert [r for r in ranks if r[0] == "dp2-ep"] == [("dp2-ep", "dp0.rank0", "node0", 0, 0, 0, 0),
                                                     ("dp2-ep", "dp1.rank0", "node0", 1, 1, 0, 1)], ranks
    assert [r for r in ranks if r[0] == "tp1"] == [("tp1", "rank0", "node0", 0, 0, 0, None)], ranks
    print("balance", balance)
    dp2 = [s for s in samples if s[0] == "dp2-ep"]
    assert dp2 and all(0 <= kv <= 1 for _, kv, _, _ in dp2 if kv is not None), dp2
    assert all(s[3] is None for s in samples if s[0] == "tp1"), "one engine: no instances"
    last = json.loads(dp2[-1][3])
    assert set(last) == {"dp0", "dp1"} and all(last[e]["requests_total"] > 0 for e in last), last
    assert dp2[-1][2] == last["dp0"]["requests_total"] + last["dp1"]["requests_total"], (dp2[-1], last)
    # the 4 gate prompts and 2 cells of 12 requests (the warm-up one among them), over the two engines: the
    # scraper's last sample, taken as it is stopped, has them all
    assert dp2[-1][2] == 4 + 2 * 12, dp2[-1]
    assert {(key, instance) for key, instance, *_ in balance} == {
        (key, engine) for key in ("dp2-ep.c4.r0", "dp2-ep.rate4.r0") for engine in ("dp0", "dp1")}, balance
    for key in ("dp2-ep.c4.r0", "dp2-ep.rate4.r0"):  # each engine served some of each cell's requests
        served = [row[2] for row in balance if row[0] == key]
        assert None not in served and all(n > 0 for n in served) and sum(served) >= 12, balance
    print("cells", cells)
    assert [c[:5] for c in cells] == [("dp2-ep.c4.r0", "completed", True, "passed", 2),
                                      ("dp2-ep.rate4.r0", "completed", True, "passed", 2),
                                      ("tp1.c4.r0", "completed", True, "reference", 1),
                                      ("tp1.rate4.r0", "completed", True, "reference", 1)], cells
    assert all(c[5] == c[6] == 12 * 16 for c in cells), cells
    (log,) = (tmp_path / "runs").glob("*/servers/dp2-ep.log")
    text = log.read_text()
    assert "EngineCore_DP0" in text and "EngineCore_DP1" in text, text[-3000:]
    assert "servebench: CPUUnquantizedExperts.apply takes the expert map" in text, text[-3000:]
