"""llama.cpp over RPC across two testbed hosts (own network, /dev/shm, /tmp and /root each;
real sshd), through the real flow: the llama.cpp build and the tiny GGUF copied to each host by
digest, an `ggml-rpc-server` on h1 and on h2, `llama-server --rpc` on h1 reaching h2's worker over
the testbed's bridge; a `replicas: 2` mode with a llama-server on each of them behind nginx, which
runs with the load generator on h3 (CPU 1; the servers have CPU 0).

While it runs, another user (the machine's `nobody`, holding no token) probes every server from
another host (h3 those of h1 and h2, h1 the balancer; tests/support/second_user.py): each
llama-server and the balancer answer only their health; the RPC workers, which have no
authentication, listen on their node's address only.

Each cell sends for three seconds; the campaign kills h2's RPC worker one second into rpc2.c2.r0
(`faults:`): that cell fails with the cause (the worker's exit and the fault), the mode's next cell
is served by a restarted server with new workers, and afterwards nothing of the run is left on any host.
"""

from __future__ import annotations

import json

import pytest

from servebench import warehouse
from tests.support.second_user import SecondUser
from tests.support.testbed import marked_processes_on, on_host, own_testbed, ssh_provider_yaml

pytestmark = [pytest.mark.llamacpp, pytest.mark.testbed, pytest.mark.root]

CAMPAIGN = """
name: llamacpp-rpc-testbed
{provider}engine: {{kind: llamacpp}}
model: {{generate: tiny-llama, layers: 4, hidden: 128, heads: 4, kv_heads: 2, intermediate: 256,
         vocab_size: 1024}}
modes:
  - {{name: rpc2, pp: 2, executor: rpc, knobs: {{parallel: 4, ctx_size: 2048}}}}
  - {{name: two, replicas: 2, knobs: {{parallel: 4, ctx_size: 2048}}}}
load: {{clients: [1, 2, 4], duration: 3, input_len: 32, output_len: 64, client: {{node: h3}}}}
faults:
  - {{cell: rpc2.c2.r0, at_s: 1.0, action: kill, node: h2, match: ggml-rpc-server}}
validity: {{on_invalid: warn}}   # timing verdicts depend on the machine; this test is about hosts and the fault
"""


def test_rpc_across_two_hosts_and_a_worker_killed_mid_cell(isolated, tmp_path, monkeypatch):
    from servebench.flows.campaign import campaign_run
    from tests.support.prefect_session import session_api_url

    monkeypatch.setenv("SERVEBENCH_RUNS", str(tmp_path / "runs"))
    with own_testbed("lrp", 3) as layout:
        campaign = tmp_path / "campaign.yaml"
        campaign.write_text(CAMPAIGN.format(provider=ssh_provider_yaml(layout, cpus=("0", "0", "1"))))
        session_api_url()  # the flow reports to the session's Prefect server
        second = SecondUser(probers=("h3", "h1"), hosts=("h1", "h2", "h3"))
        second.start(layout)
        try:
            outcome = campaign_run(campaign_file=str(campaign), warehouse_path=str(isolated))
        finally:
            second.stop()
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
    answered, failed = con.execute(
        "select count(*) filter (error_kind is null), count(*) filter (error_kind is not null) "
        "from requests join cells using (cell_id) where cell_key = 'rpc2.c2.r0'").fetchone()
    con.close()

    assert cells["rpc2.c1.r0"][0] == cells["rpc2.c4.r0"][0] == "completed", cells
    assert {cells[f"two.c{n}.r0"][0] for n in (1, 2, 4)} == {"completed"}, cells
    status, error, _ = cells["rpc2.c2.r0"]
    assert status == "failed" and "rpc1.h2" in error and "kill" in error, error
    assert answered > 0 and failed > 0, (answered, failed)  # what the cell measured before and after the kill landed
    assert [f[:2] for f in faults] == [("rpc2.c2.r0", "h2")] and faults[0][2], faults
    (rpc,) = [s for s in servers if s[0] == "rpc2"]   # one row a mode; c4 was served by the restarted one
    assert rpc[1] == "passed", servers   # the answers over RPC equal the single-process reference's
    endpoints = rpc[2][rpc[2].index("--rpc") + 1].split(",")
    assert [e.rsplit(":", 1)[0] for e in endpoints] == [h.address for h in layout.hosts[:2]], endpoints
    # every host's node sampler ran (with the host's python3, standard library only) inside the cell, the client's too
    assert sorted(n for (n,) in sampled) == [h.name for h in layout.hosts], sampled
    placed = {node: {p["what"] for p in json.loads(trees)} for node, trees in placements}
    assert placed["h1"] >= {"engine", "model"} and placed["h2"] >= {"engine", "model"}, placed  # the servers'
    assert placed["h3"] == {"tools", "load-generator"}, placed  # the client's: no engine, no model
    check_refused_to_a_second_user(second, layout)


def check_refused_to_a_second_user(second: SecondUser, layout) -> None:
    """From another host, as `nobody`, while the campaign ran: every llama-server (the RPC mode's head, restarted
    after the kill, and both replicas) and the balancer answered only their health; the RPC workers, which have no
    authentication, listened on their node's address only (docs/security.md: a private network's job)."""
    assert second.errors == [], second.errors
    kinds = [(service.what, service.host) for service in second.seen]
    assert {("llama-server", "h1"), ("llama-server", "h2"), ("balancer", "h3"), ("rpc", "h1"), ("rpc", "h2")} \
        <= set(kinds), second.seen
    for what in ("llama-server", "balancer"):
        codes = {route: code for route, code in second.probed.items() if route.startswith(what + " ")}
        assert codes and {route: code for route, code in codes.items() if code != 401} == \
            {f"{what} GET /health": 200}, codes
    addresses = {host.name: host.address for host in layout.hosts}
    assert all(service.address == addresses[service.host] for service in second.seen if service.what == "rpc"), \
        second.seen
