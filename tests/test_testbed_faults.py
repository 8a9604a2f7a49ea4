"""Faults on real hosts, through the real flow: the testbed's Slurm job cancelled mid-campaign.

The engine is the test-only `echo` engine (tests/support/echo_engine: a standard-library
server in a bare venv, started in seconds), so the test is about what a provider and the flow
do when the allocation goes away, on a real Slurm controller with real job steps: the cells
measured before stay landed, every later cell fails with "allocation cancelled", the run ends
(it does not hang), and nothing of the run is left on any host or in Slurm.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

import servebench.engines
import warehouse
from tests.support.echo_engine import EchoEngine
from tests.support.testbed import echo_model, marked_processes_on, own_testbed, ssh_provider_yaml

pytestmark = pytest.mark.e2e

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
"""


def cancel_when(cells_dir: Path, count: int, layout, done: dict) -> None:
    """scancel the testbed's job a second after `count` cells have written their results (bounded wait)."""
    from servebench.testbed import slurm_client_env

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list(cells_dir.glob("*/cells/*.json"))) < count:
        time.sleep(0.1)
    time.sleep(1.0)  # into the next cell: the one measured before stays completed
    env = slurm_client_env(layout)
    jobs = subprocess.run(["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True).stdout.split()
    done["jobs"] = jobs
    for job in jobs:
        subprocess.run(["scancel", job], env=env, check=True)
    done["at"] = time.monotonic()


def test_a_cancelled_allocation_fails_the_remaining_cells_and_keeps_the_measured_ones(isolated, tmp_path,
                                                                                      monkeypatch):
    from prefect.testing.utilities import prefect_test_harness

    from flows.campaign import campaign_run
    from servebench.testbed import slurm_client_env

    monkeypatch.setitem(servebench.engines._ENGINES, EchoEngine.kind, EchoEngine)
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path / "cache"))  # under /tmp: hidden from the hosts, copied
    model = echo_model(tmp_path / "model")
    with own_testbed("flt", 2) as layout:
        campaign = tmp_path / "campaign.yaml"
        campaign.write_text(CAMPAIGN.format(partition=layout.partition, slurm_conf=layout.slurm_conf, model=model))
        done: dict = {}
        watcher = threading.Thread(target=cancel_when, args=(tmp_path / "runs", 1, layout, done), daemon=True)
        watcher.start()
        with prefect_test_harness(server_startup_timeout=120):
            outcome = campaign_run(campaign_file=str(campaign), warehouse_path=str(isolated))
        ended = time.monotonic()
        watcher.join(timeout=10)
        squeue = subprocess.run(["squeue", "-h"], env=slurm_client_env(layout), capture_output=True, text=True)
        assert squeue.stdout.strip() == "", squeue.stdout  # no job of the run left in Slurm
        leftovers = {host.name: found for host in layout.hosts if (found := marked_processes_on(layout, host))}
        assert leftovers == {}, f"processes of the run left: {leftovers}"

    assert len(done.get("jobs", [])) == 1, done
    assert ended - done["at"] < 120, "the run did not end soon after its allocation was cancelled"
    assert outcome["status"] == "partial", outcome
    con = warehouse.connect(isolated, read_only=True)
    cells = dict(con.execute("select cell_key, status from cells").fetchall())
    errors = dict(con.execute("select cell_key, error from cells where status = 'failed'").fetchall())
    allocation = json.loads(con.execute("select allocation from runs").fetchone()[0])
    con.close()
    assert set(cells) == {"single.c1.r0", "single.c2.r0", "split.c1.r0", "split.c2.r0"}
    assert cells["single.c1.r0"] == "completed"
    assert errors and all("allocation cancelled" in error for error in errors.values()), errors
    assert set(cells) - set(errors) == {c for c, s in cells.items() if s == "completed"}
    assert str(allocation["job_id"]) == done["jobs"][0] and allocation["node_list"]


SSH_CAMPAIGN = """
name: ssh-worker-killed
{provider}engine: {{kind: echo, token_delay_ms: 50}}
model: {{path: {model}}}
modes:
  - {{name: single}}
  - {{name: split, pp: 2, executor: split}}
  - {{name: after, executor: local}}
load: {{clients: [1, 2], requests: 12, input_len: 8, output_len: 8, client: {{cpus: "1"}}}}
validity: {{on_invalid: warn}}
"""


def kill_worker_during(runs: Path, after_cell: str, layout, done: dict) -> None:
    """SIGKILL the split mode's worker on h2 by PID, one second into the cell after `after_cell`."""
    from servebench.testbed import enter_argv

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list(runs.glob(f"*/cells/{after_cell}.json")):
        time.sleep(0.1)
    time.sleep(1.0)
    h2 = layout.hosts[1]
    for line in marked_processes_on(layout, h2).splitlines():
        pid = line.split(" ", 1)[0]
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:  # a short-lived process of the run (a status probe) already gone
            continue
        if b"\0--serve-worker\0" in command:  # the worker, not its wrapper
            subprocess.run([*enter_argv(layout, h2), "kill", "-9", pid], check=True)
            done.setdefault("killed", []).append(int(pid))


def test_a_worker_killed_on_its_host_fails_that_cell_with_the_cause_and_the_campaign_goes_on(isolated, tmp_path,
                                                                                               monkeypatch):
    from prefect.testing.utilities import prefect_test_harness

    from flows.campaign import campaign_run

    monkeypatch.setitem(servebench.engines._ENGINES, EchoEngine.kind, EchoEngine)
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path / "cache"))
    model = echo_model(tmp_path / "model")
    with own_testbed("kil", 2) as layout:
        campaign = tmp_path / "campaign.yaml"
        campaign.write_text(SSH_CAMPAIGN.format(provider=ssh_provider_yaml(layout), model=model))
        done: dict = {}
        killer = threading.Thread(target=kill_worker_during, args=(tmp_path / "runs", "split.c1.r0", layout, done),
                                  daemon=True)
        killer.start()
        with prefect_test_harness(server_startup_timeout=120):
            outcome = campaign_run(campaign_file=str(campaign), warehouse_path=str(isolated))
        killer.join(timeout=10)
        leftovers = {host.name: found for host in layout.hosts if (found := marked_processes_on(layout, host))}
        assert leftovers == {}, f"processes of the run left: {leftovers}"

    assert len(done.get("killed", [])) == 1, done
    assert outcome["status"] == "partial", outcome
    con = warehouse.connect(isolated, read_only=True)
    cells = {key: (status, error, completed) for key, status, error, completed in con.execute(
        "select cell_key, status, error, completed from cells").fetchall()}
    requests = con.execute("select count(*) from requests join cells using (cell_id) "
                           "where cell_key = 'split.c2.r0'").fetchone()[0]
    con.close()
    assert {key for key, (status, _, _) in cells.items() if status == "failed"} == {"split.c2.r0"}, cells
    status, error, completed = cells["split.c2.r0"]
    assert "server of mode split is no longer healthy" in error and "worker.h2 137" in error, error
    assert requests == 12  # what the cell measured before and after the kill landed with it
    assert cells["after.c1.r0"][0] == cells["after.c2.r0"][0] == "completed"  # the campaign went on
