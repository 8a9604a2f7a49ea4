"""Ctrl-C during a real campaign: the server is stopped, finished cells stay in the warehouse.

Runs `servebench run` as a user would, in its own session, and sends SIGINT to the whole
process group after the first cell's result is written, as a terminal does.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from servebench import warehouse
from servebench.processes import shm_entries
from tests.support.processes import engine_processes
from tests.support.waiting import wait_until

CAMPAIGN = Path(__file__).parent / "campaigns" / "good" / "e2e.yaml"
pytestmark = [pytest.mark.e2e, pytest.mark.vllm]


def test_ctrl_c_stops_servers_and_keeps_measured_cells(tmp_path):
    db = tmp_path / "w.duckdb"
    runs = tmp_path / "runs"
    env = {**os.environ, "SERVEBENCH_RUNS": str(runs), "SERVEBENCH_WAREHOUSE": str(db)}
    shm_before = shm_entries()
    proc = subprocess.Popen([sys.executable, "-m", "servebench", "run", str(CAMPAIGN)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    def a_cell_measured() -> list:
        assert proc.poll() is None, proc.stdout.read()
        return list(runs.glob("*/cells/*.json"))
    try:
        wait_until(a_cell_measured, "the first cell's result", timeout_s=900, poll_s=0.5)
        os.killpg(proc.pid, signal.SIGINT)
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, output
    assert "interrupted" in output

    con = warehouse.connect(db, read_only=True)
    status, error = con.execute("select status, error from runs").fetchone()
    completed = con.execute("select count(*) from cells where status = 'completed'").fetchone()[0]
    rows = con.execute("select count(*) from requests").fetchone()[0]
    stopped = con.execute("select stopped_at from servers").fetchone()[0]
    con.close()
    assert status == "interrupted" and "interrupted" in error
    assert completed >= 1 and rows >= 8
    assert stopped is not None
    assert engine_processes() == []
    assert shm_entries() - shm_before == set()
