"""The load generator against real local servers, well-behaved and misbehaving."""

import json
import socket
import time

import pytest

from servebench.load import LoadConfig, run_load
from servebench.load.metrics import percentile, summarize
from servebench.load.records import RequestRecord
from servebench.load.schedule import arrival_offsets
from servebench.load.workload import token_prompt
from tests.fake_openai_server import FakeServer


def config(url: str, **overrides) -> LoadConfig:
    base = dict(base_url=url, model="m", clients=2, requests=6, input_len=5, output_len=4, vocab_size=100,
                timeout_s=5)
    return LoadConfig(**{**base, **overrides})


def test_closed_loop_records_every_request_with_server_token_counts():
    with FakeServer() as server:
        result = run_load(config(server.url))
    requests = result["requests"]
    assert [r["index"] for r in requests] == list(range(6))
    assert all(r["error_kind"] is None for r in requests)
    assert all(r["output_tokens"] == 4 and r["input_tokens"] == 5 for r in requests)
    assert {r["client"] for r in requests} == {0, 1}
    for r in requests:
        assert r["scheduled_s"] <= r["sent_s"] <= r["first_token_s"] <= r["last_token_s"]
    assert result["summary"]["completed"] == 6
    payload = server.requests[0]
    assert payload["ignore_eos"] is True and payload["max_tokens"] == 4 and len(payload["prompt"]) == 5
    assert payload["stream_options"]["continuous_usage_stats"] is True


def test_first_token_is_first_chunk_with_a_token_not_first_chunk():
    with FakeServer("empty_first") as server:
        result = run_load(config(server.url, clients=1, requests=1))
    r = result["requests"][0]
    assert r["chunks"] == 5  # one empty chunk + four token chunks
    assert r["first_token_s"] - r["sent_s"] >= 0.045  # the empty chunk came 50 ms before the first token


def test_open_loop_keeps_its_schedule():
    with FakeServer() as server:
        result = run_load(config(server.url, clients=None, rate=50.0, arrival="constant", requests=20))
    lags = [r["sent_s"] - r["scheduled_s"] for r in result["requests"]]
    assert max(lags) < 0.05
    scheduled = [r["scheduled_s"] for r in result["requests"]]
    assert scheduled[-1] - scheduled[0] == pytest.approx(19 / 50.0, abs=1e-6)


@pytest.mark.parametrize("behaviour, kind", [
    ("http500", "http"), ("malformed", "malformed"), ("cut", "disconnect"), ("hang", "timeout"),
])
def test_faults_become_error_rows(behaviour, kind):
    with FakeServer(behaviour) as server:
        started = time.monotonic()
        result = run_load(config(server.url, clients=2, requests=2, timeout_s=1.0))
        elapsed = time.monotonic() - started
    kinds = {r["error_kind"] for r in result["requests"]}
    assert kinds <= {kind, "incomplete"} and kinds, result["requests"]
    assert result["summary"]["failed"] == 2 and result["summary"]["completed"] == 0
    assert elapsed < 5  # never hangs past its timeout


def test_connection_refused_is_an_error_row():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound but not listening: connections are refused
        result = run_load(config(f"http://127.0.0.1:{port}", clients=1, requests=2))
    assert {r["error_kind"] for r in result["requests"]} == {"connect"}


def test_result_is_json_without_nan():
    with FakeServer("http500") as server:
        result = run_load(config(server.url, clients=1, requests=1))
    json.dumps(result, allow_nan=False)


def test_poisson_schedule_is_seeded_and_has_the_right_rate():
    a = arrival_offsets(10.0, "poisson", seed=1, count=5000)
    assert a == arrival_offsets(10.0, "poisson", seed=1, count=5000)
    assert a != arrival_offsets(10.0, "poisson", seed=2, count=5000)
    assert 5000 / a[-1] == pytest.approx(10.0, rel=0.05)


def test_duration_schedule_stops_at_duration():
    offsets = arrival_offsets(4.0, "constant", seed=0, duration=2.0)
    assert offsets == [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75]


def test_prompts_are_exact_length_and_seeded():
    assert len(token_prompt(3, 64, 1000, seed=9)) == 64
    assert token_prompt(3, 64, 1000, seed=9) == token_prompt(3, 64, 1000, seed=9)
    assert token_prompt(3, 64, 1000, seed=9) != token_prompt(4, 64, 1000, seed=9)


def test_percentile_is_linear_interpolation():
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert percentile([1.0, 2.0, 3.0, 4.0], 100) == 4.0
    assert percentile([], 50) is None


def test_summary_metrics_from_hand_made_records():
    records = [
        RequestRecord(index=0, warmup=True, scheduled_s=0, sent_s=0, first_token_s=9, last_token_s=9,
                      output_tokens=3),
        RequestRecord(index=1, warmup=False, scheduled_s=1.0, sent_s=1.0, first_token_s=1.1, last_token_s=1.5,
                      output_tokens=5, input_tokens=7),
        RequestRecord(index=2, warmup=False, scheduled_s=2.0, sent_s=2.0, first_token_s=2.3, last_token_s=3.0,
                      output_tokens=5, input_tokens=7),
        RequestRecord(index=3, warmup=False, scheduled_s=2.5, sent_s=2.5, error_kind="http", error="500"),
    ]
    s = summarize(records, offered_rate=2.0)
    assert s["completed"] == 2 and s["failed"] == 1 and s["warmup_requests"] == 1
    assert s["duration_s"] == pytest.approx(2.0)            # first steady send 1.0 -> last token 3.0
    assert s["request_throughput"] == pytest.approx(1.0)
    assert s["output_throughput"] == pytest.approx(5.0)
    assert s["ttft_ms"]["p50"] == pytest.approx(200.0)      # 100 and 300 ms
    assert s["tpot_ms"]["mean"] == pytest.approx((100.0 + 175.0) / 2)
    assert s["achieved_rate"] == pytest.approx(2 / 1.5)
    assert s["errors"] == {"http": 1}
