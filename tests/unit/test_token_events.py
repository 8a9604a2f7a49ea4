"""TTFT, E2EL and token counts are timed on token events, not on visible text.

The streams in tests/data/vllm_streams/ were recorded byte for byte from a real vLLM 0.32.0 CPU
server serving the tiny Llama (16 greedy tokens): in the completions streams the first and the
last token arrive as events with `text: ""` (each ends inside a UTF-8 sequence), with the running
usage (`continuous_usage_stats`) and without it; the chat stream opens with vLLM's role-only
delta. Each is fed to the parser with known event times, and replayed over HTTP to the load
generator.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from servebench.load import LoadConfig, run_load
from servebench.load.records import RequestRecord
from servebench.load.sse import SseStream
from tests.support.fake_openai_server import FakeServer

STREAMS = Path(__file__).parents[1] / "data" / "vllm_streams"
GAP_S = 0.03  # between replayed events


def config(url: str) -> LoadConfig:
    """One request of 16 tokens, with no engine extras: the recorded stream is what it is."""
    return LoadConfig(base_url=url, model="tiny", clients=1, requests=1, input_len=24, output_len=16,
                      vocab_size=1000, timeout_s=5)


def events_of(name: str) -> list[bytes]:
    return [e + b"\n\n" for e in (STREAMS / name).read_bytes().split(b"\n\n") if e]


def choice_texts(name: str) -> list[str | None]:
    """Each event's text (None: an event without a choice, or not JSON)."""
    texts = []
    for event in events_of(name):
        payload = event[len(b"data: "):].strip()
        chunk = json.loads(payload) if payload.startswith(b"{") else {}
        choice = (chunk.get("choices") or [None])[0]
        texts.append(None if choice is None else choice.get("text", (choice.get("delta") or {}).get("content")))
    return texts


def parsed(name: str) -> RequestRecord:
    """The stream fed one event at a time, event i arriving at time i."""
    record = RequestRecord(index=0, warmup=False, sent_s=-1.0)
    stream = SseStream(record)
    for when, event in enumerate(events_of(name)):
        assert stream.feed(event, float(when)) is None
    assert stream.close() == (None, None)
    return record


@pytest.mark.parametrize("name", ["completions_usage.sse", "completions_plain.sse"])
def test_the_recorded_stream_starts_and_ends_with_empty_text_tokens(name):
    texts = [t for t in choice_texts(name) if t is not None]
    assert len(texts) == 16 and texts[0] == "" and texts[-1] == "" and any(texts)


@pytest.mark.parametrize("name, source", [("completions_usage.sse", "usage"), ("completions_plain.sse", "chunks")])
def test_first_and_last_token_are_the_empty_text_events(name, source):
    texts = choice_texts(name)
    first_text = next(i for i, t in enumerate(texts) if t)
    last_token = max(i for i, t in enumerate(texts) if t is not None)
    record = parsed(name)
    assert record.token_source == source
    assert record.first_token_s == 0.0            # the first event: text "", one token
    assert record.first_text_s == first_text > 0  # visible text comes an event later
    assert record.last_token_s == last_token and texts[last_token] == ""
    assert record.output_tokens == 16 and sum(record.chunk_tokens) == 16 and len(record.chunk_times) == 16


def test_a_chat_streams_role_only_opening_is_not_a_token():
    texts = choice_texts("chat_plain.sse")
    assert texts[0] == ""  # {"role": "assistant", "content": ""}
    record = parsed("chat_plain.sse")
    assert record.first_token_s == 1.0 and record.token_source == "chunks"
    assert record.output_tokens == 16 and sum(record.chunk_tokens) == 16


def test_logprobs_count_the_tokens_of_an_event_without_running_usage():
    record = RequestRecord(index=0, warmup=False)
    stream = SseStream(record)
    two = {"choices": [{"index": 0, "text": "ab", "logprobs": {"tokens": ["a", "b"], "token_logprobs": [0, 0]}}]}
    closing = {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
    body = b"".join(b"data: " + json.dumps(c).encode() + b"\n\n" for c in (two, closing)) + b"data: [DONE]\n\n"
    assert stream.feed(body, 1.0) is None and stream.close() == (None, None)
    assert record.chunk_tokens == [2] and record.output_tokens == 2


@pytest.mark.parametrize("name", ["completions_usage.sse", "completions_plain.sse"])
def test_replayed_over_http_ttft_and_e2el_are_on_token_events(name):
    """The recorded bytes from a real socket, one event every GAP_S: TTFT ends at the first
    (empty) event, E2EL at the last (empty) one; the visible text comes a gap after TTFT."""
    with FakeServer("replay", token_delay_s=GAP_S, recorded=(STREAMS / name).read_bytes()) as server:
        result = run_load(config(server.url))
    r = result["requests"][0]
    assert r["error_kind"] is None and r["output_tokens"] == 16 and sum(r["chunk_tokens"]) == 16
    ttft, text_ttft = r["first_token_s"] - r["sent_s"], r["first_text_s"] - r["sent_s"]
    assert GAP_S * 0.9 <= ttft < text_ttft - GAP_S * 0.8
    # 16 token events, the first and last both empty: the stream's span is 15 gaps, not 14 or 13
    assert r["last_token_s"] - r["first_token_s"] >= 15 * GAP_S * 0.95
    summary = result["summary"]
    assert summary["ttft_text_ms"]["p50"] > summary["ttft_ms"]["p50"]
