"""The load generator's verdict on itself can fail: starved of CPU by the server it measures,
its open-loop cell is flagged invalid; on a CPU of its own, the same cell is valid.

The server is tests/support/busy_engine_server.py on CPU 0 (a real HTTP server plus processes that
keep the core busy, as an engine's spinning OpenMP threads do). The generator runs as
`servebench load` with `--cpus`, exactly as a campaign runs it. (A real vLLM server near its
capacity with the generator on its own CPU: tests/test_e2e_load.py.)

The server stays in the test's session on purpose: with the kernel's autogroup scheduling
(sched_autogroup_enabled=1, as here) each session shares the CPU as one group, so a server
in a session of its own could never take more than half of the generator's core, and the
generator would keep its schedule. Measured here: a lowest-priority generator on the busy
core lags 1.5-1.9 s at p99 (limit 10 ms); on its own core 1.2-1.5 ms.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.waiting import wait_until

ROOT = Path(__file__).parent.parent
CELL = ["--rate", "20", "--requests", "16", "--warmup", "2", "--input-len", "16", "--output-len", "16",
        "--token-counter", "", "--seed", "5"]

# e2e: a stand-in engine keeps CPU 0 busy while the real generator measures for a minute and more (78 s here)
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2,
                                                  reason="needs 2 CPUs: one for the server, one for the generator")]


@pytest.fixture
def busy_server(tmp_path):
    port_file = tmp_path / "port"
    server = subprocess.Popen([sys.executable, "-m", "tests.support.busy_engine_server", "--cpus", "0", "--spinners", "4",
                               "--port-file", str(port_file)], cwd=ROOT)

    def port() -> str:
        assert server.poll() is None, "the busy server exited"
        return port_file.read_text() if port_file.exists() else ""
    try:
        yield f"http://127.0.0.1:{wait_until(port, 'the busy server to write its port', timeout_s=30)}"
    finally:
        server.terminate()
        server.wait(10)
    assert server.returncode is not None


def load(url: str, out: Path, *placement: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "servebench", "load", "--base-url", url, "--model", "m",
                           *CELL, "--output-json", str(out), "--quiet", *placement],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)  # starved: ~100 s here with 40 requests
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())["summary"]


@pytest.mark.skipif(os.environ.get("SERVEBENCH_STARVED_GENERATOR") != "1", reason=(
    "the starved generator (nice 19 beside a busy stand-in on CPU 0) did not finish 16 requests within 300 s "
    "twice on 2026-11-26 (a 2-core Intel Xeon; 78-123 s on AMD EPYC before): not yet known whether this is a "
    "regression or the machine kind; SERVEBENCH_STARVED_GENERATOR=1 runs it"))
def test_a_starved_generator_flags_its_cell_and_one_on_its_own_cpu_does_not(busy_server, tmp_path):
    own = load(busy_server, tmp_path / "own.json", "--cpus", "1", "--nice", "-10")
    # forced onto the server's core at the lowest priority: it runs when the server lets it
    starved = load(busy_server, tmp_path / "starved.json", "--cpus", "0", "--nice", "19")
    print(f"schedule lag p99: own CPU {own['schedule_lag_ms']['p99']:.2f} ms, "
          f"server's CPU {starved['schedule_lag_ms']['p99']:.2f} ms")
    assert own["valid"], own["invalid_reasons"]
    assert own["client"]["cpus"] == "1"
    assert starved["client"]["cpus"] == "0"
    assert not starved["valid"]
    assert any("schedule lag" in reason for reason in starved["invalid_reasons"]), starved["invalid_reasons"]
