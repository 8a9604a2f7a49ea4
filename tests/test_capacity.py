"""Issue 18: the capacity search (pure), on models of a server's p99 latency against the offered
rate whose SLO capacity is known: a hockey stick, an M/M/1-like curve, an exponential wall."""

from __future__ import annotations

import json
import math

import pytest

from servebench.analysis.capacity import SearchSettings, judge, observed_from_summary, parse_slo, search_capacity
from tests.support.campaign_process import CAPACITY_CAMPAIGN

SLO = {"ttft_p99_ms": 200.0}
SHAPES = {  # p99 TTFT (ms) at rate r for a server of capacity c, and the rate where it reaches 200 ms
    "hockey": (lambda r, c: 50 + 2000 * max(0.0, r - c) / c, lambda c: c * 1.075),
    "mm1": (lambda r, c: 50 / (1 - min(r / (1.3 * c), 0.9999)), lambda c: 1.3 * c * 0.75),
    "wall": (lambda r, c: 50 * math.exp(max(0.0, r - c) / (0.05 * c)), lambda c: c * (1 + 0.05 * math.log(4))),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("capacity", [0.45, 1.0, 2.5, 4.0, 7.0])
def test_lands_within_five_percent_in_eight_probes_when_the_start_is_within_range(shape, capacity):
    latency, true = SHAPES[shape]
    result = search_capacity(lambda r: judge(r, {"ttft_p99_ms": latency(r, capacity)}, SLO), SearchSettings(start=1))
    assert result.converged and len(result.probes) <= 8, result
    assert 0.95 * true(capacity) <= result.capacity <= true(capacity) * 1.000001, result
    assert all(p.met == (latency(p.rate, capacity) <= 200) for p in result.probes)  # every verdict measured


def test_the_most_clients_is_an_integer_search():
    result = search_capacity(lambda n: judge(n, {"ttft_p99_ms": 40.0 * n}, SLO), SearchSettings(start=1, integer=True))
    assert (result.capacity, result.upper, result.converged) == (5, 6, True)
    assert [p.rate for p in result.probes] == [1, 2, 4, 8, 6, 5]


def test_an_invalid_probe_misses_and_nothing_met_is_said():
    assert not judge(3.0, {"ttft_p99_ms": 10.0}, SLO, valid=False).met
    assert not judge(3.0, {"ttft_p99_ms": None}, SLO).met  # no request completed
    result = search_capacity(lambda r: judge(r, {"ttft_p99_ms": 500.0}, SLO),
                             SearchSettings(start=1, min_value=0.1, max_probes=16))
    assert result.capacity is None and "lowest point" in result.why


def test_slo_keys_are_metric_percentile_ms_and_read_from_a_summary():
    assert parse_slo({"ttft_p99_ms": 500, "tpot_p50_ms": 50}) == {"ttft_p99_ms": 500, "tpot_p50_ms": 50}
    with pytest.raises(ValueError, match="METRIC_PCT_ms"):
        parse_slo({"ttft_p999": 1})
    summary = {"ttft_ms": {"p99": 120.0}, "tpot_ms": {"p50": 20.0}}
    assert observed_from_summary(summary, {"ttft_p99_ms": 1, "tpot_p50_ms": 1}) == {"ttft_p99_ms": 120.0,
                                                                                      "tpot_p50_ms": 20.0}


def test_a_queueing_server_of_known_capacity_is_found_within_five_percent_in_eight_probes():
    """A real HTTP server (tests/support/fake_openai_server.py, behaviour "queue"): one engine,
    200 ms of prefill per request, first come first served: 5 req/s (HTTP's own ~1 ms per request
    is under 1 % of that). At a constant rate r above it, the k-th of N requests waits
    (k - 1)(0.2 - 1/r) s more, so a probe's p99 TTFT (linear interpolation, position 0.99 (N - 1))
    reaches the 600 ms limit at 1/r* = 0.2 - 0.4 / (0.99 (N - 1)): the SLO's true capacity."""
    from servebench.cli.capacity import find_capacity
    from servebench.load.config import LoadConfig
    from tests.support.fake_openai_server import FakeServer

    requests, service_s, limit_s = 20, 0.2, 0.6
    true = 1 / (service_s - (limit_s - service_s) / (0.99 * (requests - 1)))
    with FakeServer("queue", service_s=service_s) as server:
        base = LoadConfig(base_url=server.url, model="m", rate=1.0, arrival="constant", requests=requests,
                          input_len=4, output_len=4, vocab_size=100, timeout_s=10.0, seed=1)
        said: list[str] = []
        result = find_capacity(base, {"ttft_p99_ms": limit_s * 1000}, SearchSettings(start=2), say=said.append)
    assert len(result.probes) <= 8 and result.converged, said
    assert abs(result.capacity - true) / true <= 0.05, (result.capacity, true, said)
    assert all(p.valid for p in result.probes), said  # the generator kept its schedule: verdicts are the server's
    print(f"capacity {result.capacity:g} req/s (true {true:.3f}) in {len(result.probes)} probes: " + "; ".join(said))


CAMPAIGN = CAPACITY_CAMPAIGN


@pytest.mark.e2e
def test_a_campaign_searches_each_modes_capacity_and_lands_every_probe_as_a_cell(isolated, tmp_path, monkeypatch):
    """Through the real flow (the test-only echo engine with one 100 ms prefill engine): after the
    mode's load point, the search's probes run as cells `single.cap.rate<r>.r0`; each lands with
    `search_probe` and `slo_met`, and `capacity` has the highest rate that met the SLO."""
    from servebench import warehouse
    from tests.support.campaign_process import run_echo_campaign

    outcome = run_echo_campaign(tmp_path, isolated, monkeypatch, CAMPAIGN)
    con = warehouse.connect(isolated, read_only=True)
    capacity, upper, probes, converged, probe_cells = con.execute(
        "select capacity, upper, probes, converged, probe_cells from capacity where mode = 'single'").fetchone()
    cells = {key: (rate, probe, met, n) for key, rate, probe, met, n in con.execute(
        "select cell_key, rate, search_probe, slo_met, completed + failed from cells").fetchall()}
    con.close()
    assert outcome["status"] == "completed", outcome
    assert cells.pop("single.rate1.r0") == (1.0, False, True, 20)  # the campaign's own point, within the SLO
    assert sorted(cells) == sorted(json.loads(probe_cells)) and len(cells) == probes <= 8 and converged
    assert all(probe and n == 20 and met == (rate <= capacity) for rate, probe, met, n in cells.values()), cells
    assert 8 <= capacity < upper <= 14, (capacity, upper)  # 10 req/s of prefill; the 400 ms p99 allows a little more
    print(f"capacity {capacity:g} req/s, missed at {upper:g}, {probes} probes: {sorted(r for r, *_ in cells.values())}")
