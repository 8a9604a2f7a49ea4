"""End to end across real hosts: the shipped campaigns/ssh-testbed.yaml on a testbed of 3 hosts
(own network, /dev/shm, /tmp and /root each; real sshd), through the Prefect flow.

The engine build is on a file system every host shares (`testbed up --share`, the campaign's
`shared_paths`: a cluster's NFS home), so its 3.7 GB are not copied twice a run; the model and the tools
are copied to each host by digest (the hosts cannot see the orchestrator's /root) and verified there (a
build copied by digest: tests/test_llamacpp_testbed.py and tests/test_testbed_faults.py); a Ray head on
h1 and a worker on h2 serve TP=2; the servers listen on the hosts' addresses and the load generator, on
the third host (h3, serving nothing, from its own tree), reaches them over the testbed's bridge. Asserted
by both tests: the gate against TP=1, every cell landed with exact token counts, the TP group's
all-reduce left /dev/shm for gloo across hosts (the CPU-Ray plugin's cross-node guard, or vLLM's own
check where the CPU lacks the shm kernels), samples of every host landed in the orchestrator's time base
(inside the cells), clock offsets and placements recorded, and afterwards nothing of the run on any
host: no process carrying the run's mark, no listening port but sshd's and Slurm's, nothing in /dev/shm
or /tmp.

The test command's test serves TP=2 over Ray. The nightly lane's adds vLLM's own launcher across the
same hosts and a lost Ray node: during the last cell of the launcher's mode (which runs first
and does not use Ray) every Ray process of h2 (its `ray start`, log monitor, agents; its raylet dies with
them) is SIGKILLed; that cell fails as one a fault was injected into, with all its requests' rows landed,
and the launcher's server is untouched. h1's Ray is never restarted; before TP=2 over Ray starts, h2's
Ray node is started again (fresh ports, temp dir `1.2`, or later if a start attempt was retried: the run
says each) once the GCS has declared it dead, and TP=2 over Ray then serves on the repaired cluster. The
fault rides on cells and a server start the test has anyway: no server is started again for it.

Each claim is proved once: these are the suite's tests of TP=2 over Ray across hosts and of a lost Ray node;
the campaign's third mode, PP=2 over Ray, is tests/test_e2e_ray.py's, on one host (two Ray nodes with
loopback addresses of their own).
"""

import io
import json
import re
import time
from pathlib import Path

import pytest
from rich.console import Console

from servebench import warehouse
from servebench.progress import live
from tests.support.ray_logs import assert_tp_across_nodes
from tests.support.testbed import campaign_on, marked_processes_on, on_host, own_testbed

CAMPAIGN = Path(__file__).parent.parent / "campaigns" / "ssh-testbed.yaml"
pytestmark = [pytest.mark.e2e, pytest.mark.vllm, pytest.mark.testbed, pytest.mark.root]
# no compiled graphs: each start here compiled for 45-90 s (two ranks on two shared cores); the reference
# TP=1 server is eager too (the knob changes arithmetic, every mode sets it: flows/modes.py)
EAGER = {"enforce_eager": True}
# h2's Ray lost in the launcher mode's last cell (a cell whose kill hits something is followed by a restart
# of its mode's server: there is none after the last); at a time into the cell, not after a number of
# requests: those are counted from the generator's progress file on the orchestrator's machine, and the
# generator runs on h3
LOST_NODE = {"cell": "tp2-mp-multinode.c2.r0", "action": "kill", "node": "h2", "match": "ray", "at_s": 1}
RAY = {"name": "tp2-ray", "tp": 2, "executor": "ray", "knobs": EAGER}
LAUNCHER = {"name": "tp2-mp-multinode", "tp": 2, "executor": "mp-multinode", "knobs": EAGER}
LOAD = {"clients": [1, 2], "input_len": 32, "output_len": 16, "requests": 6, "client": {"node": "h3", "nice": -10}}


def run_across_hosts(tmp_path, monkeypatch, modes: list[dict], faults: list[dict]) -> tuple:
    """The campaign with these modes on a fresh 3-host testbed, through the flow; checks that nothing
    of the run is left on any host; (outcome, warehouse path, the run's stage lines, the layout)."""
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
        with live(Console(file=said)):
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


def test_tp2_over_ray_across_ssh_hosts(tmp_path, monkeypatch):
    outcome, db, stages, layout = run_across_hosts(tmp_path, monkeypatch, [RAY], faults=[])
    assert outcome["status"] == "completed", outcome
    cells = check_gates_nodes_and_samples(db, layout, {"tp2-ray"})
    assert all(c[1] == "completed" and c[2] == c[3] == 6 * 16 for c in cells), cells
    assert "was lost" not in stages and "restarting its server" not in stages, stages
    check_ray_logs(tmp_path / "runs", stages, h2_starts=1)


@pytest.mark.nightly(reason=(
    "vLLM's own launcher across SSH hosts and a Ray node lost and repaired between modes; the test command "
    "keeps TP=2 over Ray across the same hosts (the test above) and Ray's failed start retried "
    "(test_ray_cluster)"))
def test_tp2_over_ray_and_over_vllms_launcher_across_ssh_hosts_and_a_lost_ray_node(tmp_path, monkeypatch):
    # the launcher's mode first: h2's Ray is lost in its last cell
    outcome, db, stages, layout = run_across_hosts(tmp_path, monkeypatch, [LAUNCHER, RAY], faults=[LOST_NODE])
    assert outcome["status"] == "partial", outcome   # one cell failed (the fault's), the others completed
    cells = check_gates_nodes_and_samples(db, layout, {"tp2-ray", "tp2-mp-multinode"})
    assert all(c[1] == "completed" and c[2] == c[3] == 6 * 16 for c in cells if c[0] != LOST_NODE["cell"]), cells
    assert next(c for c in cells if c[0] == LOST_NODE["cell"])[1] == "failed", cells   # a fault was injected in it

    # the lost node: its cell failed naming the fault, every request of it has a row, only h2's Ray was hit
    # (not the launcher's server: it served the cell to its end)
    con = warehouse.connect(db, read_only=True)
    error, requests = con.execute("select any_value(cells.error), count(*) from requests join cells using (cell_id) "
                                  "where cell_key = ?", [LOST_NODE["cell"]]).fetchone()
    assert re.search(r"fault kill on h2 at \d+\.\d s", error) and requests == 6, (error, requests)
    (hit,) = con.execute("select hit from faults").fetchone()
    con.close()
    # `ray start` first; its raylet dies with it (Ray ties it to its parent) before the scan reaches it
    commands = [command for _, command in json.loads(hit)]
    assert len(commands) >= 2 and any(command.startswith("ray::") for command in commands), commands
    assert not any("vllm.entrypoints" in command or "--headless" in command for command in commands), commands

    assert stages.count("Ray node h2 was lost") == 1 and "Ray node h1 was lost" not in stages, stages
    assert "restarting its server" not in stages, stages   # no server needed starting again: TP=2 came after
    check_ray_logs(tmp_path / "runs", stages, h2_starts=2)   # h2 started again once after it was lost, h1 never


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
