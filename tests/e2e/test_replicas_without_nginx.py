"""A `replicas` campaign on a host without nginx (none on PATH, none at /usr/sbin/nginx: as for an ordinary
cluster user): `servebench plan` says before anything starts that the load generator balances, and why, and
the campaign still serves its replicas through the real flow, the load generator spreading each cell's
requests over two real echo servers itself (least requests in flight first; round-robin for the other mode),
every cell valid, the gate asking every replica, each request's replica in the cell's result and each
replica scraped on its own (docs/parallel-modes.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from servebench.planning import balancing
from servebench.planning.balancing import find_nginx

CAMPAIGN = """
name: replicas-client
provider: {kind: plain, nodes: [{name: a, cpus: "0"}, {name: b, cpus: "0"}]}
engine: {kind: echo, token_delay_ms: 5}
model: {path: model}
modes:
  - {name: single, nodes: [a]}
  - {name: r2, replicas: 2}
  - {name: r2-rr, replicas: 2, balancer: round-robin, nodes: [b, a]}
load: {clients: [4], requests: 24, warmup: 0, input_len: 4, output_len: 8, client: {cpus: "1"}}
"""


def hide_nginx(monkeypatch, tmp_path: Path) -> None:
    """PATH without any directory that holds an nginx, and no Debian binary where it is looked for."""
    kept = [entry for entry in os.environ.get("PATH", "").split(os.pathsep)
            if entry and not os.path.exists(os.path.join(entry, "nginx"))]
    monkeypatch.setenv("PATH", os.pathsep.join(kept))
    monkeypatch.setattr(balancing, "SYSTEM_NGINX", str(tmp_path / "no-sbin" / "nginx"))
    assert find_nginx().binary is None


def test_without_nginx_the_plan_says_so_and_the_load_generator_balances_every_cell(isolated, tmp_path, monkeypatch):
    import servebench.engines
    import servebench.providers
    from servebench import warehouse
    from servebench.campaign.loading import load_campaign
    from servebench.cli.build import balancing_text
    from servebench.cli.plan import describe_plan
    from servebench.planning.plan import make_plan
    from tests.support.campaign_process import echo_campaign_dir, run_echo_campaign
    from tests.support.echo_engine import EchoEngine
    from tests.support.plain_provider import PlainProvider

    hide_nginx(monkeypatch, tmp_path)
    monkeypatch.setitem(servebench.engines._ENGINES, EchoEngine.kind, EchoEngine)
    monkeypatch.setitem(servebench.providers._PROVIDERS, PlainProvider.kind, PlainProvider)
    file = echo_campaign_dir(tmp_path, {"campaign.yaml": CAMPAIGN}) / "campaign.yaml"
    campaign = load_campaign(file)
    plan = describe_plan(make_plan(campaign, PlainProvider.host_cpus()), file)
    for mode, policy in (("r2", "least-connections"), ("r2-rr", "round-robin")):
        header = plan.index(f"mode {mode} ")
        ends = [at for at in (plan.find("\nmode ", header + 1), plan.find("\nPORT is a free port", header)) if at > 0]
        block = plan[header:min(ends)]
        assert f"  balancing by the load generator ({policy}: " in block, block
        assert "no nginx on this host (looked for: PATH, then " in block and "`balanced_by: client`" in block, block
        assert "  balancer none: the load generator on this host" in block and "nginx -p" not in block, block
    dry_run = balancing_text(campaign)
    assert dry_run.count("[ok     ] balancer of mode r2") == 2 and "the load generator (no nginx" in dry_run, dry_run

    outcome = run_echo_campaign(tmp_path, isolated, monkeypatch, CAMPAIGN)
    con = warehouse.connect(isolated, read_only=True)
    try:
        reasons = con.execute("select cell_key, invalid_reasons from cells where not valid").fetchall()
        assert outcome["status"] == "completed", (outcome, reasons)
        run_dir = Path(con.execute("select run_dir from runs").fetchone()[0])
        cells = con.execute("select mode, replicas, valid, completed, failed, client_output_tokens, "
                            "server_output_tokens, cell_key from cells order by mode").fetchall()
        servers = con.execute("select mode, replicas, balancer, correctness from servers order by mode").fetchall()
        instances = con.execute("select mode, instances from server_samples where instances is not null "
                                "order by t_mono").fetchall()
    finally:
        con.close()
    # every cell valid, and the server's token counter (summed over the replicas' /metrics) = the client's
    assert [row[:7] for row in cells] == [("r2", 2, True, 24, 0, 192, 192), ("r2-rr", 2, True, 24, 0, 192, 192),
                                          ("single", 1, True, 24, 0, 192, 192)], cells
    assert servers == [("r2", 2, "least-connections", "passed"), ("r2-rr", 2, "round-robin", "passed"),
                       ("single", 1, None, "reference")], servers
    assert not (run_dir / "balancer").exists(), "a balancer ran"
    for mode, key in ((row[0], row[7]) for row in cells if row[1] == 2):
        result = json.loads((run_dir / "cells" / f"{key}.json").read_text())
        served = result["summary"]["replica_requests"]
        named = [request["replica"] for request in result["requests"]]
        assert sorted(served) == ["r0", "r1"] and sum(served.values()) == 24, (mode, served)
        assert {name: named.count(name) for name in served} == served, (mode, served)
        if mode == "r2-rr":
            assert served == {"r0": 12, "r1": 12}, served
        else:   # 4 clients over two alike replicas, the fewest in flight first: neither starved
            assert min(served.values()) >= 6, served
        assert set(result["config"]["replica_urls"]) == {"r0", "r1"}
    # the scraper kept each replica apart (`--instance r0=URL`), for both replicas modes
    scraped = {mode: set(json.loads(value) if isinstance(value, str) else value) for mode, value in instances}
    assert scraped.get("r2") == {"r0", "r1"} and scraped.get("r2-rr") == {"r0", "r1"}, scraped
