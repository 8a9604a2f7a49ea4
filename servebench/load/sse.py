"""Server-sent events of an OpenAI-compatible stream -> token timings in a RequestRecord.

A token is an event, not text. vLLM streams an event with `text: ""` for a token that ends
inside a UTF-8 sequence (the last token too), so timing TTFT from the first visible text, or
E2EL to the last, is wrong by milliseconds (and by a whole slow prefill step at p99).

A token event is a `choices` entry that carries tokens:
- where the server keeps a running count, the event where it rises, by as many tokens as it
  rose (`token_source = "usage"`). Where a chunk says the count is the engine's to declare
  (`EngineAPI.stream_token_counts`, carried by `LoadConfig.stream_token_counts`): dotted paths into
  the chunk, the first present wins; OpenAI's `usage.completion_tokens` (with
  `continuous_usage_stats`) unless the engine says otherwise;
- otherwise, an event whose choice has a token field at all, empty text included: a
  completion's `text`, a chat delta's `content` (a chat stream's opening role-only delta and an
  empty closing delta are not tokens); it carries as many tokens as its logprobs list where the
  server sends logprobs, else one (`token_source = "chunks"`, flagged: one event may carry
  several tokens).
The first event with non-empty text is recorded apart (`first_text_s`): visible-text TTFT.

Where the engine's responses say how many prompt tokens its prefix cache supplied and how many it
processed (`EngineAPI.prompt_cache_tokens`, carried by `LoadConfig.prompt_cache_tokens`: two dotted
paths, llama.cpp's `timings.cache_n` and `timings.prompt_n`), they are read from the chunk that
carries the usage (the last) into `cached_input_tokens` and `processed_input_tokens`.
"""

from __future__ import annotations

from typing import Any

import orjson

from servebench.load.records import RequestRecord

MAX_EVENT_BYTES = 1 << 20  # a chunk is ~300 bytes (a few KB with logprobs): more, unended, is a hostile stream
# where a chunk carries the running count of generated tokens when the engine declares nothing else
OPENAI_TOKEN_COUNT = ("usage.completion_tokens",)


def count_paths(paths: tuple[str, ...] | list[str]) -> tuple[tuple[str, ...], ...]:
    """Dotted paths ('timings.predicted_n') split once, not per chunk: the hot path walks keys."""
    return tuple(tuple(path.split(".")) for path in paths)


def running_count(chunk: dict[str, Any], paths: tuple[tuple[str, ...], ...]) -> int | None:
    """The first of the paths present in the chunk (a number), or None: the server's running token count."""
    for path in paths:
        value: object = chunk
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
            if value is None:
                break
        if value is not None:
            return value  # type: ignore[return-value]
    return None


class SseStream:
    __slots__ = ("record", "buffer", "tokens", "done", "chunk_events", "count_paths", "cache_paths", "usage_count")

    def __init__(self, record: RequestRecord,
                 token_counts: tuple[tuple[str, ...], ...] = count_paths(OPENAI_TOKEN_COUNT),
                 cache_tokens: tuple[tuple[str, ...], ...] | None = None):
        """`token_counts`: where a chunk says the running token count (`count_paths` of the engine's);
        `cache_tokens`: where the usage chunk says the prompt tokens [cached, processed] (None: nowhere)."""
        self.record = record
        self.count_paths = token_counts
        self.usage_count = token_counts == (("usage", "completion_tokens"),)  # OpenAI's: the hot path's shortcut
        self.cache_paths = cache_tokens
        self.buffer = b""
        self.tokens = 0
        self.done = False
        self.chunk_events = 0  # tokens counted from events, for the fallback count

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
            event = data[start:end]
            if event[:6] == b"data: " and b"\n" not in event:  # one data line: nearly every event, the hot path
                problem = self._data(event[6:], now)
            else:
                problem = self._event(event, now)
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
            problem = self._data(line[5:], now)
            if problem is not None:
                return problem
        return None

    def _data(self, payload: bytes, now: float) -> str | None:
        payload = payload.strip()
        if payload == b"[DONE]":
            self.done = True
            return None
        try:
            chunk = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return f"chunk is not JSON: {payload[:80]!r}"
        if not isinstance(chunk, dict):
            return f"chunk is not a JSON object: {payload[:80]!r}"
        return self._chunk(chunk, now)

    def _chunk(self, chunk: dict[str, Any], now: float) -> str | None:
        record = self.record
        record.chunks += 1
        if "error" in chunk and chunk["error"]:
            return f"error event in stream: {str(chunk['error'])[:200]}"
        usage = chunk.get("usage")
        choices = chunk.get("choices")
        if self.usage_count:  # usage.completion_tokens: one lookup in the usage already in hand
            count = usage.get("completion_tokens") if usage.__class__ is dict else None
        else:
            count = running_count(chunk, self.count_paths)
        if usage and usage.get("prompt_tokens") is not None:
            self._prompt_tokens(chunk, usage["prompt_tokens"])
        if choices:
            if record.first_text_s is None and _text(choices[0]):
                record.first_text_s = now
            if count is not None:  # running usage: the server says how many tokens so far
                record.token_source = "usage"
                if count > self.tokens:
                    self._tokens_arrived(count - self.tokens, now)
                    self.tokens = count
            elif record.token_source != "usage":
                carried = _tokens_in(choices[0])
                if carried:
                    record.token_source = "chunks"
                    self.chunk_events += carried
                    self._tokens_arrived(carried, now)
        elif count is not None:  # the closing usage-only chunk: the server's total
            record.output_tokens = count
        return None

    def _prompt_tokens(self, chunk: dict[str, Any], prompt_tokens: int) -> None:
        record = self.record
        record.input_tokens = prompt_tokens
        if self.cache_paths is not None:
            cached, processed = self.cache_paths
            record.cached_input_tokens = running_count(chunk, (cached,))
            record.processed_input_tokens = running_count(chunk, (processed,))

    def _tokens_arrived(self, count: int, now: float) -> None:
        record = self.record
        if record.first_token_s is None:
            record.first_token_s = now
        record.last_token_s = now
        record.chunk_times.append(now)
        record.chunk_tokens.append(count)


def _text(choice: dict[str, Any]) -> str | None:
    text: str | None = choice.get("text")
    if text is not None:
        return text
    content: str | None = (choice.get("delta") or {}).get("content")
    return content


def _tokens_in(choice: dict[str, Any]) -> int:
    """How many tokens a choice carries, for a server without a running count (0: none).

    A completion's choice with a `text` field carries a token even when the text is empty;
    a chat delta carries one when it has `content`, unless it is the opening delta that
    only names the role (`{"role": "assistant", "content": ""}`)."""
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict):
        listed = logprobs.get("tokens") or logprobs.get("content")
        if isinstance(listed, list) and listed:
            return len(listed)
    if "text" in choice:
        return 1 if choice["text"] is not None else 0
    delta = choice.get("delta")
    if not isinstance(delta, dict) or delta.get("content") is None:
        return 0
    return 0 if delta.get("role") and not delta["content"] else 1
