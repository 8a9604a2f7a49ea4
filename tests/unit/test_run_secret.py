"""The run's secret and how every service is given it, without starting an engine: the token file (0600,
one per run, never through a link), its copy to nodes, the env-from-file wrapper, each engine's command
line and environment (the token in none of them), Ray's token authentication, the balancer's check, and
the clients that send `Authorization: Bearer` (load generator, gate, scraper)."""

from __future__ import annotations

import http.server
import json
import os
import stat
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from servebench.campaign.load_config import LoadTarget
from servebench.config.campaign import ModeSpec
from servebench.engines import LaunchRequest, get_engine
from servebench.engines.llamacpp.spec import LlamaCppEngineSpec
from servebench.engines.vllm.ray_cluster import alive_node_manager_ports, plan_cluster
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.load import credentials
from servebench.load.config import LoadConfig, to_argv
from servebench.load.http import Endpoint
from servebench.load.run_secret import (
    SecretError,
    ensure_run_secret,
    env_from_files_argv,
    place_secret,
    read_token,
    secret_path,
)
from servebench.providers import Node
from servebench.serving import mode_server
from servebench.serving.balancer import (
    AUTH_INCLUDE,
    auth_include_text,
    nginx_config,
    start_balancer,
    stop_balancer,
    write_auth_include,
)
from servebench.serving.correctness import ask
from servebench.telemetry import scraper
from servebench.waiting import poll
from tests.support.ports import CountingPorts

NODES = [Node(name="n0", address="127.0.1.1", cpus=[0, 1]), Node(name="n1", address="127.0.1.2", cpus=[2, 3])]
SECRET = "/run/secret/token"


@pytest.fixture(autouse=True)
def no_keys():
    credentials.forget_keys()
    yield
    credentials.forget_keys()


# ---------------------------------------------------------------- the token file

def test_a_run_gets_one_private_random_token_that_a_resume_finds_again(tmp_path):
    path = ensure_run_secret(tmp_path)
    assert path == secret_path(tmp_path) == tmp_path / "secret" / "token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    token = read_token(path)
    assert len(token) == 64 and int(token, 16) >= 0 and not path.read_text().endswith("\n")
    assert ensure_run_secret(tmp_path) == path and read_token(path) == token
    assert read_token(ensure_run_secret(tmp_path / "other")) != token


def test_a_token_file_others_could_read_or_a_planted_link_is_refused(tmp_path):
    path = ensure_run_secret(tmp_path / "a")
    path.chmod(0o644)
    with pytest.raises(SecretError, match="not a private file"):
        ensure_run_secret(tmp_path / "a")
    (tmp_path / "b" / "secret").mkdir(parents=True, mode=0o700)
    (tmp_path / "b" / "secret" / "token").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(SecretError):
        ensure_run_secret(tmp_path / "b")
    assert not (tmp_path / "elsewhere").exists()


class Files:
    """A provider's file API for nodes that do not share the run directory."""

    def __init__(self, shared: bool):
        self.shared, self.puts = shared, []

    def shares(self, path: str) -> bool:
        return self.shared

    def scratch_dir(self, node) -> str:
        return "/tmp/sb-run-x"

    def put_tree(self, node, local: Path, remote: str) -> None:
        self.puts.append((node.name, local, remote, sorted(p.name for p in local.iterdir())))


def test_the_token_is_copied_by_the_providers_file_api_to_nodes_that_do_not_share_the_run(tmp_path):
    remote = Files(shared=False)
    assert place_secret(remote, NODES, tmp_path) == "/tmp/sb-run-x/secret/token"
    assert [(name, remote_dir, files) for name, _, remote_dir, files in remote.puts] == [
        ("n0", "/tmp/sb-run-x/secret", ["token"]), ("n1", "/tmp/sb-run-x/secret", ["token"])]
    local = Files(shared=True)
    assert place_secret(local, NODES, tmp_path) == str(secret_path(tmp_path)) and local.puts == []


def test_a_variable_set_from_a_file_reaches_the_process_and_no_command_line(tmp_path):
    key = tmp_path / "key"
    key.write_text("s3cret-value")
    argv = env_from_files_argv({"THE_KEY": str(key)}, [sys.executable, "-c", "import os; print(os.environ['THE_KEY'])"])
    assert "s3cret-value" not in " ".join(argv)
    assert subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip() == "s3cret-value"
    missing = env_from_files_argv({"THE_KEY": str(tmp_path / "none")}, ["true"])
    assert subprocess.run(missing, capture_output=True, text=True).returncode == 97
    assert env_from_files_argv({}, ["a", "b"]) == ["a", "b"]


# ---------------------------------------------------------------- engines

def vllm_request(mode: ModeSpec, shared=None, secret: str | None = SECRET) -> LaunchRequest:
    return LaunchRequest(python="/venv/bin/python", build_dir="/venv", spec=VllmEngineSpec(), mode=mode,
                         model_dir="/m", served_name="tiny", dtype="float32", nodes=NODES,
                         ports=CountingPorts(9000), shared=shared, secret_file=secret)


@pytest.mark.parametrize("mode", [ModeSpec(name="tp1", executor="mp"), ModeSpec(name="tp2", tp=2, executor="mp"),
                                  ModeSpec(name="pp2", pp=2, executor="mp-multinode")], ids=lambda m: m.name)
def test_the_vllm_api_server_reads_its_key_from_the_token_file(mode):
    launch = get_engine("vllm").launch(vllm_request(mode))
    api = launch.api
    assert api.env_files == {"VLLM_API_KEY": SECRET}
    assert "--api-key" not in api.argv and "VLLM_API_KEY" not in api.env
    assert all(p.env_files == {} for p in launch.processes if not p.api)   # headless ranks serve no HTTP
    assert get_engine("vllm").launch(vllm_request(mode, secret=None)).api.env_files == {}


def test_modes_with_several_workers_say_their_gloo_traffic_is_unauthenticated():
    one = get_engine("vllm").launch(vllm_request(ModeSpec(name="tp1", executor="mp")))
    assert not any("gloo" in note for note in one.notes)
    (note,) = [n for n in get_engine("vllm").launch(vllm_request(ModeSpec(name="pp2", pp=2, executor="mp-multinode")
                                                                   )).notes if "gloo" in n]
    assert "no authentication" in note and "127.0.1.1, 127.0.1.2" in note


def test_a_ray_mode_authenticates_to_its_cluster_with_the_token_file():
    class Cluster:
        address = "127.0.1.1:6379"

    launch = get_engine("vllm").launch(vllm_request(ModeSpec(name="tp2-ray", tp=2, executor="ray"), Cluster()))
    assert launch.api.env["RAY_AUTH_MODE"] == "token" and launch.api.env["RAY_AUTH_TOKEN_PATH"] == SECRET
    assert any("RAY_AUTH_MODE=token" in note for note in launch.notes)


def test_every_ray_node_starts_with_token_authentication_and_the_file_not_the_token():
    plans = plan_cluster(NODES, "/venv/bin/ray", 2, {}, CountingPorts(7000), temp_root="/tmp/sb-ray-t",
                         token_path=SECRET)
    for plan in plans:
        assert plan.env["RAY_AUTH_MODE"] == "token" and plan.env["RAY_AUTH_TOKEN_PATH"] == SECRET
        assert "RAY_AUTH_TOKEN" not in plan.env
    # a campaign's engine.env may switch it off, by name
    off = plan_cluster(NODES, "/venv/bin/ray", 2, {"RAY_AUTH_MODE": "disabled"}, CountingPorts(7000),
                       temp_root="/tmp/sb-ray-t", token_path=SECRET)
    assert off[0].env["RAY_AUTH_MODE"] == "disabled"
    assert "RAY_AUTH_MODE" not in plan_cluster(NODES, "/venv/bin/ray", 2, {}, CountingPorts(7000),
                                               temp_root="/tmp/sb-ray-t")[0].env


def test_the_alive_check_driver_is_told_the_token_file(tmp_path):
    seen = []

    class Provider:
        def run(self, node, argv, timeout=None):
            seen.append(argv)
            return subprocess.CompletedProcess(argv, 0, stdout="[7001]\n", stderr="")

    assert alive_node_manager_ports(Provider(), NODES[0], "/venv/bin/python", "127.0.1.1:7000",
                                    token_path=SECRET) == {7001}
    script = seen[0][-1]
    assert "os.environ['RAY_AUTH_MODE'] = 'token'" in script and repr(SECRET) in script
    assert script.index("del os.environ") < script.index("RAY_AUTH_MODE")   # set after the clearing


def llama_request(mode: ModeSpec, secret: str | None = SECRET) -> LaunchRequest:
    return LaunchRequest(python="", build_dir="/b", spec=LlamaCppEngineSpec(), mode=mode, model_dir="/m.gguf",
                         served_name="tiny", dtype="float32", nodes=NODES, ports=CountingPorts(9100),
                         secret_file=secret)


def test_llama_server_reads_its_key_file_and_rpc_workers_bind_their_nodes_address_only():
    launch = get_engine("llamacpp").launch(llama_request(ModeSpec(name="rpc2", pp=2, executor="rpc")))
    api = launch.api
    assert api.argv[api.argv.index("--api-key-file") + 1] == SECRET and "--api-key" not in api.argv
    workers = [p for p in launch.processes if not p.api]
    assert [w.argv[w.argv.index("-H") + 1] for w in workers] == ["127.0.1.1", "127.0.1.2"]
    assert all("--api-key-file" not in w.argv for w in workers)
    (note,) = launch.notes
    assert "no authentication" in note and "127.0.1.1:" in note and "127.0.1.2:" in note
    plain = get_engine("llamacpp").launch(llama_request(ModeSpec(name="local", executor="local"), secret=None))
    assert "--api-key-file" not in plain.api.argv and plain.notes == ()


# ---------------------------------------------------------------- the balancer

def test_nginx_checks_the_token_under_v1_from_an_include_and_passes_the_header_on(tmp_path):
    text = nginx_config({"r0": "http://127.0.1.1:8000"}, "round-robin", "127.0.0.1:9", "/p",
                        auth_include="/s/nginx-auth.conf")
    assert "location /v1/ {\n            include /s/nginx-auth.conf;" in text
    assert "proxy_set_header Authorization" not in text   # nginx passes the client's header by default
    assert "include" not in nginx_config({"r0": "http://127.0.1.1:8000"}, "round-robin", "127.0.0.1:9", "/p")
    include = write_auth_include(tmp_path, "ab12")
    assert include.name == AUTH_INCLUDE and stat.S_IMODE(include.stat().st_mode) == 0o600
    assert include.read_text() == auth_include_text("ab12") == \
        'if ($http_authorization != "Bearer ab12") { return 401 "unauthorized\\n"; }\n'
    with pytest.raises(ValueError):
        auth_include_text('x"; }')


# ---------------------------------------------------------------- the clients

class Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[str | None] = []

    def _answer(self) -> None:
        Recorder.seen.append(self.headers.get("Authorization"))
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        body = json.dumps({"choices": [{"logprobs": {}}]}).encode() if self.command == "POST" else b"# none\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def recorder():
    Recorder.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_load_config_names_the_key_file_and_its_requests_carry_the_key(tmp_path, recorder):
    key = tmp_path / "key"
    key.write_text("k-123\n")
    config = LoadConfig(base_url=recorder, model="m", clients=1, requests=1, api_key_file=str(key))
    argv = to_argv(config)
    assert argv[argv.index("--api-key-file") + 1] == str(key) and "k-123" not in " ".join(argv)
    assert "k-123" not in config.model_dump_json()
    assert b"Authorization: Bearer k-123\r\n" in Endpoint(recorder + "/v1/completions").request_bytes(b"{}")
    urllib.request.urlopen(recorder + "/metrics").read()      # the token counter's read, the health probe
    assert Recorder.seen == ["Bearer k-123"]
    assert b"Authorization" not in Endpoint("http://127.0.0.1:1/v1/completions").request_bytes(b"{}")


def test_the_key_may_come_from_a_named_variable_and_never_from_two_places(tmp_path, monkeypatch, recorder):
    monkeypatch.setenv("MY_SERVER_KEY", "from-env")
    LoadConfig(base_url=recorder, model="m", clients=1, requests=1, api_key_env="MY_SERVER_KEY")
    assert b"Bearer from-env" in Endpoint(recorder + "/v1/completions").request_bytes(b"")
    with pytest.raises(ValueError, match="at most one"):
        LoadConfig(base_url=recorder, model="m", clients=1, requests=1, api_key_env="X", api_key_file="/k")


def test_servebench_load_takes_the_key_by_file_or_variable_name_only():
    done = subprocess.run([sys.executable, "-m", "servebench", "load", "--help"], capture_output=True, text=True)
    assert "--api-key-file" in done.stdout and "--api-key-env" in done.stdout
    assert "--api-key " not in done.stdout


def test_the_gate_sends_the_key(recorder):
    ask(recorder, "m", 64, {}, lambda choice: ([], [], []), api_key="gate-key")
    assert set(Recorder.seen) == {"Bearer gate-key"}


def test_the_scraper_sends_the_key_from_its_file_or_the_runs_variable(tmp_path, monkeypatch, recorder):
    key = tmp_path / "key"
    key.write_text("scrape-key")
    monkeypatch.setenv(scraper.KEY_FILE_VARIABLE, str(key))
    assert scraper.use_api_key(None, [recorder])
    assert scraper.fetch_metrics(recorder) is not None
    assert Recorder.seen == ["Bearer scrape-key"]
    monkeypatch.delenv(scraper.KEY_FILE_VARIABLE)
    assert not scraper.use_api_key(None, [recorder])
    urllib.request.install_opener(None)


def test_a_cells_load_target_names_the_key_file_its_server_was_started_with(monkeypatch):
    monkeypatch.setattr(mode_server, "CLIENT_KEY_FILES", {"http://127.0.1.1:8000": "/node/secret/token"})
    assert LoadTarget("http://127.0.1.1:8000", "tiny").api_key_file == "/node/secret/token"
    assert LoadTarget("http://127.0.1.1:8001", "tiny").api_key_file is None
    assert LoadTarget("http://127.0.1.1:8001", "tiny", api_key_file="/k").api_key_file == "/k"


def test_the_key_is_in_no_argv_of_any_process_launch(tmp_path):
    token = read_token(ensure_run_secret(tmp_path))
    path = str(secret_path(tmp_path))
    launches = [get_engine("vllm").launch(vllm_request(ModeSpec(name="pp2", pp=2, executor="mp-multinode"),
                                                       secret=path)),
                get_engine("llamacpp").launch(llama_request(ModeSpec(name="rpc2", pp=2, executor="rpc"), secret=path))]
    for launch in launches:
        for process in launch.processes:
            text = " ".join(env_from_files_argv(process.env_files, process.argv)) + json.dumps(process.env)
            assert token not in text
    assert os.stat(path).st_mode & 0o077 == 0


def test_the_key_handler_comes_back_when_another_opener_took_its_place(tmp_path, recorder):
    key = tmp_path / "key"
    key.write_text("again")
    urllib.request.install_opener(urllib.request.build_opener())
    LoadConfig(base_url=recorder, model="m", clients=1, requests=1, api_key_file=str(key))
    urllib.request.urlopen(recorder + "/health").read()
    assert Recorder.seen == ["Bearer again"]


@pytest.mark.skipif(not Path("/usr/sbin/nginx").exists(), reason="no nginx on this host")
def test_a_real_nginx_refuses_a_request_without_the_token_and_passes_the_header_on(tmp_path, recorder):
    token = read_token(ensure_run_secret(tmp_path))
    include = write_auth_include(secret_path(tmp_path).parent, token)
    balancer = start_balancer(None, None, "r2", "round-robin", {"r0": recorder}, tmp_path, "test.balancer",  # type: ignore[arg-type]
                              str(include))
    try:
        def post(key: str | None) -> int:
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            request = urllib.request.Request(balancer.url + "/v1/completions", data=b"{}", headers=headers)
            try:
                with urllib.request.urlopen(request, timeout=10) as response:
                    return response.status
            except urllib.error.HTTPError as exc:
                return exc.code
            except urllib.error.URLError:
                return 0   # not listening yet

        assert poll(lambda: post(token) == 200, 10, interval_s=0.1)
        assert post(None) == 401 and post("wrong") == 401
        assert Recorder.seen and set(Recorder.seen) == {f"Bearer {token}"}   # only the good ones got through
    finally:
        stop_balancer(None, balancer)  # type: ignore[arg-type]
    assert token not in (balancer.directory / "nginx.conf").read_text()
    assert token not in balancer.access_log.read_text() + balancer.error_log.read_text()
