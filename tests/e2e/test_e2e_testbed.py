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

The test command's test serves TP=2 over Ray, and while it runs another user (the machine's `nobody`, on
h3, holding no token) probes every server the run starts on h1 and h2 (tests/support/second_user.py): vLLM's
API answers only its health, Ray's GCS and raylets refuse every call without the run's token and the GCS
answers it with the token. The nightly lane's adds vLLM's own launcher across the
same hosts and a lost Ray node: during the last cell of the launcher's mode (which runs first
and does not use Ray) every Ray process of h2 (its `ray start`, log monitor, agents; its raylet dies with
them) is SIGKILLed; that cell fails as one a fault was injected into, with all its requests' rows landed,
and the launcher's server is untouched. h1's Ray is never restarted; before TP=2 over Ray starts, h2's
Ray node is started again (fresh ports, temp dir `1.2`, or later if a start attempt was retried: the run
says each) once the GCS has declared it dead, and TP=2 over Ray then serves on the repaired cluster. The
fault rides on cells and a server start the test has anyway: no server is started again for it.

Each claim is proved once: these are the suite's tests of TP=2 over Ray across hosts and of a lost Ray node;
the campaign's third mode, PP=2 over Ray, is tests/nightly/test_e2e_ray.py's, on one host (two Ray nodes with
loopback addresses of their own).
"""


import json

import pytest

from tests.support.second_user import UNAUTHENTICATED, SecondUser
from tests.support.testbed_run import RAY, check_gates_nodes_and_samples, check_ray_logs, run_across_hosts

pytestmark = [pytest.mark.vllm, pytest.mark.testbed, pytest.mark.root]


def test_tp2_over_ray_across_ssh_hosts(tmp_path, monkeypatch):
    second = SecondUser(probers=("h3",), hosts=("h1", "h2"))
    outcome, db, stages, layout = run_across_hosts(tmp_path, monkeypatch, [RAY], faults=[], watcher=second)
    assert outcome["status"] == "completed", outcome
    cells = check_gates_nodes_and_samples(db, layout, {"tp2-ray"})
    assert all(c[1] == "completed" and c[2] == c[3] == 6 * 16 for c in cells), cells
    assert "was lost" not in stages and "restarting its server" not in stages, stages
    check_ray_logs(tmp_path / "runs", stages, h2_starts=1)
    check_refused_to_a_second_user(second)


def check_refused_to_a_second_user(second: SecondUser) -> None:
    """From h3, as `nobody`, while the campaign ran: vLLM's API answered only its health, Ray's GCS and both
    raylets refused every call (no node list, job table, job id or KV read), and the GCS answered the same
    call carrying the run's token (the control)."""
    assert second.errors == [], second.errors
    kinds = {(service.what, service.host) for service in second.seen}
    assert {("vllm", "h1"), ("gcs", "h1"), ("raylet", "h1"), ("raylet", "h2")} <= kinds, second.seen
    http = {what: code for what, code in second.probed.items() if what.startswith("vllm ")}
    assert http and {what: code for what, code in http.items() if code != 401} == {"vllm GET /health": 200}, http
    ray = {what: code for what, code in second.probed.items() if what.startswith(("gcs@", "raylet@"))}
    assert len(ray) >= 8 and set(ray.values()) == {UNAUTHENTICATED}, ray
    assert second.controls == {"h1": 0}, second.controls
    print("refused to a second user on h3:", json.dumps(second.probed, indent=1))
