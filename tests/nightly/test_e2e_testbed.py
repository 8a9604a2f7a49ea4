"""End to end across real hosts: the shipped campaigns/ssh-testbed.yaml on a testbed of 3 hosts
(own network, /dev/shm, /tmp and /root each; real sshd), through the Prefect flow.

The engine build is on a file system every host shares (`testbed up --share`, the campaign's
`shared_paths`: a cluster's NFS home), so its 3.7 GB are not copied twice a run; the model and the tools
are copied to each host by digest (the hosts cannot see the orchestrator's /root) and verified there (a
build copied by digest: tests/e2e/test_llamacpp_testbed.py and tests/e2e/test_testbed_faults.py); a Ray head on
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
the campaign's third mode, PP=2 over Ray, is tests/nightly/test_e2e_ray.py's, on one host (two Ray nodes with
loopback addresses of their own)."""

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
