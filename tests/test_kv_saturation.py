"""Issue 16, seed 002: the shipped campaigns/kv-saturation.yaml through the real flow: llama.cpp
built from the llama-cpp-python sdist (once: later tests and runs reuse it by key), the tiny GGUF
served over two RPC workers with a unified KV pool, closed-loop clients 1-10 at two KV capacities.

Asserted: the measured knee of each capacity lies within one client of the theoretical saturation
point (capacity / (prompt + output tokens)), so doubling the capacity moves the knee with it; no
KV miss below the knee and misses past it; throughput past the knee far below the peak; the KV
capacity, the peak KV usage and the build's CMake flags and commit recorded; the report's charts.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servebench import warehouse
from servebench.analysis.saturation import run_saturation
from tests.support.campaign_process import run_shipped_campaign

CAMPAIGN = Path(__file__).parent.parent / "campaigns" / "kv-saturation.yaml"
pytestmark = [pytest.mark.e2e, pytest.mark.llamacpp]


def test_the_knee_follows_the_kv_capacity(isolated, tmp_path):
    outcome = run_shipped_campaign(CAMPAIGN, tmp_path, isolated,
                                   lambda data: data["load"].update(requests=30))  # half the shipped cells' requests
    assert outcome["status"] == "completed", outcome

    con = warehouse.connect(isolated, read_only=True)
    knees = {s.mode: s for s in run_saturation(con, outcome["run_id"])}
    kv = {(r["mode"], r["clients"]): r for r in warehouse.rows(con, "select * from cell_kv")}
    servers = dict(con.execute("select mode, correctness from servers").fetchall())
    build = warehouse.rows(con, "select engine, inputs, tool_version from builds")[0]
    con.close()
    print({mode: (s.theoretical_clients, s.measured_knee, s.mean_normalized_throughput_past_knee)
           for mode, s in knees.items()})

    assert set(knees) == {"rpc2-cs512", "rpc2-cs1024"}
    for mode, capacity in (("rpc2-cs512", 512), ("rpc2-cs1024", 1024)):
        saturation = knees[mode]
        assert saturation.kv_capacity_tokens == capacity and saturation.theoretical_clients == capacity / 128
        assert saturation.measured_knee is not None and abs(saturation.knee_gap) <= 1, saturation
        below = [kv[(mode, c)] for c in range(1, saturation.measured_knee + 1)]
        assert all(r["kv_misses"] == 0 for r in below), below
        assert all(kv[(mode, c)]["kv_misses"] > 0 for c in range(saturation.first_miss_clients, 11))
        assert saturation.mean_normalized_throughput_past_knee < 0.5, saturation   # it collapses past the knee
        assert 0.3 < max(r["kv_usage_peak"] or 0 for r in below) <= 1.0, below
    assert knees["rpc2-cs1024"].measured_knee > knees["rpc2-cs512"].measured_knee  # the capacity moved it
    assert set(servers.values()) == {"reference", "passed"}, servers   # RPC answers = single process
    assert build["engine"] == "llamacpp" and "-DGGML_RPC=ON" in json.loads(build["inputs"])["options"]
    assert "commit" in build["tool_version"] and "built with" in build["tool_version"], build

    report = (Path(outcome["report"])).read_text()
    for chart in ("Cache-miss probability vs clients", "KV-cache usage vs clients", "Normalized throughput"):
        assert chart in report, chart
