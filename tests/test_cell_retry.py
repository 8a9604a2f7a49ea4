"""An invalid cell is measured again right away (`validity.retries`), through the real flow with the
test-only echo engine: the load generator's core is busied by a process of higher priority until
the cell's first measurement is over (a real-time spinner on its core), so that measurement is invalid (the generator fell behind
its schedule); the second, on a quiet core, is valid. Both land; the run's verdict is the last's.

It is also the suite's proof that the generator's verdict on itself can fail: starved of its core it
flags its cell (a real-time spinner outranks it whatever the machine's scheduler does with nice
levels, where a nice-19 generator beside spinning processes took 78 s on one machine kind and more than
300 s on another); on its own core it stays valid (tests/test_e2e_load.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest

from servebench import warehouse
from servebench.analysis.run_summary import summarize
from tests.support.campaign_process import run_echo_campaign
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.root]

CAMPAIGN = """
name: retry
provider: {kind: plain, nodes: [{name: a, cpus: "0"}]}
engine: {kind: echo, token_delay_ms: 2}
model: {path: model}
modes: [{name: single}]
load: {rates: [40], requests: 120, arrival: constant, input_len: 4, output_len: 4, client: {cpus: "1", nice: -10}}
"""

# real-time priority: the kernel leaves other tasks on the core 5 % of each second (sched_rt_runtime_us)
SPIN = "import os; os.sched_setaffinity(0, {1}); os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))\n" \
       "while True: pass"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the busy process outranks the generator's nice -10")
def test_a_cell_invalid_because_its_generator_was_starved_is_measured_again(isolated, tmp_path, monkeypatch):
    hog = subprocess.Popen([sys.executable, "-c", SPIN])
    first_attempt = tmp_path / "runs"

    def quiet_once_measured() -> None:
        try:
            wait_until(lambda: list(first_attempt.glob("*/cells/single.rate40.r0.attempt0.json")),
                       "the cell's first measurement set aside", timeout_s=240)
        finally:
            hog.kill()
            hog.wait()

    watcher = threading.Thread(target=quiet_once_measured, daemon=True)
    watcher.start()
    try:
        outcome = run_echo_campaign(tmp_path, isolated, monkeypatch, CAMPAIGN)
    finally:
        hog.kill()
        hog.wait()
        watcher.join(10)
    assert outcome["status"] == "completed", outcome

    con = warehouse.connect(isolated, read_only=True)
    attempts = con.execute("select attempt, superseded, valid, invalid_reasons, result_path from cell_attempts "
                           "order by attempt").fetchall()
    cell = con.execute("select valid, attempts, completed from cells").fetchall()
    summary = summarize(con, outcome["run_id"])
    con.close()
    assert summary.retry_line().startswith("1 of 1 cells measured again") and "measured 2 times" in summary.rows[0][-1]
    assert [(a, s, v) for a, s, v, _, _ in attempts] == [(0, True, False), (1, False, True)], attempts
    assert any("schedule" in reason or "busier" in reason for reason in attempts[0][3]), attempts[0][3]
    assert attempts[0][4].endswith("single.rate40.r0.attempt0.json") and os.path.exists(attempts[0][4])
    assert cell == [(True, 2, 120)]
