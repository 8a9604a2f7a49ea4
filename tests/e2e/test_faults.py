"""Faults a campaign injects (`faults:`), through the real flow with the test-only echo
engine and plain provider: a hang (SIGSTOP of the API server, caught by the load generator's
health probe within `hang_after_s`, long before the requests' timeout) and a crash (SIGKILL of the split
mode's worker on the other node). Each fails the cell it hits, naming the cause and the fault;
the mode's server is restarted for its next cell, which serves every request (under a fault of its
own: /dev/shm filled with 16 MiB, removed when the cell ends, so that cell fails naming it too); the crash comes after
the cell's third request (`after_requests`, read from the load generator's progress file); what the failed cells
measured lands; the `faults` table says what was hit, the report's node timelines mark each fault;
nothing is left behind (the leak check)."""

from __future__ import annotations

import json
import re

from servebench import warehouse
from tests.support.campaign_process import echo_campaign_dir, run_echo_campaign
from tests.support.waiting import wait_until

CAMPAIGN = """
name: faults
provider: {kind: plain, nodes: [{name: a, cpus: "0"}, {name: b, cpus: "0"}]}
engine: {kind: echo, token_delay_ms: 40}
model: {path: model}
modes:
  - {name: single}
  - {name: split, pp: 2, executor: split}
load: {clients: [1, 2], requests: 6, input_len: 8, output_len: 8, timeout_s: 20, hang_after_s: 1,
       client: {cpus: "1"}}
validity: {on_invalid: warn}
faults:
  - {cell: single.c1.r0, at_s: 0.5, action: stop, match: "--model-dir"}
  - {cell: split.c1.r0, after_requests: 3, action: kill, node: b, match: "--serve-worker"}
  - {cell: split.c2.r0, at_s: 0.5, action: kill, node: b, match: "no such process anywhere"}
  - {cell: single.c2.r0, at_s: 0.2, action: fill-shm, size_mb: 16}
"""


def test_injected_faults_fail_the_cells_they_hit_and_the_mode_goes_on_after_a_restart(isolated, tmp_path,
                                                                                       monkeypatch):
    outcome = run_echo_campaign(tmp_path, isolated, monkeypatch, CAMPAIGN)
    assert outcome["status"] == "partial", outcome

    con = warehouse.connect(isolated, read_only=True)
    cells = {key: (status, error, completed, failed) for key, status, error, completed, failed in con.execute(
        "select cell_key, status, error, completed, failed from cells").fetchall()}
    faults = con.execute("select cell_key, action, node, hit, error from faults order by cell_key").fetchall()
    requests = dict(con.execute("select cell_key, count(*) from requests join cells using (cell_id) "
                                "group by cell_key").fetchall())
    hung_rows = [kind for (kind,) in con.execute(
        "select error_kind from requests join cells using (cell_id) where cell_key = 'single.c1.r0' "
        "and error_kind is not null").fetchall()]
    from servebench.analysis.report import build_charts
    timelines = json.dumps(build_charts(con, outcome["run_id"])["node_timelines"].to_dict())
    con.close()
    assert '"rule"' in timelines and "stop on a" in timelines and "kill on b" in timelines  # marked on the report

    assert {key for key, (status, *_) in cells.items() if status == "failed"} == \
        {"single.c1.r0", "split.c1.r0", "single.c2.r0"}
    hung = cells["single.c1.r0"]
    assert "the server hung" in hung[1] and "no longer healthy" in hung[1] and "fault stop on a" in hung[1], hung
    assert hung[3] >= 1 and hung_rows and set(hung_rows) == {"hung"}  # the request in flight: an error row 'hung'
    # caught by the health probe: the generator stopped the load well before any request's 20 s timeout
    # (its own clock, not the cell's, which includes the checks after the load on a loaded machine)
    stopped_at = float(re.search(r"the load stopped at ([\d.]+) s", hung[1]).group(1))
    assert stopped_at < 20 - 5, hung[1]
    crashed = cells["split.c1.r0"]
    assert "worker.b -9" in crashed[1] and "fault kill on b after 3 requests" in crashed[1], crashed
    assert crashed[2] >= 3 and crashed[3] >= 1  # killed once 3 had finished: those were answered
    assert cells["split.c2.r0"][0] == "completed"  # restarted, served; a fault that hit nothing costs nothing
    filled = cells["single.c2.r0"]  # restarted, served every request, but under a fault: failed, naming it
    assert filled[2] == 6 and "a fault was injected" in filled[1] and "/dev/shm filled with 16 MiB" in filled[1]
    assert len(requests) == 4 and requests["single.c1.r0"] < 6  # the hung cell's load stopped: the rest never sent
    assert all(n == 6 for key, n in requests.items() if key != "single.c1.r0")  # every other request landed

    by_cell = {key: (action, node, json.loads(hit), error) for key, action, node, hit, error in faults}
    assert by_cell["single.c1.r0"][:2] == ("stop", "a") and len(by_cell["single.c1.r0"][2]) == 1
    assert by_cell["split.c1.r0"][:2] == ("kill", "b") and "--serve-worker" in by_cell["split.c1.r0"][2][0][1]
    assert by_cell["split.c2.r0"][2] == [] and by_cell["split.c2.r0"][3] is None  # matched nothing: said so
    (path, _), (same, removed) = by_cell["single.c2.r0"][2]
    assert path == same and path.startswith("/dev/shm/servebench-fill.") and removed == "removed when the cell ended"


CHAOS_CAMPAIGN = """
name: chaos
provider: {kind: plain, nodes: [{name: a, cpus: "0"}]}
engine: {kind: echo, token_delay_ms: 40}
model: {path: model}
modes: [{name: single}]
load: {clients: [1, 2], requests: 30, input_len: 8, output_len: 8, timeout_s: 5, client: {cpus: "1"}}
validity: {on_invalid: warn}
"""


def test_servebench_chaos_kills_a_running_campaigns_server_and_the_campaign_says_why(tmp_path):
    """`servebench chaos RUN kill --match ...` from outside, while a campaign (its own process) serves:
    the server dies, the campaign fails the cell with the cause, restarts the server, goes on."""
    from tests.support.campaign_process import cells_of, finish, servebench

    echo_campaign_dir(tmp_path, {"campaign.yaml": CHAOS_CAMPAIGN})
    db = str(tmp_path / "w.duckdb")
    run = servebench(tmp_path, "run", "campaign.yaml", "--warehouse", db)

    def first_cell_under_way() -> list:  # its load generator's progress file: the server is up, past its gate
        assert run.poll() is None, run.stdout.read()
        return list((tmp_path / "runs").glob("*/cells/single.c1.r0.progress"))
    run_id = wait_until(first_cell_under_way, "the first cell's load to start", timeout_s=300)[0].parent.parent.name
    code, out = finish(servebench(tmp_path, "chaos", run_id, "kill", "--match=--model-dir", "--warehouse", db))
    assert code == 0 and '"hit": [[' in out, out
    code, out = finish(run)
    assert code != 0 and "partial" in out, out
    cells = {key: status for key, status, _ in cells_of(tmp_path / "w.duckdb")}
    assert sorted(cells.values()) == ["completed", "failed"], cells  # the hit cell; the next on a restarted server
