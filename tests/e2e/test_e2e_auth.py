"""A real vLLM server of the e2e campaign's tiny model, started as a run starts it with the run's token: every
route it lists but /health is refused without the key (vLLM's own check guards /v1 and a few prefixes, the
launcher's ASGI middleware, engine_side's servebench_engine/api_guard.py, the rest: /invocations, /tokenize,
/metrics ...) and served with it; the gate and `servebench load --api-key-file` measure with it; the token is
in no command line of the server's processes and nowhere in its log (docs/security.md)."""

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from servebench.builds.venv import ensure_build
from servebench.campaign.loading import load_campaign
from servebench.engines import LaunchRequest, get_engine
from servebench.load.run_secret import ensure_run_secret, read_token
from servebench.models.artifact import ensure_model
from servebench.paths import cache_dir
from servebench.providers import get_provider
from servebench.serving.correctness import ask
from servebench.serving.server import start_server, stop_server, wait_ready
from tests.support.processes import engine_processes

CAMPAIGN = Path(__file__).parents[1] / "campaigns" / "good" / "e2e.yaml"
OPEN = {"/health"}
pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("run")
    key_file = ensure_run_secret(run_dir)
    campaign = load_campaign(CAMPAIGN)
    engine = get_engine(campaign.engine.kind)
    build = ensure_build(engine.build_recipe(campaign.engine), cache_dir(), log=lambda _: None)
    model_dir = ensure_model(campaign.model, build.python, cache_dir())
    provider = get_provider(campaign)
    nodes = provider.allocate()[:1]
    launch = engine.launch(LaunchRequest(
        python=build.python, build_dir=build.venv_path, spec=campaign.engine, mode=campaign.modes[0],
        model_dir=str(model_dir), served_name="tiny", dtype="auto", nodes=nodes, ports=provider,
        secret_file=str(key_file)))
    server = start_server(provider, nodes, launch, "tp1", run_dir / "servers", 600)
    try:
        wait_ready(server, 600)
        yield server, key_file, engine
    finally:
        stop_server(provider, server)
        provider.release()
    assert engine_processes() == []


def status(url: str, body: dict | None = None, key: str | None = None) -> int:
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_without_the_key_a_request_is_refused_and_with_it_served(served):
    server, key_file, _ = served
    body = {"model": "tiny", "prompt": [1, 2, 3], "max_tokens": 4}
    assert status(server.url + "/v1/completions", body) == 401
    assert status(server.url + "/v1/completions", body, key="not-the-token") == 401
    assert status(server.url + "/v1/models") == 401
    assert status(server.url + "/v1/completions", body, key=read_token(key_file)) == 200
    assert status(server.url + "/health") == 200 and status(server.url + "/metrics") == 401   # health alone open


def test_the_gate_and_the_load_generator_measure_with_the_key(served, tmp_path):
    server, key_file, engine = served
    answer = ask(server.url, "tiny", 1000, engine.api.gate_extras, engine.gate_choice, api_key=read_token(key_file))
    assert len(answer.tokens) == 4 and all(answer.tokens)
    out = tmp_path / "load.json"
    done = subprocess.run([sys.executable, "-m", "servebench", "load", "--engine", "vllm", "--base-url", server.url,
                           "--model", "tiny", "--output-len", "8", "--requests", "6", "--clients", "3",
                           "--api-key-file", str(key_file), "--output-json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(out.read_text())["summary"]
    assert summary["completed"] == 6 and summary["failed"] == 0
    assert summary["server_output_tokens"] == summary["client_output_tokens"] == 6 * 8
    assert read_token(key_file) not in out.read_text() + done.stdout + done.stderr
    refused = subprocess.run([sys.executable, "-m", "servebench", "load", "--base-url", server.url, "--model", "tiny",
                              "--output-len", "4", "--requests", "2", "--clients", "1", "--output-json",
                              str(tmp_path / "refused.json")], capture_output=True, text=True, timeout=300)
    rows = json.loads((tmp_path / "refused.json").read_text())["requests"] if refused.returncode == 0 else []
    assert refused.returncode != 0 or all(r["error_kind"] for r in rows)


def test_the_token_is_in_no_command_line_and_not_in_the_log(served):
    server, key_file, _ = served
    token = read_token(key_file)
    api = psutil.Process(server.api.process.pid)
    processes = [api, *api.children(recursive=True)]
    for process in processes:
        with open(f"/proc/{process.pid}/cmdline", "rb") as cmdline:
            assert token.encode() not in cmdline.read()
    assert api.environ().get("VLLM_API_KEY") == token   # set from the file, in the process's own environment
    assert any("vllm.entrypoints.openai.api_server" in " ".join(api.cmdline()) for _ in [0])
    server.api.process.fetch_log()
    assert token not in server.log_path.read_text(errors="replace")


def request(url: str, method: str, key: str | None = None) -> tuple[int, bytes]:
    """The status and body of one request (a POST carries an empty JSON object: refused or invalid, never served)."""
    headers = {"Content-Type": "application/json"} | ({"Authorization": f"Bearer {key}"} if key else {})
    body = b"{}" if method in ("POST", "PUT", "PATCH") else None
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, headers=headers, method=method),
                                    timeout=120) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def listed_routes(url: str, key: str) -> list[tuple[str, str]]:
    """(method, path) of every route in the server's OpenAPI document, a path parameter filled with `tiny`."""
    status, body = request(url + "/openapi.json", "GET", key)
    assert status == 200, body
    paths = json.loads(body)["paths"]
    return sorted((method.upper(), re.sub(r"\{[^}]+\}", "tiny", path))
                  for path, methods in paths.items() for method in methods)


def test_every_listed_route_but_health_is_refused_without_the_key_and_not_with_it(served):
    server, key_file, _ = served
    url, key = server.url, read_token(key_file)
    routes = [*listed_routes(url, key), ("GET", "/metrics")]   # a mount of Prometheus' app: not in the document
    paths = {path for _, path in routes}
    assert {"/health", "/invocations", "/tokenize", "/detokenize", "/v1/completions"} <= paths
    without = {(method, path): request(url + path, method)[0] for method, path in routes}
    with_key = {(method, path): request(url + path, method, key)[0] for method, path in routes}
    print(json.dumps({f"{m} {p}": [without[m, p], with_key[m, p]] for m, p in routes}, indent=1))
    assert {route: code for route, code in without.items() if route[1] not in OPEN and code != 401} == {}
    assert all(code == 200 for (_, path), code in without.items() if path in OPEN)
    assert {route: code for route, code in with_key.items() if code == 401} == {}
    assert with_key["GET", "/metrics"] == 200   # what the scraper reads, with the key


def test_the_documents_and_a_wrong_key_are_refused_too(served):
    server, key_file, _ = served
    url, key = server.url, read_token(key_file)
    for path in ("/openapi.json", "/docs", "/no-such-route"):
        assert request(url + path, "GET")[0] == 401, path
    assert request(url + "/invocations", "POST", "not-the-token")[0] == 401
    assert request(url + "/invocations", "POST", key[:-1])[0] == 401
