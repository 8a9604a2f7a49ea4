"""Streaming OpenAI-compatible client: sends one request and fills its record.

Tokens are counted from the server's running `usage.completion_tokens`
(`stream_options.continuous_usage_stats`): chunks do not map one-to-one to tokens and
text does not mark them (a byte-level token can decode to nothing). The first token is
the first chunk whose count rises, never the first chunk or the first non-empty text.
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp

from servebench.load.records import RequestRecord


def completion_payload(model: str, prompt: list[int], output_len: int) -> dict:
    return {
        "model": model,
        "prompt": prompt,
        "max_tokens": output_len,
        "min_tokens": output_len,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


async def send(session: aiohttp.ClientSession, url: str, payload: dict, record: RequestRecord,
               timeout_s: float) -> None:
    """Send and stream one request; every failure ends up in the record, never raised."""
    record.sent_s = time.monotonic()
    try:
        await asyncio.wait_for(_stream(session, url, payload, record), timeout=timeout_s)
    except asyncio.TimeoutError:
        _fail(record, "timeout", f"no complete answer within {timeout_s:g} s")
    except aiohttp.ClientConnectorError as exc:
        _fail(record, "connect", str(exc))
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, ConnectionResetError) as exc:
        _fail(record, "disconnect", f"{type(exc).__name__}: {exc}")
    except aiohttp.ClientError as exc:
        _fail(record, "connect", f"{type(exc).__name__}: {exc}")


async def _stream(session: aiohttp.ClientSession, url: str, payload: dict, record: RequestRecord) -> None:
    async with session.post(url, json=payload) as response:
        record.http_status = response.status
        if response.status != 200:
            body = (await response.text())[:300]
            _fail(record, "http", f"HTTP {response.status}: {body}")
            return
        tokens = 0
        done = False
        async for raw in response.content:
            now = time.monotonic()
            line = raw.strip()
            if not line or line.startswith(b":"):
                continue
            if not line.startswith(b"data:"):
                _fail(record, "malformed", f"not an SSE data line: {line[:100]!r}")
                return
            data = line[5:].strip()
            if data == b"[DONE]":
                done = True
                break
            try:
                chunk = json.loads(data)
            except ValueError:
                _fail(record, "malformed", f"chunk is not JSON: {data[:100]!r}")
                return
            record.chunks += 1
            usage = chunk.get("usage") or {}
            count = usage.get("completion_tokens")
            if count is not None and count > tokens:
                if record.first_token_s is None:
                    record.first_token_s = now
                record.last_token_s = now
                tokens = count
            if usage.get("prompt_tokens") is not None:
                record.input_tokens = usage["prompt_tokens"]
            if chunk.get("error"):
                _fail(record, "http", f"error in stream: {str(chunk['error'])[:200]}")
                return
        record.output_tokens = tokens
        if not done:
            _fail(record, "incomplete", f"stream ended before [DONE] after {tokens} tokens")


def _fail(record: RequestRecord, kind: str, message: str) -> None:
    record.error_kind = kind
    record.error = message
