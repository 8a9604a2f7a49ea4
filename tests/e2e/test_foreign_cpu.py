"""A cell whose server's core was taken by another process is invalid, naming the node, the core, the
share taken and the process; a cell beside it without one stays valid. Through the real flow with the
test-only echo engine on core 0 and the load generator on core 1: once the first cell has started
sending, a plain Python spin loop (no special priority, bounded in time) runs on core 0 until that
cell's result is written; the node sampler's tick counts (servebench/telemetry/node_sampler.py,
`CpuAccount`) over the cell's window say who used the core."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

from servebench import warehouse
from tests.support.campaign_process import run_echo_campaign
from tests.support.waiting import wait_until

CAMPAIGN = """
name: foreign
provider: {kind: plain, nodes: [{name: a, cpus: "0"}]}
engine: {kind: echo, token_delay_ms: 5}
model: {path: model}
modes: [{name: single}]
load: {clients: [1, 2], requests: 80, input_len: 4, output_len: 8, client: {cpus: "1"}}
validity: {on_invalid: warn, retries: 0}
"""

# bounded: it spins 1.5 s of the first cell (of about 3.5 s), or less if that cell's result is written first.
# The sampler reads other users' processes once a second (SCAN_S), so the time a foreign process ran is counted
# at the next scan: a spinner running to the cell's very end could be counted in the next cell's window.
SPIN = """import glob, os, sys, time
os.sched_setaffinity(0, {0})
end = time.monotonic() + 1.5
while time.monotonic() < end and not glob.glob(sys.argv[1]):
    stop = time.monotonic() + 0.01
    while time.monotonic() < stop:
        pass
"""


def test_a_foreign_process_on_the_servers_core_makes_its_cell_invalid_and_a_clean_cell_stays_valid(
        isolated, tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    spinner: list[int] = []
    failed: list[BaseException] = []

    def stop_spinner() -> None:
        for pid in spinner:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def spin_during_the_first_cell() -> None:
        try:
            wait_until(lambda: next(runs.glob("*/cells/single.c1.r0.progress"), None),
                       "the first cell to start sending", timeout_s=240, poll_s=0.02)
            # started by a shell that exits at once: another user's process is no child of the orchestrator
            # (whose own process tree the sampler counts as servebench's), so neither is this one
            result = str(runs / "*" / "cells" / "single.c1.r0.json")
            started = subprocess.run(["sh", "-c", f'{sys.executable} -c "$1" "$2" >/dev/null 2>&1 & echo $!', "sh",
                                      SPIN, result],
                                     capture_output=True, text=True, check=True)
            spinner.append(int(started.stdout.split()[0]))
            wait_until(lambda: next(runs.glob("*/cells/single.c1.r0.json"), None),
                       "the first cell's result", timeout_s=120, poll_s=0.05)
        except BaseException as exc:  # the test's failure, reported by the test's own thread
            failed.append(exc)
        finally:
            stop_spinner()

    watcher = threading.Thread(target=spin_during_the_first_cell, daemon=True)
    watcher.start()
    try:
        outcome = run_echo_campaign(tmp_path, isolated, monkeypatch, CAMPAIGN)
    finally:
        watcher.join(30)
        stop_spinner()
    assert not failed, failed
    assert outcome["status"] == "completed", outcome
    assert spinner, "the spinner never started"
    pid = spinner[0]

    con = warehouse.connect(isolated, read_only=True)
    rows = con.execute("select cell_key, valid, invalid_reasons, foreign_cpu_share, server_cpu_share, node_cpu "
                       "from cells order by cell_key").fetchall()
    con.close()
    by_key = {row[0]: row for row in rows}
    _, valid, reasons, share, server_share, nodes = by_key["single.c1.r0"]
    assert valid is False and share > 0.1, by_key
    cause = next(r for r in reasons if "other processes took" in r)
    # the spinner among the busiest named (on a machine shared with others' work, not always the first)
    assert "node a" in cause and "cores 0" in cause and f"pid {pid} (python" in cause, cause
    assert json.loads(nodes)[0]["cores"] == "0"

    _, clean_valid, clean_reasons, clean_share, _, clean_nodes = by_key["single.c2.r0"]
    assert clean_share is not None and f"pid {pid} " not in (clean_nodes or ""), clean_nodes
    # valid unless someone else's process (not the test's) took core 0 meanwhile, and then saying so
    assert clean_valid == (clean_share <= 0.1), (clean_share, clean_reasons)
    print(f"spinner cell: foreign {share:.3f}, server {server_share:.3f}; clean cell: foreign {clean_share:.3f}")
