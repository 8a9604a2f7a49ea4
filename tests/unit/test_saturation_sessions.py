"""The theoretical KV saturation point of a multi-turn sessions workload, from the
workload block (a session holds its whole conversation at its last turn), not from the cell's
input_len + output_len; one saturation series per mode and workload. The measured knees of
campaigns/kv-saturation-sessions*.yaml on both engines are in docs/llamacpp.md."""

from __future__ import annotations

import json

import pytest

from servebench import warehouse
from servebench.analysis.report import saturation_series
from servebench.analysis.saturation import (
    run_saturation,
    saturation_by_mode,
    session_peak_tokens,
    session_turn_tokens,
    tokens_per_client,
)
from servebench.load.workload import Workload
from servebench.load.workload_spec import workload_from_data

SESSIONS = {"kind": "sessions", "sessions": 8, "turns": 3, "first_input": 32, "turn_input": 32, "output": 160}


def test_a_turns_kv_tokens_are_what_the_generator_sends_and_asks_for():
    """The theory's per-turn context against the prompts the load generator actually builds."""
    spec = workload_from_data({**SESSIONS, "first_input": 40, "turn_input": 24, "output": 100, "turns": 4})
    workload = Workload(endpoint="completions", input_len=64, output_len=32, vocab_size=1024, data_seed=7, spec=spec)
    for session in range(2):
        items = [workload.item(session * 4 + turn) for turn in range(4)]
        assert [len(i.prompt) + i.output_len for i in items] == [session_turn_tokens(40, 24, 100, t) for t in range(4)]
    assert session_peak_tokens(40, 24, 100, 4) == 40 + 3 * (24 + 100) + 100 == max(len(i.prompt) + i.output_len
                                                                                 for i in items)


def test_tokens_a_client_holds_come_from_the_workload_block_as_landed():
    landed = workload_from_data(SESSIONS).identity()   # cells.workload: every field, lengths as {dist: fixed}
    assert tokens_per_client(landed, 64, 32) == 32 + 2 * (32 + 160) + 160 == 576   # not the landed 64 + 32
    assert tokens_per_client({**SESSIONS, "turns": 2}, 64, 32) == 384
    assert tokens_per_client(None, 32, 96) == 128                                 # fixed lengths, as before
    fixed_output = {"kind": "synthetic", "input": 100, "output": {"dist": "fixed", "value": 28}}
    assert tokens_per_client(fixed_output, 64, 32) == 128
    drawn = {**SESSIONS, "output": {"dist": "uniform", "min": 16, "max": 160}}
    assert tokens_per_client(drawn, 64, 32) is None                               # no one peak: no theory
    assert tokens_per_client({"kind": "shared-prefix", "groups": 2, "prefix_len": 256}, 64, 32) is None


def test_saturation_is_per_mode_and_workload_with_each_series_own_theory_and_throughput():
    def cell(workload: dict, name: str, clients: int, misses_from: int, throughput: float) -> dict:
        return {"mode": "m", "clients": clients, "kv_capacity_tokens": 2048, "input_len": 64, "output_len": 32,
                "cache_miss_probability": 0.2 if clients >= misses_from else 0.0, "normalized_throughput": 0.5,
                "output_throughput": throughput, "workload": json.dumps(workload), "workload_name": name}

    cells = ([cell({**SESSIONS, "turns": 2}, "turns2", c, 6, 100.0 * c) for c in range(1, 9)] +
             [cell(SESSIONS, "turns3", c, 4, 10.0 * c) for c in range(1, 9)])
    two, three = saturation_by_mode(cells)
    assert (two.series, two.tokens_per_sequence, two.measured_knee, two.workload_kind) == (
        "m.turns2", 384, 5, "sessions")
    assert two.theoretical_clients == pytest.approx(2048 / 384) and two.knee_gap == pytest.approx(5 - 2048 / 384)
    assert (three.series, three.tokens_per_sequence, three.measured_knee) == ("m.turns3", 576, 3)
    assert three.theoretical_clients == pytest.approx(2048 / 576)
    assert three.peak_normalized_throughput_past_knee == pytest.approx(1.0)   # against its own best, not turns2's
    assert three.mean_normalized_throughput_past_knee == pytest.approx(mean_of(4, 8) / 8)
    drawn = saturation_by_mode([{**c, "workload": json.dumps({**SESSIONS, "output": {"dist": "uniform", "min": 1,
                                                                                     "max": 9}})} for c in cells[8:]])
    assert drawn[0].theoretical_clients is None and drawn[0].measured_knee == 3
    labels = {r["mode"] for r in saturation_series(cells)}
    assert labels == {"m.turns2", "m.turns3"}     # the report's lines are the same series


def mean_of(low: int, high: int) -> float:
    return sum(range(low, high + 1)) / (high - low + 1)


def test_run_saturation_reads_the_workload_from_the_warehouse(tmp_path):
    """The query's columns and the landed JSON: a sessions cell's theory uses its workload, not its
    input_len/output_len (the schema's defaults, 64 and 32, landed beside a workload)."""
    con = warehouse.connect(tmp_path / "w.duckdb")
    con.execute("insert into servers (run_id, mode, command, status, kv_capacity_tokens) values "
                "('r', 'rpc2', [], 'ready', 1024)")
    for clients in (1, 2, 3):
        con.execute("""insert into cells (run_id, cell_id, cell_key, mode, tp, pp, executor, load_kind, clients,
                       "repeat", input_len, output_len, seed, status, completed, t0_monotonic, t_end_monotonic,
                       kv_failures, output_throughput, workload, workload_name) values ('r', ?, ?, 'rpc2', 1, 1,
                       'rpc', 'closed', ?, 0, 64, 32, 0, 'completed', 16, ?, ?, ?, ?, ?, 'turns2')""",
                    [f"r/rpc2.turns2.c{clients}.r0", f"rpc2.turns2.c{clients}.r0", clients, 100 * clients,
                     100 * clients + 9, 0 if clients < 3 else 40, 50.0 * clients,
                     workload_from_data({**SESSIONS, "turns": 2}).identity()])
        for t, steps in ((100 * clients + 1, 0), (100 * clients + 8, 400)):
            con.execute("insert into server_samples (run_id, mode, t_mono, t_wall, kv_tokens, decode_steps_total) "
                        "values ('r', 'rpc2', ?, ?, 300, ?)", [t, t, steps])
    (found,) = run_saturation(con, "r")
    con.close()
    assert (found.series, found.tokens_per_sequence, found.measured_knee, found.first_miss_clients) == \
        ("rpc2.turns2", 384, 2, 3)
    assert found.theoretical_clients == pytest.approx(1024 / 384)


def test_the_cell_saturation_view_gives_no_point_from_the_lengths_a_workload_cell_did_not_send(tmp_path):
    con = warehouse.connect(tmp_path / "w.duckdb")
    con.execute("insert into servers (run_id, mode, command, status, kv_capacity_tokens) values "
                "('r', 'm', [], 'ready', 1024)")
    for key, workload in (("m.c4.r0", None), ("m.turns2.c4.r0", workload_from_data(SESSIONS).identity())):
        con.execute("""insert into cells (run_id, cell_id, cell_key, mode, tp, pp, executor, load_kind, clients,
                       "repeat", input_len, output_len, seed, status, workload) values ('r', ?, ?, 'm', 1, 1, 'x',
                       'closed', 4, 0, 32, 96, 0, 'completed', ?)""", [f"r/{key}", key, workload])
    found = dict(con.execute("select cell_key, saturation_clients from cell_saturation").fetchall())
    con.close()
    assert found == {"m.c4.r0": 8.0, "m.turns2.c4.r0": None}


def test_rare_misses_pass_the_default_threshold_and_a_threshold_of_zero_finds_the_first():
    """vLLM under long answers preempts a few sequences per thousand engine steps past the point."""
    cells = [{"mode": "tp1", "clients": c, "kv_capacity_tokens": 1024,
              "cache_miss_probability": 0.004 if c > 2 else 0.0, "normalized_throughput": 1.0,
              "workload": json.dumps({**SESSIONS, "turns": 2}), "workload_name": "t2"}
             for c in range(1, 9)]
    (default,) = saturation_by_mode(cells)
    (any_miss,) = saturation_by_mode(cells, threshold=0.0)
    assert (default.measured_knee, default.first_miss_clients) == (None, None)
    assert (any_miss.measured_knee, any_miss.first_miss_clients) == (2, 3)
