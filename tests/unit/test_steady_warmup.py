"""Warm until steady, not for a fixed count.

Pure parts on made-up records (when two windows agree, the cell's concurrency, the bounds); the
phase itself against a real HTTP server that warms up (tests/support/fake_openai_server.py,
behaviour "cold": its first requests slow, later ones not), through `run_load`; and what a cell
lands and the end-of-run table says.
"""

from __future__ import annotations

import asyncio

import pytest

from servebench.load.records import RequestRecord
from servebench.load.steady import SteadyWarmup, is_steady, warm_until_steady, warmup_concurrency

SPEC = SteadyWarmup(window=3, tolerance=0.1, max_s=30, max_requests=40)


def record(index: int, ttft_ms: float, tpot_ms: float = 10.0, tokens: int = 5) -> RequestRecord:
    sent = float(index)
    first = sent + ttft_ms / 1000
    return RequestRecord(index=index, warmup=True, sent_s=sent, first_token_s=first,
                         last_token_s=first + tpot_ms * (tokens - 1) / 1000, output_tokens=tokens)


def test_two_windows_whose_medians_agree_are_steady_and_a_drift_is_not():
    flat = [record(i, 100 + (i % 2)) for i in range(6)]
    assert is_steady(flat, SPEC)
    assert not is_steady(flat[:5], SPEC)                                     # fewer than two windows
    falling = [record(i, 300 - 30 * i) for i in range(6)]                  # TTFT still coming down
    assert not is_steady(falling, SPEC)
    tpot_drift = [record(i, 100, tpot_ms=20 - 2 * i) for i in range(6)]    # TTFT flat, TPOT not
    assert not is_steady(tpot_drift, SPEC)
    one_token = [record(i, 100, tokens=1) for i in range(6)]               # no TPOT at all: TTFT decides
    assert is_steady(one_token, SPEC)
    failed = [RequestRecord(index=i, warmup=True, error_kind="http") for i in range(6)]
    assert not is_steady(failed, SPEC)                                       # errors are not steadiness


def test_the_warm_up_runs_at_the_cells_concurrency():
    assert warmup_concurrency(clients=4, rate=None, first_e2el_s=None) == 4
    assert warmup_concurrency(clients=None, rate=8.0, first_e2el_s=0.5) == 4    # Little's law: 8/s x 0.5 s
    assert warmup_concurrency(clients=None, rate=0.5, first_e2el_s=0.1) == 1
    assert warmup_concurrency(clients=None, rate=1000.0, first_e2el_s=5.0) == 64  # bounded
    assert warmup_concurrency(clients=None, rate=2.0, first_e2el_s=None) == 1      # the first request failed


def run_phase(latency_of, spec: SteadyWarmup = SPEC, clients: int | None = 1):
    sent: list[int] = []

    async def send(index: int) -> RequestRecord:
        sent.append(index)
        await asyncio.sleep(0)
        return record(index, latency_of(index))

    return asyncio.run(warm_until_steady(spec, clients, None, send)), sent


def test_the_phase_ends_once_the_server_steadies_and_says_so_when_it_never_does():
    outcome, sent = run_phase(lambda i: max(100.0, 400 - 40 * i))   # slow first, flat from request 8 on
    assert outcome.steady and 7 + 2 * SPEC.window <= outcome.requests <= 8 + 2 * SPEC.window, outcome  # medians
    assert "steady after" in outcome.why and abs(outcome.ttft_medians_ms[1] - 100) < 1e-6
    outcome, sent = run_phase(lambda i: 1000.0 * 0.9 ** i)         # keeps getting faster: never steady
    assert not outcome.steady and outcome.requests == SPEC.max_requests == len(sent)
    assert outcome.why.startswith(f"not steady after {SPEC.max_requests} requests"), outcome.why


def test_a_cold_server_is_warmed_before_the_measurement_and_the_cell_lands_what_it_took(tmp_path):
    """Against a real server whose first 10 requests are slow (up to 300 ms before the first token):
    the warm-up ends after them, the measurement sees only the warm server, and a fixed warm-up of
    2 requests would have measured the slow ones (the control)."""
    from servebench.load.config import LoadConfig, to_argv
    from servebench.load.runner import run_load
    from tests.support.fake_openai_server import FakeServer

    base = dict(model="m", clients=2, requests=8, input_len=4, output_len=4, vocab_size=100, timeout_s=10.0)
    with FakeServer("cold", service_s=0.3, cold_requests=10) as server:
        control = run_load(LoadConfig(base_url=server.url, warmup=2, **base))["summary"]
    assert control["ttft_ms"]["p99"] > 100, control["ttft_ms"]   # the cold requests were measured

    steady = SteadyWarmup(window=3, tolerance=0.2, max_s=30)
    with FakeServer("cold", service_s=0.3, cold_requests=10) as server:
        config = LoadConfig(base_url=server.url, warm_until_steady=steady, **base)
        result = run_load(config)
        sent = len(server.requests)
    warmed = result["summary"]["warm_until_steady"]
    assert warmed["steady"] and warmed["requests"] >= 10 and warmed["concurrency"] == 2, warmed
    assert sent == warmed["requests"] + 8 and len(result["requests"]) == 8   # warm-up rows are not the cell's
    assert result["summary"]["ttft_ms"]["p99"] < 100, result["summary"]["ttft_ms"]
    assert "--warm-until-steady" in to_argv(config)   # `servebench load` reproduces it too


def test_the_flag_parses_and_a_bad_value_is_named():
    import argparse

    from servebench.cli.load import _steady_flag

    assert _steady_flag("{}") == SteadyWarmup()
    assert _steady_flag("{window: 6, max_s: 20}").window == 6
    with pytest.raises(argparse.ArgumentTypeError, match="window"):
        _steady_flag("{window: 1}")


def test_a_cell_lands_its_warm_up_and_an_unsteady_one_is_said_in_the_run_table(tmp_path):
    from servebench import warehouse
    from servebench.analysis.run_summary import summarize
    from servebench.campaign.loading import parse_campaign
    from servebench.config.sweep import expand
    from servebench.warehouse import landing
    from tests.support.small_campaign import small_campaign_text

    text = small_campaign_text("{clients: [1], requests: 2, warm_until_steady: {max_s: 60}}")
    campaign = parse_campaign(text)
    assert campaign.load.warm_until_steady == SteadyWarmup(max_s=60)
    assert "warm_until_steady" not in parse_campaign(small_campaign_text()).normalized()["load"]  # old hashes stay
    (cell,) = expand(campaign)
    warmed = {"steady": False, "requests": 200, "seconds": 60.2, "concurrency": 1, "ttft_medians_ms": [120.0, 90.0],
              "tpot_medians_ms": [9.0, 8.0], "why": "not steady after 60 s (200 requests, 200 answered)"}
    summary = {"completed": 2, "failed": 0, "output_throughput": 10.0, "valid": True, "invalid_reasons": [],
               "warm_until_steady": warmed}
    con = warehouse.connect(tmp_path / "w.duckdb")
    landing.insert_run(con, "r", landing.RunRecord(
        campaign="t", spec_hash=campaign.spec_hash(), spec_text=text, spec_normalized=campaign.normalized(),
        campaign_file="t.yaml", run_dir=tmp_path))
    landing.land_cell(con, "r", landing.CellRecord(
        cell=cell, input_len=8, output_len=4, status="completed",
        measured=landing.CellMeasurement(result={"t0": {"monotonic": 0.0}, "summary": summary, "requests": []})))
    row = con.execute("select warmup_steady, warmup_s, warmup_phase_requests from cells").fetchone()
    table = summarize(con, "r")
    con.close()
    assert row == (False, 60.2, 200)
    notes = {r[0]: r[-1] for r in table.rows}
    assert "warm-up: not steady after 60 s" in notes[cell.key], notes
