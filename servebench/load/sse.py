"""Server-sent events of an OpenAI-compatible stream -> token timings in a RequestRecord.

A token-carrying event is one whose running token count rises: `usage.completion_tokens` (vLLM
with `continuous_usage_stats`) or `timings.predicted_n` (llama.cpp with `timings_per_token`). Servers without running usage fall back to counting events
with non-empty text (`token_source = "chunks"`, flagged in the record): a weaker
measure, since one event may carry several tokens or none.
"""

from __future__ import annotations

import orjson

from servebench.load.records import RequestRecord

MAX_EVENT_BYTES = 1 << 20  # a chunk is ~300 bytes (a few KB with logprobs): more, unended, is a hostile stream


class SseStream:
    __slots__ = ("record", "buffer", "tokens", "done", "chunk_events")

    def __init__(self, record: RequestRecord):
        self.record = record
        self.buffer = b""
        self.tokens = 0
        self.done = False
        self.chunk_events = 0  # events with non-empty text, for the fallback count

    def feed(self, body: bytes, now: float) -> str | None:
        """Consume bytes arriving at `now`; return a problem description if the stream is malformed."""
        data = self.buffer + body if self.buffer else body
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n")
        start = 0
        while True:
            end = data.find(b"\n\n", start)
            if end < 0:
                break
            problem = self._event(data[start:end], now)
            if problem is not None:
                return problem
            start = end + 2
        self.buffer = data[start:]
        if len(self.buffer) > MAX_EVENT_BYTES:
            return f"an event longer than {MAX_EVENT_BYTES} bytes and still without its end"
        return None

    def close(self) -> tuple[str | None, str | None]:
        """At the end of the HTTP message: (error kind, message) or (None, None)."""
        record = self.record
        if record.token_source is None:
            record.token_source = "usage"
        if record.output_tokens is None:
            record.output_tokens = self.tokens if record.token_source == "usage" else self.chunk_events
        if self.buffer.strip():
            return "malformed", f"stream ended inside an event: {self.buffer[:80]!r}"
        if not self.done:
            return "incomplete", f"stream ended before [DONE] after {self.tokens} tokens"
        return None, None

    def _event(self, event: bytes, now: float) -> str | None:
        for line in event.split(b"\n"):
            if not line or line[:1] == b":":
                continue
            if line[:5] != b"data:":
                if line[:6] in (b"event:", b"id: ", b"retry:") or line[:3] == b"id:":
                    continue
                return f"not an SSE data line: {line[:80]!r}"
            payload = line[5:].strip()
            if payload == b"[DONE]":
                self.done = True
                continue
            try:
                chunk = orjson.loads(payload)
            except orjson.JSONDecodeError:
                return f"chunk is not JSON: {payload[:80]!r}"
            if not isinstance(chunk, dict):
                return f"chunk is not a JSON object: {payload[:80]!r}"
            problem = self._chunk(chunk, now)
            if problem is not None:
                return problem
        return None

    def _chunk(self, chunk: dict, now: float) -> str | None:
        record = self.record
        record.chunks += 1
        if chunk.get("error"):
            return f"error event in stream: {str(chunk['error'])[:200]}"
        usage = chunk.get("usage") or {}
        choices = chunk.get("choices")
        count = usage.get("completion_tokens")
        if count is None:  # llama.cpp: its usage comes in the last chunk only, its timings in every one
            count = (chunk.get("timings") or {}).get("predicted_n")
        if usage.get("prompt_tokens") is not None:
            record.input_tokens = usage["prompt_tokens"]
        if choices and count is not None:  # running usage: the server says how many tokens so far
            record.token_source = "usage"
            if count > self.tokens:
                self._tokens_arrived(count - self.tokens, now)
                self.tokens = count
        elif choices and record.token_source != "usage" and _text(choices[0]):
            record.token_source = "chunks"
            self.chunk_events += 1
            self._tokens_arrived(1, now)
        elif not choices and count is not None:  # the closing usage-only chunk: the server's total
            record.output_tokens = count
        return None

    def _tokens_arrived(self, count: int, now: float) -> None:
        record = self.record
        if record.first_token_s is None:
            record.first_token_s = now
        record.last_token_s = now
        record.chunk_times.append(now)
        record.chunk_tokens.append(count)


def _text(choice: dict) -> str | None:
    text = choice.get("text")
    return text if text is not None else (choice.get("delta") or {}).get("content")
