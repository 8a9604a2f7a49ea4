"""The shipped campaigns/kv-saturation.yaml through the real flow: llama.cpp
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

CAMPAIGN = Path(__file__).parents[2] / "campaigns" / "kv-saturation.yaml"
pytestmark = [pytest.mark.llamacpp, pytest.mark.nightly(reason=(
    "knees measured with llama.cpp over RPC; the test command keeps llama.cpp RPC across testbed hosts "
    "(test_llamacpp_testbed) and the saturation arithmetic (test_saturation_sessions)"))]


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


SESSIONS_CAMPAIGN = Path(__file__).parents[2] / "campaigns" / "kv-saturation-sessions.yaml"


def test_sessions_saturate_the_kv_cache_where_their_last_turns_fill_it(isolated, tmp_path):
    """The shipped sessions campaign cut to one capacity (1024 tokens) and 1-3 sessions at once. A
    session of 2 turns holds 384 tokens at its longest, one of 3 turns 576: the theory (from the
    workload block, not the cell's input_len/output_len) is 2.67 and 1.78 sessions, and the measured knees
    are 2 and 1 (the full campaign, both engines: docs/llamacpp.md)."""
    def lighter(data: dict) -> None:
        data["knobs"]["ctx_size"] = [1024]
        data["load"]["clients"] = [1, 2, 3]

    outcome = run_shipped_campaign(SESSIONS_CAMPAIGN, tmp_path, isolated, lighter)
    assert outcome["status"] == "completed", outcome
    con = warehouse.connect(isolated, read_only=True)
    found = {s.series: s for s in run_saturation(con, outcome["run_id"])}
    turns = dict(con.execute("select c.workload_name, max(r.expected_input_tokens + r.requested_output_tokens) "
                             "from requests r join cells c using (cell_id) group by all").fetchall())
    con.close()
    print({series: (s.theoretical_clients, s.measured_knee) for series, s in found.items()})
    assert turns == {"turns2": 384, "turns3": 576}                 # what the sessions asked of the cache at most
    assert set(found) == {"rpc2-cs1024.turns2", "rpc2-cs1024.turns3"}
    for series, per_session, knee in (("rpc2-cs1024.turns2", 384, 2), ("rpc2-cs1024.turns3", 576, 1)):
        s = found[series]
        assert (s.kv_capacity_tokens, s.tokens_per_sequence, s.workload_kind) == (1024, per_session, "sessions")
        assert s.theoretical_clients == pytest.approx(1024 / per_session)
        assert (s.measured_knee, s.first_miss_clients) == (knee, knee + 1), s   # the knee at floor(theory)
