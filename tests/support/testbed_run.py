"""What tests/e2e/test_e2e_testbed.py and tests/nightly/test_e2e_testbed.py share."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

from rich.console import Console

from servebench import warehouse
from servebench.progress import live
from tests.support.ray_logs import assert_tp_across_nodes
from tests.support.testbed import campaign_on, marked_processes_on, on_host, own_testbed

CAMPAIGN = Path(__file__).parents[2] / "campaigns" / "ssh-testbed.yaml"


# no compiled graphs: each start here compiled for 45-90 s (two ranks on two shared cores); the reference
# TP=1 server is eager too (the knob changes arithmetic, every mode sets it: flows/modes.py)
EAGER = {"enforce_eager": True}


RAY = {"name": "tp2-ray", "tp": 2, "executor": "ray", "knobs": EAGER}


LOAD = {"clients": [1, 2], "input_len": 32, "output_len": 16, "requests": 6, "client": {"node": "h3", "nice": -10}}


def run_across_hosts(tmp_path, monkeypatch, modes: list[dict], faults: list[dict], watcher=None) -> tuple:
    """The campaign with these modes on a fresh 3-host testbed, through the flow, `watcher` (a
    tests.support.second_user.SecondUser) watching its hosts while it runs; checks that nothing of the run
    is left on any host; (outcome, warehouse path, the run's stage lines, the layout)."""
    from servebench.flows.campaign import campaign_run
    from servebench.paths import cache_dir
    from tests.support.prefect_session import session_api_url

    monkeypatch.setenv("SERVEBENCH_RUNS", str(tmp_path / "runs"))
    # the engine builds on a file system every host sees (the campaign's shared_paths: campaign_on)
    with own_testbed("e2e", 3, share=(str(cache_dir() / "engines"),)) as layout:
        campaign = campaign_on(layout, CAMPAIGN, tmp_path / "ssh-testbed.yaml", modes=modes, load=LOAD,
                               faults=faults)
        db = tmp_path / "w.duckdb"
        started = time.monotonic()
        session_api_url()  # the flow reports to the session's Prefect server
        said = io.StringIO()  # the run's stage lines (plain, as in a CI log)
        if watcher is not None:
            watcher.start(layout)
        try:
            with live(Console(file=said)):
                outcome = campaign_run(campaign_file=str(campaign), warehouse_path=str(db))
        finally:
            if watcher is not None:
                watcher.stop()
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
    return outcome, db, said.getvalue(), layout


def check_gates_nodes_and_samples(db, layout, modes: set[str]) -> list[tuple]:
    """Every mode gated against the eager TP=1 reference; the nodes' roles, clocks and placements;
    samples of every host inside every cell; TP=2 over Ray across h1 and h2. The cells, by key."""
    con = warehouse.connect(db, read_only=True)
    servers = dict(con.execute("select mode, correctness from servers").fetchall())
    assert servers.pop("reference-tp1") == "reference"
    commands = dict(con.execute("select mode, command from servers").fetchall())
    assert all("--enforce-eager" in command for command in commands.values()), commands  # the reference too
    assert set(servers) == modes and set(servers.values()) <= {"passed", "close"}, servers
    cells = con.execute("select cell_key, status, client_output_tokens, server_output_tokens, client_node, "
                        "client_cpus from cells order by cell_key").fetchall()
    assert [c[0] for c in cells] == sorted(f"{mode}.c{n}.r0" for mode in modes for n in (1, 2)), cells
    assert {(c[4], c[5]) for c in cells} == {("h3", "1")}, cells  # the generator ran on h3, on its CPU

    nodes = con.execute("select node, address, clock_offset_s, placements, role from nodes order by node").fetchall()
    assert [(n[0], n[1], n[4]) for n in nodes] == [(h.name, h.address, "client" if h.name == "h3" else "server")
                                                   for h in layout.hosts]
    for node, _, offset, placements, role in nodes:
        assert offset is not None and abs(offset) < 1.0, (node, offset)  # one machine: the clocks agree
        hows = {p["what"]: p["how"] for p in json.loads(placements)}
        python = hows.pop("python", None)   # the engine's python checked there (servebench/distribution/interpreter.py)
        engine = hows.pop("engine", None)   # on the file system the hosts share: found there, not copied
        assert engine == (None if role == "client" else "shared"), (node, engine)
        trees = {"tools", "load-generator"} if role == "client" else {"model", "tools"}
        assert set(hows) == trees and set(hows.values()) <= {"copied", "present"}, hows
        assert python == (None if role == "client" else "runs"), (node, python)

    # samples from every host (the client's too), in the orchestrator's time base, where the generator's
    # start was moved from h3's clocks: some fall inside every cell
    inside = con.execute("select cell_key, node, samples from cell_node_cpu").fetchall()
    assert {(key, node) for key, node, _ in inside} == {(c[0], h.name) for c in cells for h in layout.hosts}, inside
    logs = dict(con.execute("select mode, log_path from servers").fetchall())
    con.close()
    assert_tp_across_nodes(Path(logs["tp2-ray"]).read_text(), "h2", layout.hosts[0].address)
    return cells


def check_ray_logs(runs: Path, stages: str, h2_starts: int) -> None:
    """Each Ray node ran with a temp dir of its own (<index>.<attempt>) and its logs were brought back into
    the run's ray/; a start attempt that failed (a port taken meanwhile, a busy host) is retried, and said:
    it adds one attempt (and logs, if it wrote any)."""
    retried = {node: len(re.findall(rf"Ray node {node} attempt \d+: .*starting it again", stages))
               for node in ("h1", "h2")}
    attempts = {"0": 1 + retried["h1"], "1": h2_starts + retried["h2"]}
    kept = {p.name: p for p in runs.glob("*/ray/ray-logs/*.*")}
    lasts = {f"{index}.{last}" for index, last in attempts.items()}   # what ran at the end: each with a raylet
    assert lasts <= set(kept) <= {f"{index}.{n}" for index, last in attempts.items() for n in range(1, last + 1)}, \
        (sorted(kept), stages)
    assert all((kept[name] / "raylet.out").exists() for name in lasts), sorted(kept)
    # each node's `ray start` tore its node down on the stop's SIGTERM, without first draining it (Ray's
    # default: up to 30 s, past the stop's grace, then SIGKILLed; RAY_STARTUP_ENV turns it off)
    outputs = {p.name: p.read_text() for p in runs.glob("*/ray/ray-h*.log")}
    assert {"ray-h1.log", "ray-h2.log"} <= set(outputs), sorted(outputs)
    drained = [name for name, text in outputs.items() if "Draining for up to" in text]
    assert not drained, drained
