"""What a run starts refuses another user of the node: llama-server and the nginx balancer in front of it,
both asking for the run's token, probed over loopback as `nobody` (another account of the host, who cannot
read the run's token file); and the run's Ray cluster (RAY_AUTH_MODE=token), which refuses a driver without
the token (no job, no task, no state read) and serves one with it. docs/security.md says what each leaves open.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from servebench.builds.builders import ensure
from servebench.campaign.loading import load_campaign
from servebench.config.campaign import ModeSpec
from servebench.engines import get_engine
from servebench.load.run_secret import ensure_run_secret, read_token
from servebench.paths import cache_dir
from servebench.providers import get_provider
from servebench.serving.balancer import AUTH_INCLUDE, Upstreams, start_nginx, stop_balancer, write_auth_include
from tests.support.served import first_mode_served

CAMPAIGNS = Path(__file__).parents[1] / "campaigns" / "good"
pytestmark = [pytest.mark.root]
# What llama-server answers without its key: its health (the build's llama-server asks for the key on the model
# list too, which llama.cpp's newer servers list as public)
LLAMA_OPEN = {"/health": 200}
ROUTES = [("GET", "/health"), ("GET", "/v1/models"), ("GET", "/metrics"), ("GET", "/slots"), ("GET", "/props"),
          ("POST", "/v1/completions"), ("POST", "/completion"), ("POST", "/tokenize"), ("POST", "/v1/chat/completions")]
PROBE = r"""
import json, sys, urllib.error, urllib.request
base, routes, key_file = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
try:
    open(key_file).read()
    readable = True
except OSError:
    readable = False
found = {}
for method, path in routes:
    body = json.dumps({"prompt": "hi", "model": "tiny", "max_tokens": 2, "content": "hi",
                       "messages": [{"role": "user", "content": "hi"}]}).encode() if method == "POST" else None
    request = urllib.request.Request(base + path, data=body, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            found[path] = response.status
    except urllib.error.HTTPError as error:
        found[path] = error.code
print(json.dumps({"key_readable": readable, "status": found}))
"""


def as_nobody(base_url: str, key_file: Path) -> dict:
    """The probe run by the host's `nobody` with the system's python3: each route's status, and whether the
    run's token file was readable to it."""
    done = subprocess.run(["runuser", "-u", "nobody", "--", "/usr/bin/python3", "-c", PROBE, base_url,
                           json.dumps(ROUTES), str(key_file)], capture_output=True, text=True, timeout=120, cwd="/")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def no_second_account() -> str | None:
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return "probing as another user needs root (runuser)"
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        return "the host has no `nobody` account"
    return None


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    if (reason := no_second_account()) is not None:
        print(f"skipped: {reason}")
        pytest.skip(reason)
    return tmp_path_factory.mktemp("run")


@pytest.mark.llamacpp
def test_llama_server_and_its_balancer_refuse_another_user(run_dir):
    key_file = ensure_run_secret(run_dir)
    token = read_token(key_file)
    with first_mode_served(CAMPAIGNS / "e2e-llamacpp.yaml", run_dir / "servers", secret_file=key_file) as (server,
                                                                                                       _, _):
        write_auth_include(key_file.parent, token)
        provider = get_provider(load_campaign(CAMPAIGNS / "e2e-llamacpp.yaml"))
        balancer = start_nginx(provider, None, Upstreams("local", "least-connections", {"r0": server.url}, None),
                               run_dir, "secondusertest.balancer", str(key_file.parent / AUTH_INCLUDE))
        try:
            direct, through = as_nobody(server.url, key_file), as_nobody(balancer.url, key_file)
        finally:
            stop_balancer(provider, balancer)
    assert direct["key_readable"] is False and through["key_readable"] is False
    assert {path: code for path, code in direct["status"].items() if code != 401} == LLAMA_OPEN, direct
    # nginx checks the token under /v1/ and passes the rest on to llama-server, which asks for it itself; it
    # answers /metrics itself with 404 (nothing of the replicas' metrics): only /health reaches a replica unasked
    assert {path: code for path, code in through["status"].items() if code != 401} == {"/health": 200,
                                                                                       "/metrics": 404}, through


RAY_DRIVER = r"""
import os, sys
for name in [n for n in os.environ if n.startswith(("RAY_", "PYTHON", "VIRTUAL_ENV"))]:
    del os.environ[name]
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
if sys.argv[2]:
    os.environ["RAY_AUTH_MODE"], os.environ["RAY_AUTH_TOKEN_PATH"] = "token", sys.argv[2]
import ray
try:
    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
    print("nodes", len(ray.nodes()), "task", ray.get(ray.remote(lambda: 41 + 1).remote()))
except Exception as error:
    print("refused", type(error).__name__, str(error)[:300])
"""


@pytest.mark.vllm
def test_the_run_s_ray_cluster_refuses_a_driver_without_its_token(run_dir, tmp_path):
    campaign = load_campaign(CAMPAIGNS / "e2e-ray.yaml")
    engine = get_engine("vllm")
    build = ensure(engine.build_recipe(campaign.engine), cache_dir(), log=lambda _: None)
    provider = get_provider(campaign)
    nodes = provider.allocate()[:1]
    wrong = tmp_path / "wrong-token"
    wrong.write_text("0" * 64)
    wrong.chmod(0o600)
    cluster = engine.start_shared([ModeSpec(name="tp1-ray", executor="ray")], campaign.engine, nodes,
                                  build.venv_path, provider, run_dir)
    try:
        token = cluster.plans[0].env["RAY_AUTH_TOKEN_PATH"]

        def driver(token_path: str) -> str:
            done = subprocess.run([build.python, "-c", RAY_DRIVER, cluster.address, token_path], capture_output=True,
                                  text=True, timeout=180, cwd=str(tmp_path))
            return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]

        without, mistaken, allowed = driver(""), driver(str(wrong)), driver(token)
        nobody_reads = subprocess.run(["runuser", "-u", "nobody", "--", "cat", token], capture_output=True, timeout=30)
    finally:
        engine.stop_shared(cluster, provider)
        provider.release()
    assert without.startswith("refused"), without
    assert mistaken.startswith("refused"), mistaken
    assert allowed == "nodes 1 task 42", allowed
    assert nobody_reads.returncode != 0 and nobody_reads.stdout == b""
    print(sys.version, without, mistaken, sep="\n")
