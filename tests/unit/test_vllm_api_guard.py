"""The ASGI middleware that makes vLLM's server ask for the run's token on every route but /health
(engine_side's servebench_engine/api_guard.py), driven with plain ASGI apps, and the launcher's flag for it."""

import asyncio
import sys
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from servebench.config.campaign import ModeSpec
from servebench.engines import LaunchRequest, get_engine
from servebench.engines.vllm.launch import API_GUARD
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.providers import Node
from tests.support.ports import CountingPorts

sys.path.insert(0, str(Path(__file__).parents[2] / "engine_side"))
from servebench_engine import api_guard  # noqa: E402
from servebench_engine.api_guard import RequireRunToken  # noqa: E402

TOKEN = "a3f1" * 16


class Inner:
    """A plain ASGI app that answers 200 and records the scopes that reached it."""

    def __init__(self) -> None:
        self.reached: list[str] = []

    async def __call__(self, scope, receive, send) -> None:
        self.reached.append(scope.get("path", scope["type"]))
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"served"})


def call(app, path: str, authorization: str | None = None, kind: str = "http", root_path: str = "") -> list[dict]:
    """The messages the app sends for one request."""
    headers = [(b"host", b"127.0.0.1")] + ([(b"authorization", authorization.encode())] if authorization else [])
    scope = {"type": kind, "path": path, "root_path": root_path, "method": "POST", "headers": headers}
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def status(app, path: str, authorization: str | None = None, root_path: str = "") -> int:
    return call(app, path, authorization, root_path=root_path)[0]["status"]


@pytest.mark.parametrize("path", ["/invocations", "/pooling", "/score", "/classify", "/rerank", "/tokenize",
                                  "/detokenize", "/metrics", "/version", "/v1/completions", "/", "/health/",
                                  "/healthz", "/health/../invocations"])
def test_every_route_but_health_is_refused_without_the_token(path):
    inner = Inner()
    guard = RequireRunToken(inner, token=TOKEN)
    sent = call(guard, path)
    assert sent[0]["status"] == 401 and dict(sent[0]["headers"])[b"www-authenticate"] == b"Bearer"
    assert sent[1]["body"] == b'{"error": "Unauthorized"}'
    assert inner.reached == []
    assert status(guard, path, f"Bearer {TOKEN}") == 200 and inner.reached == [path]


def test_health_answers_without_the_token():
    inner = Inner()
    assert status(RequireRunToken(inner, token=TOKEN), "/health") == 200 and inner.reached == ["/health"]


@pytest.mark.parametrize("authorization", ["Bearer not-the-token", f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}0",
                                           f"Basic {TOKEN}", TOKEN, "Bearer", "Bearer "])
def test_a_wrong_token_or_scheme_is_refused(authorization):
    inner = Inner()
    assert status(RequireRunToken(inner, token=TOKEN), "/invocations", authorization) == 401 and inner.reached == []


def test_the_scheme_is_case_insensitive_as_http_says():
    assert status(RequireRunToken(Inner(), token=TOKEN), "/score", f"bearer {TOKEN}") == 200


def test_the_token_comes_from_vllm_api_key_as_vllm_adds_the_class_with_no_arguments(monkeypatch):
    monkeypatch.setenv("VLLM_API_KEY", TOKEN)
    guard = RequireRunToken(Inner())
    assert status(guard, "/invocations") == 401 and status(guard, "/invocations", f"Bearer {TOKEN}") == 200


def test_without_a_token_in_the_environment_only_health_answers(monkeypatch, capsys):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    guard = RequireRunToken(Inner())
    assert status(guard, "/invocations") == 401 and status(guard, "/invocations", "Bearer ") == 401
    assert status(guard, "/health") == 200
    assert "VLLM_API_KEY is empty" in capsys.readouterr().err


def test_the_comparison_is_by_equal_length_digests_in_constant_time(monkeypatch):
    compared = []
    real = api_guard.hmac.compare_digest

    def spy(a, b):
        compared.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(api_guard.hmac, "compare_digest", spy)
    guard = RequireRunToken(Inner(), token=TOKEN)
    status(guard, "/score", "Bearer x")
    status(guard, "/score", f"Bearer {TOKEN}")
    assert compared == [(32, 32), (32, 32)]


def test_an_unauthenticated_websocket_is_closed_before_it_is_accepted():
    inner = Inner()
    guard = RequireRunToken(inner, token=TOKEN)
    assert call(guard, "/v1/realtime", kind="websocket") == [{"type": "websocket.close", "code": 1008}]
    assert inner.reached == []
    call(guard, "/v1/realtime", f"Bearer {TOKEN}", kind="websocket")
    assert inner.reached == ["/v1/realtime"]


def test_lifespan_events_pass_through():
    inner = Inner()
    asyncio.run(RequireRunToken(inner, token=TOKEN)({"type": "lifespan"}, None, None))
    assert inner.reached == ["lifespan"]


def test_the_path_is_matched_without_the_servers_root_path():
    guard = RequireRunToken(Inner(), token=TOKEN)
    assert status(guard, "/api/health", root_path="/api") == 200
    assert status(guard, "/api/invocations", root_path="/api") == 401


def test_as_a_starlette_apps_middleware_added_like_vllm_adds_it():
    """vLLM's --middleware: `app.add_middleware(cls)`, so the outermost layer, before routing."""
    async def answer(request):
        return PlainTextResponse("ok")

    app = Starlette(routes=[Route(p, answer, methods=["GET", "POST"]) for p in ("/health", "/invocations")])
    app.add_middleware(RequireRunToken, token=TOKEN)
    with TestClient(app) as client:
        assert client.get("/health").status_code == 200
        assert client.post("/invocations").status_code == 401
        assert client.get("/no-such-route").status_code == 401   # refused before the router says 404
        assert client.post("/invocations", headers={"Authorization": f"Bearer {TOKEN}"}).text == "ok"


# ---------------------------------------------------------------- the launcher

NODES = [Node(name="node0", address="127.0.1.1", cpus=[0, 1]), Node(name="node1", address="127.0.1.2", cpus=[2, 3])]


def launch(mode: ModeSpec, secret: str | None):
    return get_engine("vllm").launch(LaunchRequest(
        python="/venv/bin/python", build_dir="/venv", spec=VllmEngineSpec(), mode=mode, model_dir="/m",
        served_name="tiny", dtype="float32", nodes=NODES, ports=CountingPorts(9000), secret_file=secret))


@pytest.mark.parametrize("mode", [ModeSpec(name="tp1", executor="mp"),
                                  ModeSpec(name="pp2", pp=2, executor="mp-multinode"),
                                  ModeSpec(name="dp2", dp=2, executor="mp-multinode")], ids=lambda m: m.name)
def test_the_api_server_gets_the_guard_with_a_key_and_headless_ranks_never(mode):
    guarded = launch(mode, "/run/secret/token")
    argv = guarded.api.argv
    assert argv[argv.index("--middleware") + 1] == API_GUARD == "servebench_engine.api_guard.RequireRunToken"
    assert all("--middleware" not in p.argv for p in guarded.processes if not p.api)
    assert "--middleware" not in launch(mode, None).api.argv   # no key: nothing to ask for
