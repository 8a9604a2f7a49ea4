"""Faults on real hosts, through the real flow. In a Slurm allocation: the API server killed by
`servebench chaos` from another process and then the job cancelled (the campaign's own
`cancel-allocation` fault). Over ssh, one run, the split mode's three cells: a host cut off the
network for seconds and a worker SIGKILLed on its host (the campaign's `cut-host` and `kill`
faults), then a host cut off for good (its sshd killed) mid-cell, which its warden cleans.

The engine is the test-only `echo` engine (tests/support/echo_engine: a standard-library
server in a bare venv, started in seconds), so the tests are about what a provider and the flow
do when a node, a host or the allocation goes away, on real hosts with a real sshd and a real
Slurm controller with real job steps: the cells measured before stay landed, a cell a fault hits
fails naming it, the run ends (it does not hang), and nothing of the run is left on any host or
in Slurm.

One run holds all three ssh faults rather than a testbed per fault (~50 s each): the sshd goes last,
in a third load point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import servebench.engines
from servebench import warehouse
from servebench.paths import CHECKOUT
from tests.support.echo_engine import EchoEngine
from tests.support.testbed import (
    echo_model,
    kill_on_host,
    marked_processes_on,
    on_host,
    own_leftovers,
    own_testbed,
    ssh_provider_yaml,
)
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.testbed, pytest.mark.root]  # the echo engine's flow on testbed hosts

CAMPAIGN = """
name: slurm-cancel
provider: {{kind: slurm, nodes: 2, cpus_per_node: 1, partition: {partition}, time_limit: "10",
           slurm_conf: {slurm_conf}}}
engine: {{kind: echo, token_delay_ms: 50}}
model: {{path: {model}}}
modes:
  - {{name: single}}
  - {{name: split, pp: 2, executor: split}}
load: {{clients: [1, 2], requests: 12, input_len: 8, output_len: 8, client: {{cpus: "1"}}}}
validity: {{on_invalid: warn}}   # timing verdicts depend on the machine; this test is about the fault
faults:
  - {{cell: single.c2.r0, at_s: 1, action: cancel-allocation}}   # the second cell (the first: servebench chaos)
"""


def chaos_in_cell(runs: Path, cell: str, warehouse_path: Path, done: dict) -> None:
    """`servebench chaos RUN kill` on the API server once `cell`'s load is under way (its progress
    file): a step of its own in the campaign's allocation, from another process."""
    found = under_way(runs, cell)
    env = os.environ | {"SERVEBENCH_PLUGINS": "tests.support.plugins", "PYTHONPATH": str(CHECKOUT)}
    done["chaos"] = subprocess.run(
        [sys.executable, "-m", "servebench", "chaos", found[0].parent.parent.name, "kill", "--match=--model-dir",
         "--warehouse", str(warehouse_path)], capture_output=True, text=True, timeout=120, env=env)


def test_a_cancelled_allocation_fails_the_remaining_cells_and_keeps_the_measured_ones(isolated, tmp_path,
                                                                                      monkeypatch):
    from servebench.devtools.testbed import slurm_client_env
    from servebench.flows.campaign import campaign_run
    from tests.support.prefect_session import session_api_url

    monkeypatch.setitem(servebench.engines._ENGINES, EchoEngine.kind, EchoEngine)
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path / "cache"))  # under /tmp: hidden from the hosts, copied
    model = echo_model(tmp_path / "model")
    with own_testbed("flt", 2) as layout:
        campaign = tmp_path / "campaign.yaml"
        campaign.write_text(CAMPAIGN.format(partition=layout.partition, slurm_conf=layout.slurm_conf, model=model))
        done: dict = {}
        chaos = threading.Thread(target=chaos_in_cell, args=(tmp_path / "runs", "single.c1.r0", isolated, done),
                                 daemon=True)
        chaos.start()
        session_api_url()  # the flow reports to the session's Prefect server
        outcome = campaign_run(campaign_file=str(campaign), warehouse_path=str(isolated))
        ended = time.monotonic()
        chaos.join(timeout=120)
        squeue = subprocess.run(["squeue", "-h"], env=slurm_client_env(layout), capture_output=True, text=True)
        assert squeue.stdout.strip() == "", squeue.stdout  # no job of the run left in Slurm
        leftovers = {host.name: found for host in layout.hosts if (found := marked_processes_on(layout, host))}
        assert leftovers == {}, f"processes of the run left: {leftovers}"

    assert done["chaos"].returncode == 0 and "fault kill on h1" in done["chaos"].stdout, done["chaos"]
    assert outcome["status"] == "failed", outcome  # no cell completed: chaos took the first, the cancel the rest
    con = warehouse.connect(isolated, read_only=True)
    cells = dict(con.execute("select cell_key, status from cells").fetchall())
    first = con.execute("select error, (select count(*) from requests r where r.cell_id = c.cell_id) from cells c "
                        "where cell_key = 'single.c1.r0'").fetchone()
    errors = dict(con.execute("select cell_key, error from cells where status = 'failed'").fetchall())
    allocation = json.loads(con.execute("select allocation from runs").fetchone()[0])
    faults = con.execute("select cell_key, action, hit, error, t_mono from faults").fetchall()
    con.close()
    assert len(faults) == 1 and faults[0][:2] == ("single.c2.r0", "cancel-allocation") and faults[0][3] is None
    (job, command), = json.loads(faults[0][2])
    assert command == f"scancel {job}" and str(job) == str(allocation["job_id"]), faults
    assert ended - faults[0][4] < 120, "the run did not end soon after its allocation was cancelled"
    assert set(cells) == {"single.c1.r0", "single.c2.r0", "split.c1.r0", "split.c2.r0"}
    assert "server of mode single is no longer healthy" in first[0] and first[1] == 12, first  # measured, landed
    cancelled = {key: error for key, error in errors.items() if key != "single.c1.r0"}
    assert len(cancelled) == 3 and all("allocation cancelled" in e for e in cancelled.values()), errors
    assert allocation["node_list"]


SSH_CAMPAIGN = """
name: ssh-faults
{provider}engine: {{kind: echo, token_delay_ms: 50}}
model: {{path: {model}}}
modes:
  - {{name: single}}
  - {{name: split, pp: 2, executor: split}}
  - {{name: after, executor: local}}
load: {{clients: [1, 2, 4], requests: 12, input_len: 8, output_len: 8, client: {{cpus: "1"}}}}
validity: {{on_invalid: warn}}
faults:
  - {{cell: split.c1.r0, at_s: 1, action: cut-host, node: h2, testbed: {testbed}, duration_s: 3}}
  - {{cell: split.c2.r0, at_s: 1, action: kill, node: h2, match: "--serve-worker"}}
"""
# split.c4.r0: h2's sshd killed by the test itself (cut_off_h2_during_split_c4): no campaign fault does that
LEASE_S = 15  # short, for h2's warden to act soon; past what the 3 s cut-host can delay a renewal (every 3 s)


def run_with_fault(layout, tmp_path: Path, warehouse_path: Path, campaign_text: str, fault) -> tuple[dict, dict]:
    """The campaign through the real flow while `fault(runs dir, layout, done)` acts in a thread;
    (the run's outcome, what the fault recorded)."""
    from servebench.flows.campaign import campaign_run
    from tests.support.prefect_session import session_api_url

    campaign = tmp_path / "campaign.yaml"
    campaign.write_text(campaign_text)
    done: dict = {}
    thread = threading.Thread(target=fault, args=(tmp_path / "runs", layout, done), daemon=True)
    thread.start()
    session_api_url()  # the flow reports to the session's Prefect server
    outcome = campaign_run(campaign_file=str(campaign), warehouse_path=str(warehouse_path))
    done["ended"] = time.monotonic()
    thread.join(timeout=10)
    return outcome, done


def under_way(runs: Path, cell: str) -> list[Path]:
    """Wait (bounded) until `cell`'s load is under way: its load generator's progress file."""
    return wait_until(lambda: list(runs.glob(f"*/cells/{cell}.progress")), f"{cell}'s load to start", timeout_s=300)


def cut_off_h2_during_split_c4(runs: Path, layout, done: dict) -> None:
    """Kill h2's sshd (listener and sessions) once split.c4.r0's load is under way; note what of the
    run runs there then (from inside the host: the run itself can no longer look)."""
    under_way(runs, "split.c4.r0")
    done["left"] = marked_processes_on(layout, layout.hosts[1])
    done["sshd"] = kill_on_host(layout, layout.hosts[1], "sshd")
    done["at"] = time.monotonic()


def test_faults_on_ssh_hosts_cut_a_host_off_kill_a_worker_and_lose_a_host_whose_warden_cleans_it(
        isolated, tmp_path, monkeypatch):
    """Three faults on real hosts, through the ssh provider and the testbed, in the split mode's three
    cells (it runs last: single-worker modes first): the campaign's own `cut-host`, h2 off the network
    for 3 s during split.c1.r0 (the requests in flight stall, the host comes back); the campaign's
    `kill`, the split worker on h2 SIGKILLed during split.c2.r0 (the server is started again for the
    next cell); then h2's sshd killed by the test during split.c4.r0, so that the orchestrator can no
    longer ask h2 anything. Each cell fails naming its fault (the last one names h2), everything they
    measured lands, the modes on h1 serve, the run ends saying what it could not clean on h2; h1 is
    clean at once, and what the run left on h2 (unreachable for release) is stopped by h2's warden
    once the run's lease there expires."""
    monkeypatch.setitem(servebench.engines._ENGINES, EchoEngine.kind, EchoEngine)
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path / "cache"))
    model = echo_model(tmp_path / "model")
    with own_testbed("kil", 2) as layout:
        text = SSH_CAMPAIGN.format(provider=ssh_provider_yaml(layout) + f"  lease_s: {LEASE_S}\n", model=model,
                                   testbed=layout.name)
        outcome, done = run_with_fault(layout, tmp_path, isolated, text, cut_off_h2_during_split_c4)
        h1, h2 = layout.hosts[:2]
        assert marked_processes_on(layout, h1) == "", "h1 was reachable: the run cleaned it"
        ports = subprocess.run(["ip", "-n", layout.switch_netns, "-j", "link", "show", "h2"], capture_output=True,
                               text=True, check=True).stdout
        assert json.loads(ports)[0]["operstate"] == "UP"                      # never left cut off
        run_dirs = "ls -d /tmp/servebench-* 2>/dev/null"
        # the lease runs out, the warden stops the run's processes (5 s grace) and removes the run's directory
        wait_until(lambda: marked_processes_on(layout, h2) == "" and on_host(layout, h2, run_dirs).strip() == "",
                   "h2's warden to stop the run's processes and remove the run's directory",
                   timeout_s=done["ended"] + LEASE_S + 30 - time.monotonic(), poll_s=1)
        assert own_leftovers() == []

    assert done.get("sshd"), done
    # running on h2 when it was cut off (the split server started again after the kill), unreachable from
    # then on (release could not clean it), gone now
    assert done.get("left"), done
    print(f"on h2 when it was cut off, stopped by its warden: {done['left']}")
    assert outcome["status"] == "partial", outcome
    assert "h2" in outcome.get("release_error", ""), outcome  # the run says what it could not clean
    con = warehouse.connect(isolated, read_only=True)
    cells = {key: (status, error) for key, status, error in con.execute(
        "select cell_key, status, error from cells").fetchall()}
    requests = dict(con.execute("select cell_key, count(*) from requests join cells using (cell_id) "
                                "group by cell_key").fetchall())
    faults = {key: (action, json.loads(hit), error) for key, action, hit, error in con.execute(
        "select cell_key, action, hit, error from faults").fetchall()}
    con.close()
    assert {key for key, (status, _) in cells.items() if status == "failed"} == {
        "split.c1.r0", "split.c2.r0", "split.c4.r0"}, cells
    cut = cells["split.c1.r0"][1]
    assert "fault cut-host on h2 at 1" in cut and "cut off" in cut and "connected again after 3" in cut, cut
    action, hit, error = faults["split.c1.r0"]
    assert action == "cut-host" and error is None and [node for node, _ in hit] == ["h2", "h2"], faults
    killed = cells["split.c2.r0"][1]
    assert "server of mode split is no longer healthy" in killed and "worker.h2 137" in killed, killed
    assert faults["split.c2.r0"][0] == "kill" and faults["split.c2.r0"][1], faults  # the worker (and its wrapper)
    assert set(faults) == {"split.c1.r0", "split.c2.r0"}, faults
    assert "h2" in cells["split.c4.r0"][1], cells  # the cause names the host
    # what the cells measured landed with them (in the last, the worker kept answering: no ssh in its path)
    assert requests["split.c1.r0"] == requests["split.c2.r0"] == requests["split.c4.r0"] == 12, requests
    served = {key for key, (status, _) in cells.items() if status == "completed"}
    assert served == {f"{mode}.c{n}.r0" for mode in ("single", "after") for n in (1, 2, 4)}, cells
