"""`replicas: N`: N independent servers of a mode behind one nginx endpoint
(servebench/serving/balancer.py, docs/parallel-modes.md). Refused at plan time when the nodes do not
split or the executor cannot keep a replica on its own nodes; the plan prints every replica and the
balancer; real nginx in front of real echo servers, one failing replica stopping the others; and a
campaign through the real flow with two replicas of the test-only echo engine, behind each policy."""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request
from pathlib import Path

import pytest

from servebench.campaign.loading import SpecError, parse_campaign
from servebench.config.campaign import ModeSpec, split_for_replicas
from servebench.engines.base import ProcessLaunch, ServerLaunch
from servebench.serving.balancer import nginx_config, requests_per_replica, start_balancer, stop_balancer
from servebench.serving.mode_server import instance_urls, replica_launch
from servebench.serving.server import ServerFailed, process_chains, start_server, stop_server, wait_ready
from tests.support.replicas import NEEDS_NGINX
from tests.support.waiting import wait_until

ECHO_SERVER = Path(__file__).parents[1] / "support" / "echo_engine" / "server.py"

CAMPAIGN = """
name: t
provider: {kind: local, nodes: [{name: n0, cpus: "0"}, {name: n1, cpus: "1"}, {name: n2, cpus: "1"}]}
model: {generate: tiny-llama}
modes: [MODE]
load: {clients: [1], requests: 4, client: {cpus: shared}}
"""


def problems(mode: str) -> list[tuple[str, str]]:
    with pytest.raises(SpecError) as caught:
        parse_campaign(CAMPAIGN.replace("MODE", mode), host_cpus={0, 1})
    return [(p.field, p.message) for p in caught.value.problems]


# --- the spec and the plan


def test_replicas_default_to_one_server_and_keep_the_spec_hash():
    mode = ModeSpec(name="m", executor="mp")
    assert (mode.replicas, mode.balancer, mode.balancer_policy) == (1, None, None)
    assert ModeSpec(name="m", executor="mp", replicas=2).balancer_policy == "least-connections"
    text = CAMPAIGN.replace("MODE", "{name: tp1}")
    spelled = CAMPAIGN.replace("MODE", "{name: tp1, replicas: 1}")
    assert parse_campaign(text, host_cpus={0, 1}).spec_hash() == parse_campaign(spelled, host_cpus={0, 1}).spec_hash()
    assert parse_campaign(CAMPAIGN.replace("MODE", "{name: r2, replicas: 2, nodes: [n0, n1]}"),
                          host_cpus={0, 1}).spec_hash() != parse_campaign(text, host_cpus={0, 1}).spec_hash()


def test_nodes_split_in_order_the_same_number_to_each_replica():
    assert split_for_replicas(["h1", "h2"], 2) == [["h1"], ["h2"]]
    assert split_for_replicas(["h1", "h2", "h3", "h4"], 2) == [["h1", "h2"], ["h3", "h4"]]
    assert split_for_replicas(["h1"], 1) == [["h1"]]
    with pytest.raises(ValueError, match="3 nodes do not split into 2"):
        split_for_replicas(["h1", "h2", "h3"], 2)


@pytest.mark.parametrize("mode, field, message", [
    ("{name: r4, replicas: 4}", "modes[0].replicas",
     "mode r4: replicas: 4 runs each replica on nodes of its own, so it needs at least 4 server nodes; it has "
     "3 nodes (n0, n1, n2)"),
    ("{name: r2, replicas: 2}", "modes[0].replicas",
     "mode r2: replicas: 2 splits the mode's 3 nodes (n0, n1, n2) in order, the same number to each replica, "
     "and 2 does not divide 3"),
    ("{name: r2, replicas: 2, nodes: [n0, n1], executor: ray}", "modes[0].replicas",
     "mode r2: replica r0 (on n0): replicas: executor 'ray' places a server's workers anywhere"),
    ("{name: r2tp2, replicas: 2, tp: 2, nodes: [n0, n1]}", "modes[0].tp",
     "mode r2tp2: replica r0 (on n0): tp x pp = 2 workers but the nodes give 1 CPUs"),
    ("{name: one, balancer: round-robin}", "modes[0]", "balancer: round-robin needs replicas > 1"),
    ("{name: none, replicas: 0}", "modes[0].replicas", "greater than or equal to 1"),
])
def test_a_replicas_mode_the_nodes_or_executor_cannot_hold_is_refused_naming_mode_and_field(mode, field, message):
    found = problems(mode)
    assert any(f == field and message in m for f, m in found), found


def test_the_plan_prints_every_replica_and_the_balancer(tmp_path):
    from servebench.cli.plan import describe_plan
    from servebench.planning.plan import make_plan

    campaign_file = tmp_path / "r.yaml"
    campaign_file.write_text(CAMPAIGN.replace("MODE", "{name: r2, replicas: 2, balancer: round-robin, "
                                                      "nodes: [n1, n0], knobs: {enforce_eager: true}}"))
    campaign = parse_campaign(campaign_file.read_text(), base_dir=tmp_path, host_cpus={0, 1})
    text = describe_plan(make_plan(campaign, {0, 1}), campaign_file)
    assert "mode r2 (tp=1 pp=1 replicas=2 balancer=round-robin executor=mp) on r0 n1, r1 n0:" in text, text
    assert "  replica r0 on n1:" in text and "  replica r1 on n0:" in text, text
    assert text.count("vllm.entrypoints.openai.api_server") == 2 and "--host 127.0.1.2" in text, text
    assert ("balancer nginx round-robin (nginx's default) on this host (127.0.0.1, beside the load generator), "
            "at PORT: r0 http://127.0.1.2:PORT, r1 http://127.0.1.1:PORT") in text, text
    assert "nginx -p RUN_DIR/balancer/r2 -c RUN_DIR/balancer/r2/nginx.conf" in text and "daemon off;" in text, text


def test_the_nginx_config_streams_to_the_replicas_by_the_policy():
    urls = {"r0": "http://127.0.1.1:8000", "r1": "http://127.0.1.2:8001"}
    least = nginx_config(urls, "least-connections", "127.0.0.1:9000", "/run/b")
    robin = nginx_config(urls, "round-robin", "127.0.0.1:9000", "/run/b")
    assert "least_conn;" in least and "least_conn" not in robin
    for text in (least, robin):
        assert "server 127.0.1.1:8000 max_fails=0;  # r0" in text and "server 127.0.1.2:8001" in text
        assert "proxy_http_version 1.1;" in text and "proxy_buffering off;" in text and "listen 127.0.0.1:9000;" in text
        assert "$upstream_addr" in text and "access_log /run/b/access.log replicas;" in text
        # every path nginx writes is under the prefix: nothing in /var
        paths = re.findall(r"(?:_path|_file|error_log|access_log) (/\S+)", text)
        assert len(paths) == 8 and all(p.startswith("/run/b/") for p in paths), paths
    with pytest.raises(ValueError, match="balancer policy 'random'"):
        nginx_config(urls, "random", "127.0.0.1:9000", "/run/b")


def test_requests_per_replica_are_counted_from_the_access_log(tmp_path):
    log = tmp_path / "access.log"
    log.write_text("1.0 127.0.1.1:8000 200 POST /v1/completions 0.1 0.1\n"
                   "1.1 127.0.1.2:8001 200 POST /v1/completions 0.1 0.1\n"
                   "1.2 127.0.1.1:8000, 127.0.1.2:8001 200 POST /v1/completions 0.1 0.1, 0.1\n"
                   "1.3 127.0.1.1:8000 200 GET /health 0.0 0.0\n"
                   "1.4 - 404 GET /metrics 0.0 -\n")
    urls = {"r0": "http://127.0.1.1:8000", "r1": "http://127.0.1.2:8001", "r2": "http://127.0.1.3:8002"}
    assert requests_per_replica(log, urls) == {"r0": 1, "r1": 2, "r2": 0}


def test_servers_and_cells_rows_name_replicas_and_the_balancer(tmp_path):
    from servebench import warehouse
    from servebench.config.sweep import expand
    from warehouse import landing

    campaign = parse_campaign(CAMPAIGN.replace("MODE", "{name: tp1, nodes: [n0]}, {name: r2, replicas: 2, nodes: "
                                                       "[n0, n1]}, {name: r2rr, replicas: 2, balancer: round-robin, "
                                                       "nodes: [n1, n2]}"), host_cpus={0, 1})
    con = warehouse.connect(tmp_path / "w.duckdb")
    try:
        landing.insert_run(con, "r1", landing.RunRecord(
            campaign="t", spec_hash=campaign.spec_hash(), spec_text="", spec_normalized=campaign.normalized(),
            campaign_file="t.yaml", run_dir=tmp_path))
        server = dict(pid=1, port=8000, command=["serve"], env={}, log_path=None, started_at=None,
                      ready_seconds=None, stopped_at=None, status="ready", error=None)
        layouts = {mode.name: landing.ServerLayout.of(mode) for mode in campaign.modes}
        layouts["reference-tp1"] = landing.ServerLayout(tp=1, pp=1, dp=1, ep=False, replicas=1)  # one worker
        for mode in ("tp1", "r2", "r2rr", "reference-tp1", "unknown"):
            layout = layouts.get(mode, landing.ServerLayout())  # none: a server of no mode
            landing.land_server(con, "r1", landing.ServerRecord(mode=mode, layout=layout, **server))
        for cell in expand(campaign):
            landing.land_cell(con, "r1", landing.CellRecord(cell=cell, input_len=8, output_len=4, status="failed",
                                                            error="x"))
        servers = con.execute("select mode, replicas, balancer from servers order by mode").fetchall()
        cells = con.execute("select mode, replicas from cells order by mode").fetchall()
        comments = con.execute("select table_name || '.' || column_name, comment from duckdb_columns() "
                               "where column_name in ('replicas', 'balancer') and table_name in ('cells', 'servers') "
                               "order by 1").fetchall()
    finally:
        con.close()
    assert servers == [("r2", 2, "least-connections"), ("r2rr", 2, "round-robin"), ("reference-tp1", 1, None),
                       ("tp1", 1, None), ("unknown", None, None)], servers
    assert cells == [("r2", 2), ("r2rr", 2), ("tp1", 1)], cells
    assert [name for name, _ in comments] == ["cells.replicas", "servers.balancer", "servers.replicas"] and all(
        comment for _, comment in comments), comments


def test_rows_landed_before_replicas_existed_were_one_server_each(tmp_path, monkeypatch):
    from servebench import warehouse

    older = tmp_path / "older"
    older.mkdir()
    for version, path in warehouse.migrations():
        if version < 30:  # the warehouse as it was before 030_replicas.sql
            (older / path.name).write_text(path.read_text())
    monkeypatch.setattr(warehouse, "MIGRATIONS_DIR", older)
    monkeypatch.setattr(warehouse, "apply_views", lambda con: None)
    con = warehouse.connect(tmp_path / "w.duckdb")
    con.execute("insert into cells (run_id, cell_id, cell_key, mode, tp, pp, executor, load_kind, repeat, "
                "input_len, output_len, seed, status) "
                "values ('r', 'c', 'tp1.c1.r0', 'tp1', 1, 1, 'mp', 'closed', 0, 8, 4, 0, 'ok')")
    con.execute("insert into servers (run_id, mode, command, status) values ('r', 'tp1', ['serve'], 'ready')")
    con.close()
    monkeypatch.undo()
    con = warehouse.connect(tmp_path / "w.duckdb")
    try:
        rows = (con.execute("select replicas from cells").fetchall(),
                con.execute("select replicas, balancer from servers").fetchall())
    finally:
        con.close()
    assert rows == ([(1,)], [(1, None)]), rows


# --- real nginx in front of real servers


def echo_launch(node: str, address: str, port: int, model_dir: Path, label: str = "") -> ServerLaunch:
    argv = [sys.executable, str(ECHO_SERVER), "--host", address, "--port", str(port), "--model-dir", str(model_dir),
            "--served-name", "m", "--token-delay-ms", "1"]
    return ServerLaunch(processes=[ProcessLaunch(node=node, argv=argv, env={}, api=True, label=label)], port=port)


def failing_launch(node: str, port: int) -> ServerLaunch:
    argv = [sys.executable, "-c", "import sys, time; time.sleep(0.5); sys.exit('replica r1 cannot start')"]
    return ServerLaunch(processes=[ProcessLaunch(node=node, argv=argv, env={}, api=True)], port=port)


@pytest.fixture
def plain_nodes(tmp_path):
    from tests.support.plain_provider import PlainProvider, PlainProviderSpec

    provider = PlainProvider(PlainProviderSpec(nodes=[{"name": "a", "cpus": "0"}, {"name": "b", "cpus": "0"}]),
                             run_id="replicas-test")
    nodes = provider.allocate()
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({"vocab_size": 500}))
    yield provider, nodes
    provider.release()


def test_each_replica_is_a_chain_of_its_own_started_beside_the_others_and_kept_in_launch_order(tmp_path,
                                                                                                 plain_nodes):
    provider, nodes = plain_nodes
    worker = ProcessLaunch(node="b", argv=[sys.executable, "-c", "import time; time.sleep(30)"], env={}, label="w")
    sleeper = [sys.executable, "-c", "import time; time.sleep(30)"]
    launches = [ServerLaunch(processes=[ProcessLaunch(node=n.name, argv=sleeper, env={}, api=True)], port=1)
                for n in nodes]
    launches[1] = ServerLaunch(processes=[worker, *launches[1].processes], port=1)
    launch = replica_launch(launches)
    assert [(p.chain, p.label) for p in launch.processes] == [(0, "r0"), (1, "r1.w"), (1, "r1")]
    assert [[p.label for p in chain] for chain in process_chains(launch.processes)] == [["r0"], ["r1.w", "r1"]]
    server = start_server(provider, nodes, launch, "r2", tmp_path / "servers", 30)
    try:
        assert [r.launch.label for r in server.processes] == ["r0", "r1.w", "r1"]   # whichever chain came first
        assert all(r.process.alive() for r in server.processes)
    finally:
        stop_server(provider, server)
    assert not any(r.process.alive() for r in server.processes)


@NEEDS_NGINX
def test_the_balancer_streams_from_both_replicas_and_a_failing_replica_stops_the_others(tmp_path, plain_nodes):
    from servebench.providers import node_tools

    provider, nodes = plain_nodes
    ports = [node_tools.free_port(node.address) for node in nodes]
    launches = [echo_launch(node.name, node.address, port, tmp_path / "model") for node, port in zip(nodes, ports)]
    server = start_server(provider, nodes, replica_launch(launches), "r2", tmp_path / "servers", 30)
    urls = instance_urls(launches, nodes)
    server.instance_urls = urls
    server.balancer = start_balancer(provider, None, "r2", "round-robin", urls, tmp_path, "replicas-test.balancer")
    server.url = server.balancer.url
    try:
        wait_ready(server, 30)
        body = json.dumps({"model": "m", "prompt": [1, 2, 3], "max_tokens": 5, "stream": True}).encode()
        for _ in range(4):
            request = urllib.request.Request(server.url + "/v1/completions", body,
                                             {"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=10) as response:
                chunks = [line for line in response.read().decode().splitlines() if line.startswith("data: {")]
            assert len(chunks) == 5, chunks   # streamed through nginx, one event a token
        # nginx logs a request just after its last byte reaches the client: the four lines, then the stop
        wait_until(lambda: sum(requests_per_replica(server.balancer.access_log, urls).values()) == 4,
                   "nginx to log the four requests", timeout_s=5, poll_s=0.02)
    finally:
        stop_server(provider, server)
    assert server.balancer.requests == {"r0": 2, "r1": 2}, server.balancer.requests
    assert not server.balancer.process.alive() and not any(r.process.alive() for r in server.processes)
    assert sorted(p.name for p in (tmp_path / "servers").iterdir()) == ["r2.r0.log", "r2.r1.log"]
    assert {p.name for p in server.balancer.directory.iterdir()} >= {"nginx.conf", "access.log", "error.log"}

    # r1 exits before it is ready: the wait says which replica, and the stop takes r0 and nginx down too
    broken = [echo_launch("a", nodes[0].address, node_tools.free_port(nodes[0].address), tmp_path / "model"),
              failing_launch("b", ports[1])]
    server = start_server(provider, nodes, replica_launch(broken), "bad", tmp_path / "servers", 30)
    urls = instance_urls(broken, nodes)
    server.instance_urls, server.balancer = urls, start_balancer(provider, None, "bad", "least-connections", urls,
                                                                 tmp_path, "replicas-test.balancer")
    server.url = server.balancer.url
    with pytest.raises(ServerFailed, match="server r1 of mode bad exited"):
        try:
            wait_ready(server, 30)
        finally:
            stop_server(provider, server)
    assert not server.balancer.process.alive() and not any(r.process.alive() for r in server.processes)


@NEEDS_NGINX
def test_a_balancer_left_by_a_killed_orchestrator_is_found_by_the_runs_mark(tmp_path):
    """nginx writes its title over its environment, where the mark is read: the shell around it keeps it."""
    from servebench.providers import node_tools

    balancer = start_balancer(None, None, "m", "least-connections", {"r0": "http://127.0.0.1:9"}, tmp_path,
                              "replicas-killed.balancer")
    pid_file = balancer.directory / "nginx.pid"
    try:
        master = wait_until(lambda: pid_file.exists() and int(pid_file.read_text()), "nginx's pid file")
        assert os.path.exists(f"/proc/{master}")
        stopped = node_tools.stop_marked("replicas-killed.", grace_s=5)   # what a resume's reclaim does
        assert balancer.process.pid in stopped, stopped
        wait_until(lambda: not os.path.exists(f"/proc/{master}"), "nginx to be gone", timeout_s=5)
    finally:
        stop_balancer(None, balancer)   # by PID, whatever the mark did (nothing left if it did its part)


# --- a campaign through the real flow


