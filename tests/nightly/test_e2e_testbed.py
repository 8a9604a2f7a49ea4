"""End to end across real hosts: the shipped campaigns/ssh-testbed.yaml on a testbed of 3 hosts (own network,
/dev/shm, /tmp and /root each; real sshd), through the Prefect flow.

Here the nightly lane's (skipped by the test command, each with its reason); the test command's are in
tests/e2e/test_e2e_testbed.py."""

import json
import re

import pytest

from servebench import warehouse
from tests.support.testbed_run import (
    EAGER,
    RAY,
    check_gates_nodes_and_samples,
    check_ray_logs,
    run_across_hosts,
)

pytestmark = [pytest.mark.vllm, pytest.mark.testbed, pytest.mark.root]



# h2's Ray lost in the launcher mode's last cell (a cell whose kill hits something is followed by a restart
# of its mode's server: there is none after the last); at a time into the cell, not after a number of
# requests: those are counted from the generator's progress file on the orchestrator's machine, and the
# generator runs on h3
LOST_NODE = {"cell": "tp2-mp-multinode.c2.r0", "action": "kill", "node": "h2", "match": "ray", "at_s": 1}


LAUNCHER = {"name": "tp2-mp-multinode", "tp": 2, "executor": "mp-multinode", "knobs": EAGER}


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
