"""llama.cpp over RPC across two testbed hosts (own network, /dev/shm, /tmp and /root each;
real sshd), through the real flow: the llama.cpp build and the tiny GGUF copied to each host by
digest, an `ggml-rpc-server` on h1 and on h2, `llama-server --rpc` on h1 reaching h2's worker over
the testbed's bridge, the load generator on this host.

The campaign kills h2's RPC worker one second into rpc2.c2.r0 (`faults:`): that cell fails with
the cause (the worker's exit and the fault), the mode's next cell is served by a restarted server
with new workers, and afterwards nothing of the run is left on either host.
"""

from __future__ import annotations

import pytest

from servebench import warehouse
from tests.support.testbed import marked_processes_on, on_host, own_testbed, ssh_provider_yaml

pytestmark = [pytest.mark.llamacpp, pytest.mark.testbed, pytest.mark.root]

CAMPAIGN = """
name: llamacpp-rpc-testbed
{provider}engine: {{kind: llamacpp}}
model: {{generate: tiny-llama, layers: 4, hidden: 128, heads: 4, kv_heads: 2, intermediate: 256,
         vocab_size: 1024}}
modes:
  - {{name: rpc2, pp: 2, executor: rpc, knobs: {{parallel: 4, ctx_size: 2048}}}}
load: {{clients: [1, 2, 4], requests: 40, input_len: 32, output_len: 64, client: {{cpus: "1"}}}}
faults:
  - {{cell: rpc2.c2.r0, at_s: 1.0, action: kill, node: h2, match: ggml-rpc-server}}
validity: {{on_invalid: warn}}   # timing verdicts depend on the machine; this test is about hosts and the fault
"""


def test_rpc_across_two_hosts_and_a_worker_killed_mid_cell(isolated, tmp_path, monkeypatch):
    from servebench.flows.campaign import campaign_run
    from tests.support.prefect_session import session_api_url

    monkeypatch.setenv("SERVEBENCH_RUNS", str(tmp_path / "runs"))
    with own_testbed("lrp", 2) as layout:
        campaign = tmp_path / "campaign.yaml"
        campaign.write_text(CAMPAIGN.format(provider=ssh_provider_yaml(layout)))
        session_api_url()  # the flow reports to the session's Prefect server
        outcome = campaign_run(campaign_file=str(campaign), warehouse_path=str(isolated))
        for host in layout.hosts:
            assert marked_processes_on(layout, host) == "", host.name
            assert on_host(layout, host, "ls -A /dev/shm /tmp").split() == ["/dev/shm:", "/tmp:"], host.name

    assert outcome["status"] == "partial", outcome
    con = warehouse.connect(isolated, read_only=True)
    cells = {key: (status, error, completed) for key, status, error, completed in con.execute(
        "select cell_key, status, error, completed from cells").fetchall()}
    servers = con.execute("select mode, correctness, command from servers order by started_at").fetchall()
    placements = con.execute("select node, placements from nodes").fetchall()
    sampled = con.execute("select distinct node from cell_node_cpu where cell_key = 'rpc2.c1.r0'").fetchall()
    faults = con.execute("select cell_key, node, hit from faults").fetchall()
    requests = con.execute("select count(*) from requests join cells using (cell_id) "
                           "where cell_key = 'rpc2.c2.r0'").fetchone()[0]
    con.close()

    assert cells["rpc2.c1.r0"][0] == cells["rpc2.c4.r0"][0] == "completed", cells
    status, error, _ = cells["rpc2.c2.r0"]
    assert status == "failed" and "rpc1.h2" in error and "kill" in error, error
    assert requests == 40  # what the cell measured before and after the kill landed with it
    assert [f[:2] for f in faults] == [("rpc2.c2.r0", "h2")] and faults[0][2], faults
    (rpc,) = [s for s in servers if s[0] == "rpc2"]   # one row a mode; c4 was served by the restarted one
    assert rpc[1] == "passed", servers   # the answers over RPC equal the single-process reference's
    endpoints = rpc[2][rpc[2].index("--rpc") + 1].split(",")
    assert [e.rsplit(":", 1)[0] for e in endpoints] == [h.address for h in layout.hosts], endpoints
    # both hosts' node samplers ran (with the host's python3, standard library only) inside the cell
    assert sorted(n for (n,) in sampled) == [h.name for h in layout.hosts], sampled
    for node, trees in placements:
        assert {p["what"] for p in __import__("json").loads(trees)} >= {"engine", "model"}, (node, trees)
