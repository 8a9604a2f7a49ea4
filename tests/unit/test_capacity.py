"""The capacity search (pure), on models of a server's p99 latency against the offered
rate whose SLO capacity is known: a hockey stick, an M/M/1-like curve, an exponential wall."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from servebench.analysis.capacity import (
    SERVER_MISS,
    SearchSettings,
    judge,
    observed_from_summary,
    probe_floor,
    search_capacity,
)
from servebench.config.slo import parse_slo
from servebench.load.config import LoadConfig
from servebench.load.metrics import CLIENT_REASONS, client_limited, validity
from servebench.paths import CHECKOUT

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


LAG = "schedule lag p99 12.02 ms exceeds 10 ms: the client fell behind its schedule"  # last night's CI


def client_invalid(rate: float) -> object:
    """A probe the load generator alone made invalid (its observed numbers would have met the SLO)."""
    return judge(rate, {"ttft_p99_ms": 50.0}, SLO, valid=False, reasons=[LAG])


def test_only_the_load_generators_own_limits_make_a_probe_client_limited():
    """The reasons as `validity` writes them: lag, achieved rate and the generator's CPU are the
    client's; with "no request completed" (or token counts) among them the run is the server's."""
    config = LoadConfig(base_url="http://x", model="m", rate=2.0, requests=20, input_len=4, output_len=4)
    summary = {"schedule_lag_ms": {"p99": 12.0}, "scheduled_rate": 2.0, "achieved_rate": 1.5,
               "client": {"core_fraction": 0.95}, "completed": 20}
    valid, reasons = validity(summary, [], config)
    assert not valid and len(reasons) == 3 and client_limited(reasons), reasons
    assert not client_limited(validity(summary | {"completed": 0}, [], config)[1])  # the server answered nothing
    assert not client_limited([]) and judge(2.0, {"ttft_p99_ms": 50.0}, SLO, valid=True, reasons=[LAG]).valid
    assert client_invalid(2.0).client_limited and not client_invalid(2.0).met
    assert not judge(2.0, {"ttft_p99_ms": None}, SLO, valid=False, reasons=["no request completed"]).client_limited


def test_a_point_the_client_limits_twice_stops_the_search_there_instead_of_descending():
    """Last night's CI: every probe invalid for schedule lag, taken as misses, descended 2, 1, 0.5
    ... 0.015625 req/s (40 minutes of probes). Now the point is measured once more, then the
    search stops, not converged, saying the client limited it."""
    result = search_capacity(client_invalid, SearchSettings(start=2))
    assert [p.rate for p in result.probes] == [2, 2], result
    assert (result.capacity, result.upper, result.converged) == (None, None, False)
    assert result.why == f"the probe at 2 req/s was invalid twice: {LAG}; the client, not the server, limited it"

    served = lambda r: judge(r, {"ttft_p99_ms": 40.0 * r}, SLO)  # noqa: E731  capacity 5 req/s
    limited_at_4 = lambda r: client_invalid(r) if r == 4 else served(r)  # noqa: E731
    result = search_capacity(limited_at_4, SearchSettings(start=1))
    assert [p.rate for p in result.probes] == [1, 2, 4, 4] and not result.converged, result
    assert (result.capacity, result.upper) == (2, None) and "invalid twice" in result.why


def test_a_miss_larger_than_the_clients_lag_is_the_servers_and_the_search_goes_on():
    """At 8 req/s a queueing server of capacity 5 gives TTFT p99 ~1.8 s (1809 ms) against a 600 ms
    limit while the client's lag p99 is 10.5 ms (limit 10): invalid for the client alone, which
    would stop the search there. A late client sends less load, and adds about its lag to a latency:
    a miss by more than that is the server's, and the search bisects on it. Within the lag, or
    with the client busy on its core (how late it read responses is unmeasured), it is not."""
    slo_miss = judge(8.0, {"ttft_p99_ms": 1809.0}, SLO, valid=False, reasons=[LAG], client_lag_ms=10.5)
    assert not slo_miss.client_limited and not slo_miss.met and "the server's miss" in slo_miss.reasons[-1]
    near = judge(8.0, {"ttft_p99_ms": SLO["ttft_p99_ms"] + 5}, SLO, valid=False, reasons=[LAG], client_lag_ms=10.5)
    assert near.client_limited
    busy = "the load generator used 97% of a core (limit 90%): it may be the bottleneck, not the server"
    assert judge(8.0, {"ttft_p99_ms": 1809.0}, SLO, valid=False, reasons=[LAG, busy], client_lag_ms=10.5).client_limited
    assert judge(8.0, {"ttft_p99_ms": 1809.0}, SLO, valid=False, reasons=[LAG]).client_limited  # lag unknown

    def laggy(rate: float):  # capacity 5 req/s; the client is late above it
        late = rate > 5
        return judge(rate, {"ttft_p99_ms": 40.0 * rate + (11.0 if late else 0)}, SLO, valid=not late,
                     reasons=[LAG] if late else [], client_lag_ms=11.0 if late else 1.0)
    result = search_capacity(laggy, SearchSettings(start=2))
    assert result.converged and 4.75 <= result.capacity <= 5 < result.upper, result
    assert not any(p.client_limited for p in result.probes) and len(result.probes) <= 8, result


def test_a_client_limited_point_measured_validly_again_continues_the_search():
    """The second measurement is the verdict: met, the search goes on and lands where a clean search
    does, one probe more (counted against max_probes)."""
    served = lambda r: judge(r, {"ttft_p99_ms": 40.0 * r}, SLO)  # noqa: E731  capacity 5 req/s
    clean = search_capacity(served, SearchSettings(start=1))
    measured: list[float] = []

    def once_limited(rate: float):
        measured.append(rate)
        return client_invalid(rate) if measured.count(4) == 1 and rate == 4 else served(rate)

    result = search_capacity(once_limited, SearchSettings(start=1, max_probes=9))
    assert measured == [1, 2, 4, 4] + [p.rate for p in clean.probes][3:], measured
    assert (result.capacity, result.upper, result.converged) == (clean.capacity, clean.upper, True), result
    assert len(result.probes) == len(clean.probes) + 1

    stopped = search_capacity(client_invalid, SearchSettings(start=2, client_retries=0))  # the flow's: cells retry
    assert len(stopped.probes) == 1 and "invalid once (not measured again" in stopped.why, stopped
    attempts = judge(2.0, {"ttft_p99_ms": 50.0}, SLO, valid=False, reasons=[LAG], attempts=2)
    assert "invalid twice" in search_capacity(lambda r: attempts, SearchSettings(start=2, client_retries=0)).why


def test_a_descending_search_never_schedules_a_probe_longer_than_the_bound():
    """20 requests, nothing meets the SLO: from 2 req/s the search stops at the rate whose probe lasts
    MAX_PROBE_S (300 s), not at 0.01 req/s (a 2000 s probe); a start below it is raised to it."""
    floor = probe_floor(20, None)
    assert floor == pytest.approx(20 / 300, rel=1e-5) and probe_floor(None, 15.0) == SearchSettings().min_value
    missing = lambda r: judge(r, {"ttft_p99_ms": 500.0}, SLO)  # noqa: E731
    result = search_capacity(missing, SearchSettings(start=2, min_value=floor, max_probes=16))
    assert [p.rate for p in result.probes] == [2, 1, 0.5, 0.25, 0.125, round(floor, 6)], result
    assert all(20 / p.rate <= 300 for p in result.probes) and "lowest point" in result.why
    assert [p.rate for p in search_capacity(missing, SearchSettings(start=0.01, min_value=floor)).probes] == \
        [round(floor, 6)]


def test_slo_keys_are_metric_percentile_ms_and_read_from_a_summary():
    assert parse_slo({"ttft_p99_ms": 500, "tpot_p50_ms": 50}) == {"ttft_p99_ms": 500, "tpot_p50_ms": 50}
    with pytest.raises(ValueError, match="METRIC_PCT_ms"):
        parse_slo({"ttft_p999": 1})
    summary = {"ttft_ms": {"p99": 120.0}, "tpot_ms": {"p50": 20.0}}
    assert observed_from_summary(summary, {"ttft_p99_ms": 1, "tpot_p50_ms": 1}) == {"ttft_p99_ms": 120.0,
                                                                                      "tpot_p50_ms": 20.0}


def test_a_queueing_server_of_known_capacity_is_found_within_five_percent_in_eight_probes(tmp_path):
    """A real HTTP server (tests/support/fake_openai_server.py, behaviour "queue"): one engine,
    200 ms of prefill per request, first come first served: 5 req/s (HTTP's own ~1 ms per request
    is under 1 % of that). At a constant rate r above it, the k-th of N requests waits
    (k - 1)(0.2 - 1/r) s more, so a probe's p99 TTFT (linear interpolation, position 0.99 (N - 1))
    reaches the 600 ms limit at 1/r* = 0.2 - 0.4 / (0.99 (N - 1)): the SLO's true capacity.

    The generator is `servebench capacity`, a process of its own as an operator runs it: inside
    this process it would share the GIL with the server's thread (its schedule waiting on the
    server's Python) and count the server's CPU as its own, invalid for the client's reasons on a
    busy machine. A probe the client still made invalid is measured again, one probe more of the
    budget (10 here: 8 and two measured again); what the search acted on is the server's, and it
    converges in at most 8 of them, as a clean search does."""
    from tests.support.fake_openai_server import FakeServer

    requests, service_s, limit_s = 20, 0.2, 0.6
    true = 1 / (service_s - (limit_s - service_s) / (0.99 * (requests - 1)))
    output = tmp_path / "capacity.json"
    with FakeServer("queue", service_s=service_s) as server:
        done = subprocess.run(
            [sys.executable, "-m", "servebench", "capacity", "--base-url", server.url, "--model", "m",
             "--arrival", "constant", "--requests", str(requests), "--input-len", "4", "--output-len", "4",
             "--vocab-size", "100", "--timeout", "10", "--seed", "1", "--slo", f"ttft_p99_ms={limit_s * 1000:g}",
             "--start", "2", "--max-probes", "10", "--max-schedule-lag-ms", "40", "--output-json", str(output)],
            env=os.environ | {"PYTHONPATH": str(CHECKOUT)}, capture_output=True, text=True, timeout=600)
    said = done.stderr + done.stdout
    assert done.returncode == 0 and output.exists(), said
    result = json.loads(output.read_text())["result"]
    probes, retried = result["probes"], sum(p["client_limited"] for p in result["probes"])
    assert result["converged"] and len(probes) - retried <= 8, said  # a point the client limits twice: the why
    assert abs(result["capacity"] - true) / true <= 0.05, (result["capacity"], true, said)
    client_or_miss = CLIENT_REASONS + (SERVER_MISS,)  # no probe the server made invalid
    assert all(p["valid"] or all(r.startswith(client_or_miss) for r in p["reasons"]) for p in probes), said
    print(f"capacity {result['capacity']:g} req/s (true {true:.3f}) in {len(probes)} probes "
          f"({retried} measured again): {said}")
