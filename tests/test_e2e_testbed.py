"""End to end across real hosts: the shipped campaigns/ssh-testbed.yaml on a testbed of 3 hosts
(own network, /dev/shm, /tmp and /root each; real sshd), through the Prefect flow.

The engine build and the model are copied to each host by digest (the hosts cannot see this
machine's /root) and verified there; a Ray head on h1 and a worker on h2 serve TP=2, and vLLM's
own launcher serves TP=2 across the same hosts (the campaign's PP=2 over Ray is left to the
campaign itself, to keep this test's server starts to three); the servers listen on the hosts'
addresses and the load generator, on the third host (h3, serving nothing, from its own tree),
reaches them over the testbed's bridge. Asserted: the gate
against TP=1, every cell landed with exact token counts, the TP group's all-reduce left
/dev/shm for gloo across hosts, samples of every host landed in the orchestrator's time base
(inside the cells), clock offsets and placements recorded, and afterwards nothing of the run
on any host: no process carrying the run's mark, no listening port but sshd's and Slurm's, nothing in
/dev/shm or /tmp.
"""

import time
from pathlib import Path

import pytest

from servebench import warehouse
from tests.support.ray_logs import assert_tp_across_nodes
from tests.support.testbed import campaign_on, marked_processes_on, on_host, own_testbed

CAMPAIGN = Path(__file__).parent.parent / "campaigns" / "ssh-testbed.yaml"
pytestmark = [pytest.mark.e2e, pytest.mark.vllm, pytest.mark.testbed, pytest.mark.root]
# no compiled graphs: each start here compiled for 45-90 s (two ranks on two shared cores); the reference
# TP=1 server is eager too (the knob changes arithmetic, every mode sets it: flows/modes.py)
EAGER = {"enforce_eager": True}


def test_tp_and_pp_across_two_ssh_hosts(tmp_path, monkeypatch):
    from tests.support.prefect_session import session_api_url

    from servebench.flows.campaign import campaign_run

    monkeypatch.setenv("SERVEBENCH_RUNS", str(tmp_path / "runs"))
    with own_testbed("e2e", 3) as layout:
        # TP=2 over Ray and with vLLM's own launcher (PP=2 over Ray is the shipped campaign's third mode and
        # tests/test_e2e_ray.py's on one host): every server start costs minutes on two shared cores
        campaign = campaign_on(layout, CAMPAIGN, tmp_path / "ssh-testbed.yaml",
                               modes=[{"name": "tp2-ray", "tp": 2, "executor": "ray", "knobs": EAGER},
                                      {"name": "tp2-mp-multinode", "tp": 2, "executor": "mp-multinode",
                                       "knobs": EAGER}],
                               load={"clients": [2], "input_len": 32, "output_len": 16, "requests": 6,
                                     "client": {"node": "h3", "nice": -10}})
        db = tmp_path / "w.duckdb"
        started = time.monotonic()
        session_api_url()  # the flow reports to the session's Prefect server
        outcome = campaign_run(campaign_file=str(campaign), warehouse_path=str(db))
        print(f"campaign across hosts: {time.monotonic() - started:.0f} s, {outcome['status']}")

        # nothing of the run left on any host
        for host in layout.hosts:
            marked = marked_processes_on(layout, host)
            assert marked == "", f"{host.name}: processes of the run left: {marked}"
            assert on_host(layout, host, "ls -A /dev/shm").strip() == "", host.name
            # the run's directory (the engine's TMPDIR: vLLM's IPC sockets, torch's caches) and Ray's temp root went
            assert on_host(layout, host, "ls -A /tmp").strip() == "", host.name
            listening = on_host(layout, host, "cat /proc/net/tcp | awk 'NR > 1 && $4 == \"0A\" {print $2}'")
            daemons = {22, layout.slurmctld_port, layout.slurmd_port}  # sshd and the testbed's Slurm
            assert {int(line.rsplit(":", 1)[1], 16) for line in listening.split()} <= daemons, (host.name, listening)

    assert outcome["status"] == "completed", outcome
    con = warehouse.connect(db, read_only=True)
    servers = dict(con.execute("select mode, correctness from servers").fetchall())
    assert servers.pop("reference-tp1") == "reference"
    commands = dict(con.execute("select mode, command from servers").fetchall())
    assert all("--enforce-eager" in command for command in commands.values()), commands  # the reference too
    assert set(servers) == {"tp2-ray", "tp2-mp-multinode"}
    assert set(servers.values()) <= {"passed", "close"}, servers
    cells = con.execute("select cell_key, status, client_output_tokens, server_output_tokens, client_node, "
                        "client_cpus from cells").fetchall()
    assert len(cells) == 2 and all(c[1] == "completed" and c[2] == c[3] == 6 * 16 for c in cells), cells
    assert {(c[4], c[5]) for c in cells} == {("h3", "1")}, cells  # the generator ran on h3, on its CPU

    nodes = con.execute("select node, address, clock_offset_s, placements, role from nodes order by node").fetchall()
    assert [(n[0], n[1], n[4]) for n in nodes] == [(h.name, h.address, "client" if h.name == "h3" else "server")
                                                   for h in layout.hosts]
    for node, _, offset, placements, role in nodes:
        assert offset is not None and abs(offset) < 1.0, (node, offset)  # one machine: the clocks agree
        hows = {p["what"]: p["how"] for p in __import__("json").loads(placements)}
        trees = {"tools", "load-generator"} if role == "client" else {"engine", "model", "tools"}
        assert set(hows) == trees and set(hows.values()) <= {"copied", "present"}, hows

    # samples from every host (the client's too), in the orchestrator's time base, where the generator's
    # start was moved from h3's clocks: some fall inside every cell
    inside = con.execute("select cell_key, node, samples from cell_node_cpu").fetchall()
    assert {(key, node) for key, node, _ in inside} == {(c[0], h.name) for c in cells for h in layout.hosts}, inside
    logs = dict(con.execute("select mode, log_path from servers").fetchall())
    con.close()
    assert_tp_across_nodes(Path(logs["tp2-ray"]).read_text(), "h2", layout.hosts[0].address)
