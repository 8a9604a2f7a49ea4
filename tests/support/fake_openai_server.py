"""A real HTTP server on loopback that speaks the OpenAI streaming completions protocol,
and misbehaves on request: used to test the load client's timing and fault handling.

Behaviour is chosen per server: 'ok', 'http500', 'malformed', 'cut' (stream stops
midway), 'hang' (never answers), 'empty_first' (role-only and empty chunks first),
'no_usage' (no running usage, only a closing usage chunk), 'crlf' (CRLF line ends),
'reset' (the connection is dropped before any answer), 'replay' (a recorded stream's bytes,
one event every `token_delay_s`: `recorded` holds them).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

from aiohttp import web


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def chunk(text: str, completion_tokens: int, prompt_tokens: int, chat: bool = False, with_usage: bool = True,
          newline: bytes = b"\n") -> bytes:
    choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
    body: dict = {"choices": [{**choice, "finish_reason": None}]}
    if with_usage:
        body["usage"] = usage(prompt_tokens, completion_tokens)
    return b"data: " + json.dumps(body).encode() + newline * 2


class FakeServer:
    def __init__(self, behaviour: str = "ok", token_delay_s: float = 0.0, service_s: float = 0.0,
                 recorded: bytes = b"", cold_requests: int = 0):
        """`service_s` (behaviour "queue"): each request's prefill holds one engine, first come first
        served, for this long before its first token: a server whose capacity is 1 / service_s. Each
        prefill ends service_s after the previous one's end (or its own arrival), by the clock, so
        the event loop's wake-up delays do not add up into a lower capacity.
        Behaviour "cold": a server that warms up, the n-th of its first `cold_requests` requests waiting
        service_s x (1 - n / cold_requests) before its first token, later ones not at all."""
        self.behaviour = behaviour
        self.token_delay_s = token_delay_s
        self.service_s = service_s
        self.recorded = recorded
        self.cold_requests = cold_requests
        self._engine_free_at = 0.0  # behaviour "queue": when the one engine is free (monotonic s)
        self.requests: list[dict] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self.port: int | None = None

    def __enter__(self) -> "FakeServer":
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(10)
        return self

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/health", self._health)
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    async def _health(self, request: web.Request) -> web.Response:
        if self.behaviour == "hang":  # a hung server answers nothing, its health path included
            await asyncio.sleep(3600)
        return web.json_response({"status": "ok"})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        payload = await request.json()
        self.requests.append(payload)
        if self.behaviour == "http500":
            return web.Response(status=500, text="engine exploded")
        if self.behaviour == "http400":
            return web.json_response({"error": {"message": "max_tokens too large"}}, status=400)
        if self.behaviour == "hang":
            await asyncio.sleep(3600)
        if self.behaviour == "reset":
            request.transport.close()
            return web.Response()
        if self.behaviour == "huge_error":  # 16 MiB of error page
            response = web.StreamResponse(status=503)
            await response.prepare(request)
            for _ in range(16):
                await response.write(b"x" * (1 << 20))
            await response.write_eof()
            return response
        if self.behaviour == "queue":  # the engine's schedule, kept on the clock: a late wake-up never delays the next
            now = time.monotonic()
            self._engine_free_at = max(now, self._engine_free_at) + self.service_s
            await asyncio.sleep(self._engine_free_at - now)
        if self.behaviour == "cold" and len(self.requests) <= self.cold_requests:
            await asyncio.sleep(self.service_s * (1 - (len(self.requests) - 1) / self.cold_requests))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if self.behaviour == "replay":
            await self._replay(response)
            return response
        chat = "messages" in payload
        prompt_tokens = len(payload["messages"][0]["content"].split()) if chat else len(payload["prompt"])
        newline = b"\r\n" if self.behaviour == "crlf" else b"\n"
        with_usage = self.behaviour != "no_usage"
        if self.behaviour == "malformed":
            await response.write(b"data: {not json\n\n")
            return response
        if self.behaviour == "slowloris":  # a byte now and then, never a whole event
            while True:
                await response.write(b"d")
                await asyncio.sleep(0.05)
        if self.behaviour == "huge_event":  # one event that never ends, a MiB at a time
            await response.write(b"data: ")
            for _ in range(16):
                await response.write(b"x" * (1 << 20))
            return response
        if self.behaviour == "empty_first":
            await response.write(chunk("", 0, prompt_tokens))   # role/empty chunk: no token yet
            await asyncio.sleep(0.05)
        total = payload["max_tokens"]
        for produced in range(1, total + 1):
            if self.behaviour == "cut" and produced > total // 2:
                request.transport.close()  # the connection drops mid-stream
                return response
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
            text = "" if produced % 3 == 0 and with_usage else "x"
            await response.write(chunk(text, produced, prompt_tokens, chat, with_usage, newline))
        if not with_usage:  # the closing usage-only chunk
            closing = {"choices": [], "usage": usage(prompt_tokens, total)}
            await response.write(b"data: " + json.dumps(closing).encode() + b"\n\n")
        await response.write(b"data: [DONE]" + newline * 2)
        await response.write_eof()
        return response

    async def _replay(self, response: web.StreamResponse) -> None:
        """The recorded events byte for byte, each `token_delay_s` after the one before."""
        for event in self.recorded.split(b"\n\n"):
            if event:
                await asyncio.sleep(self.token_delay_s)
                await response.write(event + b"\n\n")
        await response.write_eof()
