"""Every route of vLLM's OpenAI server but its health check asks for the run's token.

vLLM's own check (`VLLM_API_KEY`, vllm/entrypoints/serve/middleware/authenticate.py) guards only the paths
under /v1, /v2, /inference and /cohere; the routes it registers beside them run the model or its tokenizer
for anyone who reaches the port: SageMaker's /invocations, /pooling, /classify, /score, /rerank,
/tokenize, /detokenize, and those that say what it serves (/metrics, /version, /load, /server_info).

This ASGI middleware closes them. vLLM's server takes it as `--middleware
servebench_engine.api_guard.RequireRunToken` and adds the class with `app.add_middleware` and no
arguments, so it reads the token where the launcher puts it: `VLLM_API_KEY`, set from the run's token file
when the process starts (never on a command line). Added last, it is the outermost layer: a request without
`Authorization: Bearer <token>` gets 401 before any route, an unauthenticated websocket is closed before it
is accepted. Only OPEN_PATHS pass without the token: /health, which the server's start and the load
generator's hang probe call with nothing (every other client of a run, the gate, the scraper and the load
generator, sends the token). The token is compared by digest with `hmac.compare_digest`, in a time that says
nothing of how much of it a guess got right. With no token in the environment every guarded route is
refused: a server told to ask for the token never serves without one.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

TOKEN_VARIABLE = "VLLM_API_KEY"
OPEN_PATHS = frozenset({"/health"})
REFUSED_BODY = json.dumps({"error": "Unauthorized"}).encode()
POLICY_VIOLATION = 1008   # the websocket close code for a refused peer


def token_digest(token: str) -> bytes:
    """Digests of equal length, whatever the tokens' lengths: compare_digest then leaks no length either."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def bearer_token(scope: Scope) -> str | None:
    """The token of the request's first `Authorization: Bearer <token>` header (None without one)."""
    for name, value in scope.get("headers", ()):
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else None
    return None


def route_path(scope: Scope) -> str:
    """The request's path without the server's root path (what vLLM's router matches)."""
    path, root = scope.get("path", ""), scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root) else path


class RequireRunToken:
    """Refuses every HTTP request and websocket without the run's token, but those to OPEN_PATHS."""

    def __init__(self, app: ASGIApp, token: str | None = None) -> None:
        self.app = app
        token = os.environ.get(TOKEN_VARIABLE, "") if token is None else token
        self.digest = token_digest(token.strip()) if token.strip() else None
        if self.digest is None:
            print(f"servebench api guard: {TOKEN_VARIABLE} is empty: every route but "
                  f"{', '.join(sorted(OPEN_PATHS))} answers 401", file=sys.stderr)

    def allows(self, scope: Scope) -> bool:
        if route_path(scope) in OPEN_PATHS:
            return True
        token = bearer_token(scope)
        return (self.digest is not None and token is not None
                and hmac.compare_digest(token_digest(token), self.digest))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.allows(scope):
            await self.app(scope, receive, send)   # lifespan events, the open paths, the token's holders
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": POLICY_VIOLATION})   # before accept: HTTP 403
        else:
            await send({"type": "http.response.start", "status": 401,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(REFUSED_BODY)).encode()),
                                    (b"www-authenticate", b"Bearer")]})
            await send({"type": "http.response.body", "body": REFUSED_BODY})
