"""The load generator against real local servers, well-behaved and misbehaving."""

import json
import socket
import time

import pytest

from servebench.engines.vllm.bench_result import to_vllm_result
from servebench.load import LoadConfig, run_load
from servebench.load.config import to_argv
from servebench.load.metrics import percentile, summarize
from servebench.load.records import RequestRecord
from servebench.load.schedule import arrival_offsets
from servebench.load.workload import token_prompt
from tests.support.fake_openai_server import FakeServer


def config(url: str, **overrides) -> LoadConfig:
    # stream_options.continuous_usage_stats: an engine's extension, merged into the body
    base = dict(base_url=url, model="m", clients=2, requests=6, input_len=5, output_len=4, vocab_size=100,
                timeout_s=5, request_extras={"ignore_eos": True, "stream_options": {"include_usage": True,
                                                                               "continuous_usage_stats": True}})
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
    ("http500", "http"), ("http400", "http"), ("malformed", "malformed"), ("cut", "disconnect"), ("hang", "timeout"),
    ("reset", "disconnect"), ("slowloris", "timeout"), ("huge_event", "malformed"), ("huge_error", "http"),
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


def test_a_hung_server_is_caught_by_its_health_path_long_before_the_timeout():
    with FakeServer("hang") as server:
        started = time.monotonic()
        result = run_load(config(server.url, clients=2, requests=6, timeout_s=30.0,
                                 health_url=server.url + "/health", hang_after_s=1.0))
        elapsed = time.monotonic() - started
    summary = result["summary"]
    assert elapsed < 5, elapsed                                              # not the 30 s timeout
    assert [r["error_kind"] for r in result["requests"]] == ["hung", "hung"]  # the two in flight; 4 never sent
    assert summary["hung"]["in_flight"] == 2 and summary["hung"]["sent"] == 2 and not summary["valid"]
    assert "the server hung" in summary["invalid_reasons"][-1] and "4 never sent" in summary["hung"]["reason"]
    with FakeServer() as server:                                             # a server that answers: no verdict
        result = run_load(config(server.url, health_url=server.url + "/health", hang_after_s=1.0))
    assert result["summary"]["completed"] == 6 and "hung" not in result["summary"]


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
    s = summarize(records, LoadConfig(base_url="http://x", model="m", rate=2.0, requests=4, slo_ttft_ms=250))
    assert s["completed"] == 2 and s["failed"] == 1 and s["warmup_requests"] == 1
    assert s["duration_s"] == pytest.approx(2.0)            # first steady send 1.0 -> last token 3.0
    assert s["request_throughput"] == pytest.approx(1.0)
    assert s["output_throughput"] == pytest.approx(5.0)
    assert s["ttft_ms"]["p50"] == pytest.approx(200.0)      # 100 and 300 ms
    assert s["tpot_ms"]["mean"] == pytest.approx((100.0 + 175.0) / 2)
    assert s["achieved_rate"] == pytest.approx(2 / 1.5)
    assert s["scheduled_rate"] == pytest.approx(2 / 1.5)
    assert s["errors"] == {"http": 1}
    assert s["goodput"] == pytest.approx(0.5)              # one request under 250 ms TTFT, over 2 s
    assert s["whole_run"]["requests"] == 4


def test_streamed_tokens_and_ttft_from_scheduled():
    with FakeServer(token_delay_s=0.002) as server:
        result = run_load(config(server.url, clients=1, requests=2))
    r = result["requests"][0]
    assert sum(r["chunk_tokens"]) == r["output_tokens"] == 4 and r["token_source"] == "usage"
    assert len(r["chunk_times"]) == 4 and r["chunk_times"][0] == r["first_token_s"]
    s = result["summary"]
    assert s["itl_ms"]["count"] == 2 * 3 and s["itl_ms"]["p50"] >= 1.5
    assert s["ttft_from_scheduled_ms"]["p50"] >= s["ttft_ms"]["p50"]
    assert s["valid"], s["invalid_reasons"]


def test_chat_endpoint_with_prompts_file(tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "one two three"}\n{"messages": [{"role": "user", "content": "a b"}], '
                       '"output_len": 2}\n')
    with FakeServer() as server:
        result = run_load(config(server.url, endpoint="chat", prompts=str(prompts), clients=1, requests=2))
    assert [r["output_tokens"] for r in result["requests"]] in ([4, 2], [2, 4])
    assert all("messages" in p and p["max_completion_tokens"] in (2, 4) for p in server.requests)


def test_server_without_running_usage_falls_back_and_is_flagged():
    with FakeServer("no_usage") as server:
        result = run_load(config(server.url, clients=1, requests=2))
    r = result["requests"][0]
    assert r["token_source"] == "chunks" and r["output_tokens"] == 4 and r["error_kind"] is None
    assert not result["summary"]["valid"]
    assert any("no running usage" in reason for reason in result["summary"]["invalid_reasons"])


def test_crlf_events_are_parsed():
    with FakeServer("crlf") as server:
        result = run_load(config(server.url, clients=1, requests=1))
    assert result["requests"][0]["error_kind"] is None and result["requests"][0]["output_tokens"] == 4


def test_client_that_falls_behind_is_invalid():
    records = [RequestRecord(index=i, warmup=False, scheduled_s=i * 0.01, sent_s=i * 0.01 + 0.05,
                             first_token_s=i * 0.01 + 0.06, last_token_s=i * 0.01 + 0.07, output_tokens=2,
                             chunk_tokens=[1, 1], token_source="usage") for i in range(10)]
    s = summarize(records, LoadConfig(base_url="http://x", model="m", rate=100.0, requests=10))
    assert not s["valid"] and "schedule lag" in s["invalid_reasons"][0]


def test_token_mismatch_is_invalid():
    records = [RequestRecord(index=0, warmup=False, scheduled_s=0, sent_s=0, first_token_s=0.1, last_token_s=0.2,
                             output_tokens=5, chunk_tokens=[1, 1], token_source="usage")]
    s = summarize(records, LoadConfig(base_url="http://x", model="m", clients=1, requests=1))
    assert not s["valid"] and "differ from the server's usage" in s["invalid_reasons"][0]


def test_gamma_schedule_mean_rate_and_burstiness():
    bursty = arrival_offsets(10.0, "gamma", seed=3, count=20000, burstiness=0.25)
    smooth = arrival_offsets(10.0, "gamma", seed=3, count=20000, burstiness=4.0)
    for offsets in (bursty, smooth):
        assert 20000 / offsets[-1] == pytest.approx(10.0, rel=0.05)
    def gaps(o):
        return [b - a for a, b in zip(o, o[1:])]

    def variance(g):
        return sum((x - 0.1) ** 2 for x in g) / len(g)

    assert variance(gaps(bursty)) > 10 * variance(gaps(smooth))


def test_vllm_export_has_vllm_keys():
    with FakeServer() as server:
        result = run_load(config(server.url, clients=1, requests=3))
    out = to_vllm_result(result)
    for key in ("completed", "request_throughput", "output_throughput", "ttfts", "itls", "mean_ttft_ms",
                "median_tpot_ms", "p99_itl_ms", "p99.9_e2el_ms", "input_lens", "output_lens"):
        assert key in out
    assert out["completed"] == 3 and out["output_lens"] == [4, 4, 4]


def test_argv_round_trip_through_the_cli_parser():
    from servebench.cli import build_parser
    from servebench.cli.load import config_from_args

    original = LoadConfig(base_url="http://h:1", model="m", rate=2.5, clients=3, arrival="gamma", burstiness=0.5,
                          requests=10, warmup=1, seed=4, slo_ttft_ms=100, token_counter=None)
    args = build_parser().parse_args(["load", *to_argv(original)])
    assert config_from_args(args) == original
    declared = original.model_copy(update={"stream_token_counts": ["usage.completion_tokens", "timings.n"],
                                           "prompt_cache_tokens": ["timings.cached", "timings.computed"]})
    assert config_from_args(build_parser().parse_args(["load", *to_argv(declared)])) == declared


def test_the_engine_declares_where_its_stream_counts_tokens():
    """`--engine` fills the stream's token-count paths as it fills the extras: plain data the load
    generator reads, so a node with no engine code counts tokens as the engine says."""
    from servebench.cli import build_parser
    from servebench.cli.load import config_from_args
    from servebench.engines import engine_kinds, get_engine

    base = ["load", "--base-url", "http://h:1", "--model", "m", "--rate", "1", "--requests", "2"]
    assert config_from_args(build_parser().parse_args(base)).stream_token_counts == ["usage.completion_tokens"]
    for kind in engine_kinds():
        config = config_from_args(build_parser().parse_args([*base, "--engine", kind]))
        assert config.stream_token_counts == list(get_engine(kind).api.stream_token_counts)


def test_a_kept_alive_connection_closed_by_the_server_is_retried_once():
    import asyncio

    from servebench.load.http import ConnectionPool, Endpoint, stream_request

    async def scenario(url: str) -> tuple[RequestRecord, RequestRecord]:
        pool = ConnectionPool(Endpoint(url + "/v1/completions"))
        payload = pool.endpoint.request_bytes(b'{"prompt": [1, 2], "max_tokens": 2}')
        first = RequestRecord(index=0, warmup=False)
        await stream_request(pool, payload, first, 5)
        conn = pool.idle[0]
        conn.parser = type(conn.parser)(conn)  # as if the server had closed it: the next send gets no answer
        conn.transport.write = lambda data: conn.transport.close()
        second = RequestRecord(index=1, warmup=False)
        await stream_request(pool, payload, second, 5)
        pool.close()
        return first, second

    with FakeServer() as server:
        first, second = asyncio.run(scenario(server.url))
    assert first.ok and second.ok and second.output_tokens == 2


def tiny_tokenizer(tmp_path) -> str:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    words = "alpha beta gamma delta node core cache token serve model layer tensor pipeline".split()
    tokenizer.train_from_iterator([" ".join(words[(i * 7 + j) % len(words)] for j in range(9)) + f" {i}"
                                   for i in range(500)], trainer=trainer)
    path = tmp_path / "tokenizer.json"
    tokenizer.save(str(path))
    return str(path)


@pytest.mark.parametrize("length", [1, 7, 64, 300])
def test_text_prompts_have_exact_token_counts(tmp_path, length):
    from servebench.load.workload import ExactTextPrompts

    prompts = ExactTextPrompts(tiny_tokenizer(tmp_path))
    for index in range(5):
        text = prompts.prompt(index, length, seed=1)
        assert prompts.count(text) == length
    assert prompts.prompt(3, length, seed=1) == prompts.prompt(3, length, seed=1)


def test_duration_runs_stop_sending_at_the_deadline():
    with FakeServer() as server:
        closed = run_load(config(server.url, requests=None, duration=0.3, clients=2))
        opened = run_load(config(server.url, requests=None, duration=0.5, clients=None, rate=20.0,
                                 arrival="constant"))
    assert max(r["sent_s"] for r in closed["requests"]) < 0.3 + 0.05
    assert len(opened["requests"]) == 10  # arrivals at 0, 0.05, ..., 0.45


def test_sharegpt_prompts_take_reply_length_with_a_tokenizer(tmp_path):
    from servebench.load.workload import ExactTextPrompts, load_sharegpt

    data = [{"conversations": [{"from": "human", "value": "alpha beta"},
                               {"from": "gpt", "value": "gamma delta node core"}]},
            {"conversations": [{"from": "human", "value": "only a question"}]}]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    text = ExactTextPrompts(tiny_tokenizer(tmp_path))
    items = load_sharegpt(path, default_output_len=9, text=text)
    assert len(items) == 1 and items[0].prompt == "alpha beta"
    assert items[0].output_len == text.count("gamma delta node core")
    assert load_sharegpt(path, default_output_len=9, text=None)[0].output_len == 9


def test_bad_prompts_file_names_the_line(tmp_path):
    from servebench.load.workload import WorkloadError, load_prompts_jsonl

    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "ok"}\n{"nothing": 1}\n')
    with pytest.raises(WorkloadError, match=r"p.jsonl:2: each line needs 'prompt' or 'messages'"):
        load_prompts_jsonl(path, 4, "completions")


def test_cli_writes_csv_and_json_into_a_new_directory(tmp_path):
    import subprocess
    import sys

    with FakeServer() as server:
        out = tmp_path / "new" / "dir"
        done = subprocess.run([sys.executable, "-m", "servebench", "load", "--base-url", server.url, "--model", "m",
                               "--clients", "1", "--requests", "2", "--input-len", "3", "--output-len", "2",
                               "--vocab-size", "50", "--token-counter", "", "--quiet",
                               "--requests-csv", str(out / "r.csv"), "--output-json", str(out / "r.json")],
                              capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (out / "r.json").exists() and len((out / "r.csv").read_text().splitlines()) == 3
