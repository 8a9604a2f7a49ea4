"""`replicas: N`: N independent servers of a mode behind one nginx endpoint (servebench/serving/balancer.py,
docs/parallel-modes.md). Refused at plan time when the nodes do not split or the executor cannot keep a
replica on its own nodes; the plan prints every replica and the balancer; real nginx in front of real echo
servers, one failing replica stopping the others; and a campaign through the real flow with two replicas of
the test-only echo engine, behind each policy.

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_replicas.py."""

from __future__ import annotations

import os
import re
from pathlib import Path

from servebench.serving.balancer import requests_per_replica
from tests.support.replicas import NEEDS_NGINX

E2E_CAMPAIGN = """
name: replicas
provider: {kind: plain, nodes: [{name: a, cpus: "0"}, {name: b, cpus: "0"}]}
engine: {kind: echo, token_delay_ms: 5}
model: {path: model}
modes:
  - {name: single, nodes: [a]}
  - {name: r2, replicas: 2}
  - {name: r2-rr, replicas: 2, balancer: round-robin, nodes: [b, a]}
load: {clients: [4], requests: 24, warmup: 0, input_len: 4, output_len: 8, client: {cpus: "1"}}
"""


@NEEDS_NGINX
def test_two_replicas_behind_nginx_serve_every_cell_and_answer_as_one_engine(isolated, tmp_path, monkeypatch):
    from servebench import warehouse
    from tests.support.campaign_process import run_echo_campaign

    var_nginx = Path("/var/lib/nginx").exists()
    outcome = run_echo_campaign(tmp_path, isolated, monkeypatch, E2E_CAMPAIGN)
    assert outcome["status"] == "completed", outcome
    con = warehouse.connect(isolated, read_only=True)
    try:
        run_dir = Path(con.execute("select run_dir from runs").fetchone()[0])
        cells = con.execute("select mode, replicas, valid, completed, failed from cells order by mode").fetchall()
        tokens = con.execute("select mode, client_output_tokens, server_output_tokens from cells "
                             "order by mode").fetchall()
        servers = con.execute("select mode, replicas, balancer, correctness from servers order by mode").fetchall()
    finally:
        con.close()
    assert cells == [("r2", 2, True, 24, 0), ("r2-rr", 2, True, 24, 0), ("single", 1, True, 24, 0)], cells
    # the server's token counter summed over the replicas (the balancer has no /metrics): 24 answers of 8
    assert tokens == [("r2", 192, 192), ("r2-rr", 192, 192), ("single", 192, 192)], tokens
    assert servers == [("r2", 2, "least-connections", "passed"),
                                            ("r2-rr", 2, "round-robin", "passed"),
                                            ("single", 1, None, "reference")], servers
    for mode, first in (("r2", "127.0.2.1"), ("r2-rr", "127.0.2.2")):
        directory = run_dir / "balancer" / mode
        upstreams = re.findall(r"server (\S+) max_fails=0;  # (r\d)", (directory / "nginx.conf").read_text())
        assert [name for _, name in upstreams] == ["r0", "r1"] and upstreams[0][0].startswith(first), upstreams
        urls = {name: f"http://{address}" for address, name in upstreams}
        served = requests_per_replica(directory / "access.log", urls)
        # every request (the gate's 4 and the cell's 24) went through nginx, and each replica served some
        assert sum(served.values()) == 28 and min(served.values()) >= 4, (mode, served)
        pid = int((directory / "nginx.pid").read_text()) if (directory / "nginx.pid").exists() else None
        assert pid is None or not os.path.exists(f"/proc/{pid}"), f"nginx {pid} still running"
        assert (run_dir / "servers" / f"{mode}.r0.log").exists() and (run_dir / "servers" / f"{mode}.r1.log").exists()
    assert Path("/var/lib/nginx").exists() == var_nginx, "nginx wrote under /var"
