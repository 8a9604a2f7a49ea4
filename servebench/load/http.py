"""A lean HTTP/1.1 client for streamed completions: asyncio protocols, httptools' C parser.

General HTTP clients spend tens of microseconds per chunk in Python; at a thousand
streamed requests a second that overhead becomes the TTFT a tool reports. Here each
connection is an asyncio.Protocol: the kernel hands bytes to `data_received`, which
stamps them with the monotonic clock once, lets httptools de-chunk them, and passes
complete SSE events to the stream's handler. Connections are kept alive and reused.
"""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import httptools

from servebench.load.credentials import authorization
from servebench.load.records import RequestRecord
from servebench.load.sse import OPENAI_TOKEN_COUNT, SseStream, count_paths

ERROR_BODY_KEPT = 4096  # bytes of a non-200 answer kept for its error row


class Endpoint:
    """Where requests go, with the request head pre-rendered once, and where its streamed chunks
    say the running token count and, if they do, the prompt tokens cached and processed (the engine's
    declarations, `LoadConfig.stream_token_counts` and `prompt_cache_tokens`). A server this process has
    a key for (servebench/load/credentials.py) gets `Authorization: Bearer <key>` in every request head."""

    def __init__(self, url: str, token_counts: tuple[str, ...] | list[str] = OPENAI_TOKEN_COUNT,
                 cache_tokens: tuple[str, ...] | list[str] | None = None):
        self.token_counts = count_paths(token_counts)
        self.cache_tokens = count_paths(cache_tokens) if cache_tokens else None
        parts = urlsplit(url)
        if parts.scheme != "http":
            raise ValueError(f"only http:// URLs are supported, got {url!r}")
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.path = parts.path or "/"
        key = authorization(url)
        auth = f"Authorization: {key}\r\n" if key is not None else ""
        self._head = (f"POST {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n{auth}"
                      "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
                      "Connection: keep-alive\r\nContent-Length: ").encode()

    def request_bytes(self, body: bytes) -> bytes:
        return self._head + str(len(body)).encode() + b"\r\n\r\n" + body


class _Exchange:
    """One request on one connection: feeds the SSE stream, resolves `done` when over."""

    __slots__ = ("record", "stream", "done", "status", "error_body")

    def __init__(self, record: RequestRecord, done: asyncio.Future[None], endpoint: Endpoint):
        self.record = record
        self.stream = SseStream(record, endpoint.token_counts, endpoint.cache_tokens)
        self.done = done
        self.status = 0
        self.error_body = bytearray()

    def finish(self, kind: str | None = None, message: str | None = None) -> None:
        if self.done.done():
            return
        if kind is not None:
            self.record.error_kind, self.record.error = kind, message
        self.done.set_result(None)


class Connection(asyncio.Protocol):
    """A keep-alive connection carrying one exchange at a time."""

    def __init__(self, pool: "ConnectionPool"):
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.exchange: _Exchange | None = None
        self.now = 0.0
        self.reusable = True

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.now = time.monotonic()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail("malformed", f"bad HTTP response: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.reusable = False
        if self.exchange is not None:
            what = f"{type(exc).__name__}: {exc}" if exc else "connection closed by the server"
            self.exchange.finish("disconnect", f"{what} after {self.exchange.record.output_tokens or 0} tokens")
            self.exchange = None

    # --- httptools callbacks
    def on_headers_complete(self) -> None:
        if self.exchange is not None:
            self.exchange.status = self.parser.get_status_code()
            self.exchange.record.http_status = self.exchange.status

    def on_body(self, body: bytes) -> None:
        exchange = self.exchange
        if exchange is None:
            return
        if exchange.status != 200:  # keep the start of an error body, however much follows
            room = ERROR_BODY_KEPT - len(exchange.error_body)
            if room > 0:
                exchange.error_body += body[:room]
            return
        problem = exchange.stream.feed(body, self.now)
        if problem is not None:
            self._fail("malformed", problem)

    def on_message_complete(self) -> None:
        exchange = self.exchange
        if exchange is None:
            return
        self.exchange = None
        if not self.parser.should_keep_alive():
            self.reusable = False
        if exchange.status != 200:
            text = bytes(exchange.error_body[:300]).decode(errors="replace")
            exchange.finish("http", f"HTTP {exchange.status}: {text}")
        else:
            exchange.finish(*exchange.stream.close())
        self.pool.release(self)

    # --- used by the pool
    def send(self, payload: bytes, record: RequestRecord, done: asyncio.Future[None]) -> None:
        self.exchange = _Exchange(record, done, self.pool.endpoint)
        record.sent_s = time.monotonic()
        self.transport.write(payload)  # type: ignore[union-attr]

    def abort(self) -> None:
        self.reusable = False
        self.exchange = None
        if self.transport is not None:
            self.transport.abort()

    def _fail(self, kind: str, message: str) -> None:
        if self.exchange is not None:
            self.exchange.finish(kind, message)
        self.abort()


class ConnectionPool:
    """Idle keep-alive connections to one endpoint; a new one is opened when none is idle."""

    def __init__(self, endpoint: Endpoint, connect_timeout_s: float = 10.0):
        self.endpoint = endpoint
        self.connect_timeout_s = connect_timeout_s
        self.idle: list[Connection] = []
        self.open: set[Connection] = set()

    async def acquire(self, fresh: bool = False) -> tuple[Connection, bool]:
        """A connection and whether it was reused (kept alive from an earlier request)."""
        while self.idle and not fresh:
            conn = self.idle.pop()
            if conn.reusable and conn.transport is not None and not conn.transport.is_closing():
                return conn, True
        loop = asyncio.get_running_loop()
        _, conn = await asyncio.wait_for(
            loop.create_connection(lambda: Connection(self), self.endpoint.host, self.endpoint.port),
            self.connect_timeout_s)
        self.open.add(conn)
        return conn, False

    def release(self, conn: Connection) -> None:
        if conn.reusable:
            self.idle.append(conn)
        else:
            self.discard(conn)

    def discard(self, conn: Connection) -> None:
        self.open.discard(conn)
        conn.abort()

    def close(self) -> None:
        for conn in list(self.open):
            self.discard(conn)
        self.idle.clear()


async def stream_request(pool: ConnectionPool, payload: bytes, record: RequestRecord, timeout_s: float) -> None:
    """Send one request and stream its answer into `record`; failures are recorded, never raised.

    A kept-alive connection the server closed while idle fails before any byte of an
    answer arrives; such a request is sent again, once, on a new connection.
    """
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    for attempt in (0, 1):
        try:
            conn, reused = await pool.acquire(fresh=attempt > 0)
        except (OSError, asyncio.TimeoutError) as exc:
            record.sent_s = record.sent_s or time.monotonic()
            record.error_kind, record.error = "connect", f"{type(exc).__name__}: {exc}"
            return
        done = loop.create_future()
        conn.send(payload, record, done)
        remaining = timeout_s - (time.monotonic() - started)
        try:
            await asyncio.wait_for(asyncio.shield(done), max(remaining, 0.001))
        except asyncio.TimeoutError:
            record.error_kind, record.error = "timeout", f"no complete answer within {timeout_s:g} s"
            pool.discard(conn)
            return
        stale = reused and record.error_kind == "disconnect" and record.http_status is None and not record.chunks
        if not stale or attempt:
            return
        record.error_kind = record.error = None
