"""A second engine and a second provider are a folder each plus one registry line.

The test-only `echo` engine (tests/support/echo_engine: a standard-library HTTP server in a
bare venv) and `plain` provider (tests/support/plain_provider: loopback addresses
127.0.2.N, plain child processes) are registered for this test only and run a campaign
through the real flow: Prefect, the build cache, the correctness gate, the load generator,
telemetry with the engine's metric map, DuckDB. Nothing else in servebench knows them.
The load generator runs on the campaign's client node (`load.client.node: c`) through the
provider, from its own tree, as it does on another host (tests/e2e/test_e2e_testbed.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

import servebench.engines
import servebench.providers
from servebench import warehouse
from tests.support.echo_engine import EchoEngine
from tests.support.plain_provider import PlainProvider

CAMPAIGN = """
name: second-engine
provider: {kind: plain, nodes: [{name: a, cpus: "0"}, {name: b, cpus: "0"}, {name: c, cpus: "1"}]}
engine: {kind: echo, token_delay_ms: 1}
model: {path: model}
modes:
  - {name: single}
  - {name: split, pp: 2, executor: split}
load: {clients: [1, 2], rates: [4], requests: 8, input_len: 8, output_len: 6, client: {node: c}}
validity: {on_invalid: warn}   # timing verdicts depend on the machine; this test is about the plumbing
"""


@pytest.fixture
def echo_and_plain(isolated, monkeypatch, tmp_path):
    """The two registry lines, for this test only; a campaign and a model directory using them."""
    monkeypatch.setitem(servebench.engines._ENGINES, EchoEngine.kind, EchoEngine)
    monkeypatch.setitem(servebench.providers._PROVIDERS, PlainProvider.kind, PlainProvider)
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path / "cache"))
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps(
        {"vocab_size": 500, "num_attention_heads": 4, "num_hidden_layers": 2}))
    (tmp_path / "campaign.yaml").write_text(CAMPAIGN)
    PlainProvider.journal.clear()
    return tmp_path


def test_echo_engine_and_plain_provider_run_a_campaign_through_the_real_flow(echo_and_plain):
    from servebench.flows.campaign import campaign_run
    from tests.support.prefect_session import session_api_url

    db = echo_and_plain / "w.duckdb"
    session_api_url()  # the flow reports to the session's Prefect server
    outcome = campaign_run(campaign_file=str(echo_and_plain / "campaign.yaml"), warehouse_path=str(db))
    assert outcome["status"] == "completed", outcome

    con = warehouse.connect(db, read_only=True)
    cells = con.execute("select cell_key, status, correctness, client_output_tokens, server_output_tokens, "
                        "executor, client_cpus, client_node from cells order by cell_key").fetchall()
    assert [c[0] for c in cells] == ["single.c1.r0", "single.c2.r0", "single.rate4.r0",
                                     "split.c1.r0", "split.c2.r0", "split.rate4.r0"]
    for key, status, correctness, client_tokens, server_tokens, executor, client_cpus, client_node in cells:
        assert status == "completed", key
        assert correctness == ("reference" if key.startswith("single") else "passed"), key
        # the engine's request extras reached the server (usage in every chunk), and its counter was read
        assert client_tokens == server_tokens == 8 * 6, key
        assert executor == ("local" if key.startswith("single") else "split") and client_cpus == "1"
        assert client_node == "c", key  # the client node's CPUs, all of them ('auto')
    assert con.execute("select count(*) from requests").fetchone()[0] == 6 * 8
    build = con.execute("select engine, build_key from builds").fetchone()
    assert build[0] == "echo" and build[1].startswith("echo-")
    servers = dict(con.execute("select mode, kv_capacity_tokens from servers").fetchall())
    assert servers == {"single": 4096, "split": 4096}
    nodes = con.execute("select node, address, role from nodes order by node").fetchall()
    assert nodes == [("a", "127.0.2.1", "server"), ("b", "127.0.2.2", "server"), ("c", "127.0.2.3", "client")]
    placed = json.loads(con.execute("select placements from nodes where node = 'c'").fetchone()[0])
    assert {p["what"] for p in placed} == {"tools", "load-generator"}   # the client runs no engine
    # telemetry: every node sampled (the client too), the engine's metric map filled the server samples
    assert {r[0] for r in con.execute("select distinct node from node_samples").fetchall()} == {"a", "b", "c"}
    assert con.execute("select count(*) from server_samples where generation_tokens_total is not null"
                       ).fetchone()[0] > 0
    con.close()

    # the split mode's worker started on node b first, and the API server checked it before serving
    run_dir = Path(outcome["run_dir"])
    assert "worker listening on 127.0.2.2" in (run_dir / "servers" / "split.worker.b.log").read_text()
    # no server process on the client node: the split mode's worker went to b, not c
    assert not list((run_dir / "servers").glob("*.c.log"))
    assert (run_dir / "cells" / "single.c1.r0.requests.csv").exists()
    assert "worker at 127.0.2.2" in (run_dir / "servers" / "split.log").read_text()

    # one provider held the nodes for the run: allocated first, released last, every process stopped
    journal = PlainProvider.journal
    assert journal[0][0] == "allocate" and journal[-1] == ("release", "0 still running")
    assert [event for event, _ in journal].count("allocate") == 1
    started = [int(detail.split(":")[1]) for event, detail in journal if event == "start"]
    assert started and not [pid for pid in started if psutil.pid_exists(pid)
                            and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
