"""Workloads: length distributions, datasets, shared prefixes and trace replay.

Here the nightly lane's (skipped by the test command, each with its reason); the test command's are in
tests/unit/test_workloads.py."""

from __future__ import annotations

import pytest


@pytest.mark.vllm
@pytest.mark.root  # the campaign's generator runs at nice -10
@pytest.mark.nightly(reason=(
    "one cell of each workload kind served by vLLM; the test command keeps each kind's requests (this file), "
    "exact token ids and shared prefixes on vLLM (test_e2e_load) and the kinds on llama.cpp (test_llamacpp_load)"))
def test_the_workloads_campaign_runs_one_valid_cell_of_each_kind_on_vllm(isolated):
    """campaigns/workloads.yaml through the flow (about 50 s warm): every cell valid, every prompt
    and answer served at exactly the asked token counts, turns landed = S x T, the shared
    prefixes hit vLLM's prefix cache."""
    from pathlib import Path

    from servebench import warehouse
    from servebench.flows.campaign import campaign_run
    from tests.support.prefect_session import session_api_url

    session_api_url()
    campaign_file = Path(__file__).parents[2] / "campaigns" / "workloads.yaml"
    outcome = campaign_run(campaign_file=str(campaign_file), warehouse_path=str(isolated))
    assert outcome["status"] == "completed", outcome
    con = warehouse.connect(isolated, read_only=True)
    cells = con.execute("select cell_key, status, valid, prefix_cache_hit_rate from cells order by cell_key").fetchall()
    requests = con.execute(
        "select workload_name, count(*), count(*) filter (where input_tokens = expected_input_tokens and "
        "output_tokens = requested_output_tokens), count(distinct (session, turn)) from requests "
        "join cells using (cell_id) group by all order by 1").fetchall()
    con.close()
    assert [(key, status, valid) for key, status, valid, _ in cells] == [
        (key, "completed", True) for key in ("tp1.dataset.c2.r0", "tp1.prefix.c2.r0", "tp1.sessions.c2.r0",
                                             "tp1.synthetic.c2.r0", "tp1.trace.rate9.95.r0")]
    assert dict((key, hit) for key, _, _, hit in cells)["tp1.prefix.c2.r0"] > 0.5
    assert requests == [("dataset", 24, 24, 1), ("prefix", 24, 24, 1), ("sessions", 16, 16, 16),
                        ("synthetic", 24, 24, 1), ("trace", 24, 24, 1)]
