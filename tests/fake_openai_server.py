"""A real HTTP server on loopback that speaks the OpenAI streaming completions protocol,
and misbehaves on request: used to test the load client's timing and fault handling.

Behaviour is chosen per server: 'ok', 'http500', 'malformed', 'cut' (stream stops
midway), 'hang' (never answers), 'empty_first' (role-only and empty chunks first).
"""

from __future__ import annotations

import asyncio
import json
import threading

from aiohttp import web


def chunk(text: str, completion_tokens: int, prompt_tokens: int) -> bytes:
    body = {"choices": [{"index": 0, "text": text, "finish_reason": None}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


class FakeServer:
    def __init__(self, behaviour: str = "ok", token_delay_s: float = 0.0):
        self.behaviour = behaviour
        self.token_delay_s = token_delay_s
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
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        payload = await request.json()
        self.requests.append(payload)
        if self.behaviour == "http500":
            return web.Response(status=500, text="engine exploded")
        if self.behaviour == "hang":
            await asyncio.sleep(3600)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        prompt_tokens = len(payload["prompt"])
        if self.behaviour == "malformed":
            await response.write(b"data: {not json\n\n")
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
            await response.write(chunk("" if produced % 3 == 0 else "x", produced, prompt_tokens))
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response
