"""End to end with real Ray and real vLLM: PP=2 across two Ray nodes (simulated on this host with
distinct node keys and loopback addresses of their own), through the Prefect flow.

Asserts the correctness gate passed against the TP=1 reference, the cell landed with exact token
counts, the plugin's cross-node guard kept shared memory out of the pipeline group (it spans the two
nodes; on one host their /dev/shm is shared, so without the guard the group would use it and this
test fails), every process of the cluster announced its node's loopback address, each node had a
Ray temp dir of its own, and that no Ray, vLLM or worker process, listening port or /dev/shm segment
is left afterwards. PP=2 serves compiled graphs (no `enforce_eager`), the reference too: the suite's
one compiled vLLM server.

Each claim is proved once: TP=2 over Ray, with the same guard on its TP group, and a lost Ray node
repaired between cells are tests/e2e/test_e2e_testbed.py's, across real testbed hosts. The fault stays on
TP=2 there: with
PP=2, the lost rank leaves vLLM's API server answering /health while the request in flight hangs
until the load's request timeout (300 s), where TP=2's server fails in seconds.
"""

import io
import re
import time
from pathlib import Path

import psutil
import pytest
from rich.console import Console

from servebench import warehouse
from servebench.processes import shm_entries
from servebench.progress import live
from servebench.providers.this_host import short_tmp_dir
from tests.support.leaks import running_descendants
from tests.support.ray_logs import assert_group_across_nodes

CAMPAIGN = Path(__file__).parents[1] / "campaigns" / "good" / "e2e-ray.yaml"
pytestmark = [pytest.mark.vllm, pytest.mark.nightly(reason=(
    "PP=2 over Ray on two local nodes, compiled; the test command keeps Ray with vLLM across testbed hosts "
    "(TP=2, test_e2e_testbed) and compiled servers (test_e2e_campaign)"))]


MARKS = ("vllm.entrypoints", "ray::", "raylet", "gcs_server", "ray start", "servebench load", "VLLM::")


def leftovers() -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline", "name"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if any(mark in cmdline for mark in MARKS):
            found.append(f"{proc.pid} {cmdline[:100]}")
    return found


def listening() -> dict[int, int | None]:
    """Every listening TCP port and the PID that holds it."""
    return {c.laddr.port: c.pid for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN}


def ours(pid: int | None) -> bool:
    """A listener this test's run may have left: held by one of this process's descendants (not the
    session's Prefect server) or by a Ray or vLLM process; not one of another program on the machine."""
    if pid is None:
        return True   # nobody to tell it by: counted
    try:
        cmdline = " ".join(psutil.Process(pid).cmdline())
    except psutil.NoSuchProcess:
        return False  # gone by now: it holds nothing
    return pid in running_descendants() or any(mark in cmdline for mark in MARKS)


def test_pp2_over_ray(tmp_path, monkeypatch):
    from servebench.flows.campaign import campaign_run
    from tests.support.prefect_session import session_api_url

    monkeypatch.setenv("SERVEBENCH_RUNS", str(tmp_path / "runs"))
    session_api_url()  # the flow reports to the session's Prefect server: up (and listening) before the counts
    test_started = time.time()
    assert leftovers() == [], "Ray or vLLM processes were already running"
    shm_before = shm_entries()
    listening_before = set(listening())
    db = tmp_path / "w.duckdb"
    said = io.StringIO()  # the run's stage lines (plain, as in a CI log)
    with live(Console(file=said)):
        outcome = campaign_run(campaign_file=str(CAMPAIGN), warehouse_path=str(db))
    assert outcome["status"] == "completed", outcome

    con = warehouse.connect(db, read_only=True)
    servers = dict(con.execute("select mode, correctness from servers").fetchall())
    assert servers.pop("reference-tp1") == "reference"
    eager = {mode: "--enforce-eager" in command for mode, command in con.execute("select mode, command from servers")
             .fetchall()}  # PP=2 compiled, so the reference too (it takes only the knobs every mode sets)
    assert eager == {"reference-tp1": False, "pp2-ray": False}, eager
    # float32 makes equal tokens likely, but whether a near-tie flips depends on the CPU's kernels
    # (AMD EPYC vs Intel Xeon): passed or close (vLLM's criterion); a broken shard diverges at once
    assert set(servers) == {"pp2-ray"} and set(servers.values()) <= {"passed", "close"}, servers
    cells = con.execute("select cell_key, status, correctness, client_output_tokens, server_output_tokens "
                        "from cells order by cell_key").fetchall()
    assert cells == [("pp2-ray.c2.r0", "completed", servers["pp2-ray"], 6 * 16, 6 * 16)], cells
    logs = dict(con.execute("select mode, log_path from servers").fetchall())
    con.close()

    # the guard: the pipeline group spans the two nodes, so it must not use /dev/shm; every process
    # of the cluster announced its node's loopback address, never the host's interface
    assert_group_across_nodes(Path(logs["pp2-ray"]).read_text(), "pp", "node1", "127.0.1.1")

    # each node ran with a Ray temp dir of its own (<index>.<attempt>); its logs were kept in the run's ray/.
    # A start attempt that failed (a port taken meanwhile, a busy host) is retried, and said: it adds one
    # attempt (and logs, if it wrote any)
    stages = said.getvalue()
    attempts = {index: 1 + len(re.findall(rf"Ray node {node} attempt \d+: .*starting it again", stages))
                for index, node in (("0", "node0"), ("1", "node1"))}
    kept = {p.name: p for p in (tmp_path / "runs").glob("*/ray/ray-logs/*.*")}
    lasts = {f"{index}.{last}" for index, last in attempts.items()}   # what ran at the end: each with a raylet
    assert lasts <= set(kept) <= {f"{index}.{n}" for index, last in attempts.items() for n in range(1, last + 1)}, \
        (sorted(kept), stages)
    assert all((kept[name] / "raylet.out").exists() for name in lasts), sorted(kept)
    ray_temp = [p for root in {Path(short_tmp_dir()), Path("/tmp")} for p in root.glob("sb-ray-*")
                if p.stat().st_mtime >= test_started]   # under the temp dir the cluster used (/tmp if TMPDIR is long)
    assert not ray_temp, f"Ray temp left: {ray_temp}"

    assert leftovers() == []
    left_listening = {port: pid for port, pid in listening().items() if port not in listening_before and ours(pid)}
    assert left_listening == {}, left_listening
    assert shm_entries() - shm_before == set()
