"""What a build needs from the host, checked before it starts (servebench/builds/prerequisites.py),
and vLLM's source build preflight: `servebench build campaigns/vllm-source.yaml --dry-run` names
every unmet prerequisite and exits non-zero; a staged oneDNN tree turns its line to ok, and so
does a oneDNN repository that git can reach ("fetched at configure time").

The reachability probe is only ever pointed at 127.0.0.1 here (SERVEBENCH_GITHUB_URL): a git
smart-HTTP server of real local repositories, or a port nothing listens on, or one that never
answers. `loopback_git` also takes away proxies and git's user/system configuration, so no
request can leave the machine."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from servebench.builds.prerequisites import (
    GITHUB_URL_VARIABLE,
    Prerequisite,
    PrerequisiteError,
    RemoteSource,
    describe,
    fetchable_source,
    github_mirror_env,
    probe_git,
    require,
    tool,
    version_tuple,
)
from servebench.engines.vllm.source_build import ONEDNN_X86, compiler_floor, wheel_recipe
from servebench.engines.vllm.spec import VllmSourceSpec
from servebench.paths import CHECKOUT

PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")


def test_versions_tools_and_source_trees_are_checked_and_described():
    assert version_tuple("cmake version 3.25.1") == (3, 25, 1) and version_tuple("none") == ()
    python = tool("python", sys.executable, "-", [sys.executable, "--version"], "3.0")
    assert python.met and python.found.startswith(f"{sys.executable} 3.")
    too_new = tool("python", sys.executable, "-", [sys.executable, "--version"], "99.1")
    assert not too_new.met and too_new.needed.endswith(">= 99.1")
    assert tool("x", "no-such-tool-here", "apt-get install x").found == "missing"


def test_every_unmet_prerequisite_is_named_at_once():
    checks = [Prerequisite(name="a", met=True, found="ok", needed="a"),
              Prerequisite(name="b", met=False, found="missing", needed="b >= 2", fix="install b"),
              Prerequisite(name="c", met=False, found="1.0", needed="c >= 2", fix="upgrade c")]
    assert describe(checks).splitlines()[1] == "  [MISSING] b: missing; needs b >= 2 -> install b"
    with pytest.raises(PrerequisiteError, match=r"2 prerequisite\(s\) not met") as caught:
        require(checks, "engine x")
    assert "install b" in str(caught.value) and "upgrade c" in str(caught.value) and "[ok" not in str(caught.value)


def test_vllm_asks_gcc_12_3_on_x86_unless_the_shipped_patch_relaxes_it():
    assert compiler_floor(VllmSourceSpec(patches=[]), "x86_64") == "12.3"
    assert compiler_floor(VllmSourceSpec(), "x86_64") == "12.2"   # the default patch set
    patch = (CHECKOUT / "servebench/engines/vllm/patches/gcc-12.2-x86.patch").read_text()
    assert "+            CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12.2))" in patch


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", "-c", "user.name=servebench", "-c", "user.email=servebench@localhost", *args],
                          cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def tagged_repository(path: Path, tag: str) -> str:
    """A local repository with one commit under an annotated `tag`; its commit id."""
    path.mkdir(parents=True)
    git("init", "--quiet", cwd=path)
    (path / "CMakeLists.txt").write_text("project(oneDNN)\n")
    git("add", "CMakeLists.txt", cwd=path)
    git("commit", "--quiet", "-m", "oneDNN stand-in", cwd=path)
    git("tag", "-a", tag, "-m", tag, cwd=path)
    return git("rev-parse", "HEAD", cwd=path)


class GitRefsServer:
    """git's smart-HTTP ref advertisement of local repositories on 127.0.0.1: the answer to
    `GET /<owner>/<name>.git/info/refs?service=git-upload-pack`, made by `git upload-pack
    --advertise-refs` itself. That is all `git ls-remote` asks of a protocol-v0 server (a v2
    request is answered in v0, which git accepts). Every request path is recorded."""

    def __init__(self, repositories: dict[str, Path]):
        self.repositories = repositories
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.requests.append(self.path)
                repository, _, query = self.path.partition("/info/refs?")
                if query != "service=git-upload-pack" or repository not in server.repositories:
                    self.send_error(404)
                    return
                advertisement = subprocess.run(
                    ["git", "upload-pack", "--stateless-rpc", "--advertise-refs", str(server.repositories[repository])],
                    check=True, capture_output=True, env=os.environ | {"GIT_PROTOCOL": ""}).stdout
                body = b"001e# service=git-upload-pack\n0000" + advertisement
                self.send_response(200)
                self.send_header("Content-Type", "application/x-git-upload-pack-advertisement")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:   # the requests are asserted on, not printed
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> GitRefsServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def loopback_git(monkeypatch) -> Iterator[dict[str, str]]:
    """The environment the probe runs in: no proxy, no user or system git configuration (an
    insteadOf there could send it elsewhere), SERVEBENCH_GITHUB_URL set by each test to 127.0.0.1."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("GIT_CONFIG_COUNT", raising=False)
    for name, value in {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
                        "NO_PROXY": "127.0.0.1", "no_proxy": "127.0.0.1"}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv(GITHUB_URL_VARIABLE, f"http://127.0.0.1:{closed_port()}")
    yield dict(os.environ)


@pytest.fixture
def onednn_server(tmp_path) -> Iterator[tuple[GitRefsServer, str]]:
    """The server with oneDNN's stand-in at GitHub's path, tagged as vLLM 0.32.0's CMake asks (v3.13)."""
    commit = tagged_repository(tmp_path / "oneDNN-remote", ONEDNN_X86.ref)
    with GitRefsServer({"/oneapi-src/oneDNN.git": tmp_path / "oneDNN-remote"}) as server:
        yield server, commit


def test_a_source_not_staged_is_fetched_at_configure_time_when_git_reaches_its_repository(
        tmp_path, loopback_git, onednn_server, monkeypatch):
    server, commit = onednn_server
    monkeypatch.setenv(GITHUB_URL_VARIABLE, server.url + "/")
    fetched = fetchable_source("oneDNN source", str(tmp_path / "not-staged"), "CMakeLists.txt", ONEDNN_X86, "stage it")
    assert fetched.met, fetched
    assert fetched.found == (f"fetched at configure time: {server.url}/oneapi-src/oneDNN.git has v3.13 "
                             f"(commit {commit[:12]}); {tmp_path / 'not-staged'} has no CMakeLists.txt")
    assert server.requests == ["/oneapi-src/oneDNN.git/info/refs?service=git-upload-pack"]

    # the repository answers, but not with the tag the CMake clones: refused, naming the ref
    other_tag = probe_git(RemoteSource(repository=ONEDNN_X86.repository, ref="v9.99"))
    assert other_tag == (False, f"{server.url}/oneapi-src/oneDNN.git has no ref v9.99")
    # a pinned commit (aarch64) cannot be listed: the repository answering is what can be known
    pinned = probe_git(RemoteSource(repository=ONEDNN_X86.repository, ref=commit))
    assert pinned[0] and "is fetched by id" in pinned[1], pinned
    # a repository the server does not have: git's own error, the URL named
    absent, seen = probe_git(RemoteSource(repository="https://github.com/ARM-software/ComputeLibrary.git",
                                          ref="v52.6.0"))
    assert not absent and seen.startswith(f"{server.url}/ARM-software/ComputeLibrary.git is not reachable ("), seen

    # a staged tree is used as it is: no probe, so an offline host never waits for one
    staged_tree = tmp_path / "oneDNN"
    staged_tree.mkdir()
    (staged_tree / "CMakeLists.txt").write_text("project(oneDNN)\n")
    asked = len(server.requests)
    staged = fetchable_source("oneDNN source", str(staged_tree), "CMakeLists.txt", ONEDNN_X86, "stage it")
    assert staged.met and staged.found == str(staged_tree) and len(server.requests) == asked


def test_a_source_neither_staged_nor_reachable_is_missing_with_its_url_named(tmp_path, loopback_git, monkeypatch):
    nothing = f"http://127.0.0.1:{closed_port()}"
    monkeypatch.setenv(GITHUB_URL_VARIABLE, nothing)
    started = time.monotonic()
    missing = fetchable_source("oneDNN source", None, "CMakeLists.txt", ONEDNN_X86, "stage oneDNN")
    assert not missing.met and time.monotonic() - started < 10
    assert missing.found.startswith(f"no local tree given, and {nothing}/oneapi-src/oneDNN.git is not reachable ("), \
        missing.found
    assert missing.needed == f"a local source tree with CMakeLists.txt, or {nothing}/oneapi-src/oneDNN.git v3.13 " \
                             "reachable with git"
    assert missing.fix == f"stage oneDNN; or let this host reach it ({GITHUB_URL_VARIABLE} names a mirror of " \
                          "https://github.com)"

    # a host that accepts the connection and never answers: git is stopped at the deadline
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        monkeypatch.setenv(GITHUB_URL_VARIABLE, url)
        started = time.monotonic()
        hung = fetchable_source("oneDNN source", None, "CMakeLists.txt", ONEDNN_X86, "stage oneDNN", timeout=1.0)
        waited = time.monotonic() - started
    assert not hung.met and hung.found == f"no local tree given, and {url}/oneapi-src/oneDNN.git did not answer " \
                                          "within 1 s"
    assert 1.0 <= waited < 5.0, waited

    # without git nothing can be fetched, whatever the network
    no_git = probe_git(ONEDNN_X86, environ=loopback_git | {"PATH": str(tmp_path)})
    assert no_git == (False, f"git is not on PATH to fetch {loopback_git[GITHUB_URL_VARIABLE]}/oneapi-src/oneDNN.git "
                             "(CMake's FetchContent clones with git)")


def test_the_recipe_leaves_a_fetched_source_to_cmake_and_sends_its_git_where_the_probe_went(tmp_path, monkeypatch):
    monkeypatch.delenv("GIT_CONFIG_COUNT", raising=False)
    monkeypatch.setenv(GITHUB_URL_VARIABLE, "http://127.0.0.1:9/")
    fetched = wheel_recipe(VllmSourceSpec(onednn_dir=str(tmp_path / "not-staged")), arch="x86_64")
    assert "FETCHCONTENT_SOURCE_DIR_ONEDNN" not in fetched.staged_sources   # else CMake would not fetch
    assert {name: value for name, value in fetched.build_env.items() if name.startswith("GIT_")} == {
        "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "url.http://127.0.0.1:9/.insteadOf",
        "GIT_CONFIG_VALUE_0": "https://github.com/"}
    # after the git configuration the environment already carries, not over it
    assert github_mirror_env({"GIT_CONFIG_COUNT": "2", GITHUB_URL_VARIABLE: "http://127.0.0.1:9"}) == {
        "GIT_CONFIG_COUNT": "3", "GIT_CONFIG_KEY_2": "url.http://127.0.0.1:9/.insteadOf",
        "GIT_CONFIG_VALUE_2": "https://github.com/"}

    staged = tmp_path / "oneDNN"
    staged.mkdir()
    (staged / "CMakeLists.txt").write_text("project(oneDNN)\n")
    recipe = wheel_recipe(VllmSourceSpec(onednn_dir=str(staged)), arch="x86_64")
    assert recipe.staged_sources == {"FETCHCONTENT_SOURCE_DIR_ONEDNN": str(staged)}
    assert not any(name.startswith("GIT_") for name in recipe.build_env)   # nothing fetched: the key as before
    monkeypatch.delenv(GITHUB_URL_VARIABLE)
    assert github_mirror_env() == {} and not any(
        name.startswith("GIT_") for name in wheel_recipe(VllmSourceSpec(), arch="x86_64").build_env)
    # on aarch64 the Arm Compute Library is the second tree: staged by its SConstruct, else fetched
    acl = tmp_path / "ComputeLibrary"
    acl.mkdir()
    (acl / "SConstruct").write_text("# ACL\n")
    arm = wheel_recipe(VllmSourceSpec(onednn_dir=str(staged), acl_dir=str(acl)), arch="aarch64")
    assert arm.staged_sources == {"FETCHCONTENT_SOURCE_DIR_ONEDNN": str(staged), "ACL_ROOT_DIR": str(acl)}


def dry_run(campaign: Path, github_url: str) -> subprocess.CompletedProcess:
    """`servebench build CAMPAIGN --dry-run` with the probe pointed at `github_url` (loopback only)."""
    env = {name: value for name, value in os.environ.items() if name not in PROXY_VARIABLES}
    return subprocess.run([sys.executable, "-m", "servebench", "build", str(campaign), "--dry-run"],
                          env=env | {"PYTHONPATH": str(CHECKOUT), GITHUB_URL_VARIABLE: github_url},
                          capture_output=True, text=True, timeout=600)


def campaign_copy(tmp_path: Path, onednn: Path, extra_patch: str | None = None) -> Path:
    """campaigns/vllm-source.yaml with oneDNN staged at `onednn` (and one more patch): whatever this host has."""
    text = (CHECKOUT / "campaigns" / "vllm-source.yaml").read_text().replace("/opt/src/oneDNN-3.13", str(onednn))
    if extra_patch:
        text = text.replace("patches: [gcc-12.2-x86, gcc-12.2-flash-mla, cpu-slot-mapping]",
                            f"patches: [gcc-12.2-x86, gcc-12.2-flash-mla, cpu-slot-mapping, {extra_patch}]")
    path = tmp_path / f"vllm-source-{onednn.name}.yaml"
    path.write_text(text)
    return path


def test_the_vllm_source_dry_run_lists_what_is_missing_and_exits_non_zero(tmp_path, loopback_git):
    nothing = f"http://127.0.0.1:{closed_port()}"
    done = dry_run(campaign_copy(tmp_path, tmp_path / "not-staged"), nothing)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "cannot be built here" in done.stdout
    assert (f"[MISSING] oneDNN source: {tmp_path / 'not-staged'} has no CMakeLists.txt, and "
            f"{nothing}/oneapi-src/oneDNN.git is not reachable (") in done.stdout, done.stdout
    assert done.stdout.count("[ok     ]") + done.stdout.count("[MISSING]") == 13   # every check, met or not

    staged = tmp_path / "oneDNN"
    staged.mkdir()
    (staged / "CMakeLists.txt").write_text("project(oneDNN)\n")
    done = dry_run(campaign_copy(tmp_path, staged, extra_patch=str(tmp_path / "absent.patch")), nothing)
    assert done.returncode == 1 and f"[ok     ] oneDNN source: {staged}" in done.stdout, done.stdout
    assert f"[MISSING] patch {tmp_path / 'absent.patch'}: no {tmp_path / 'absent.patch'}" in done.stdout


def test_the_vllm_source_dry_run_says_fetched_when_the_onednn_repository_answers(tmp_path, loopback_git,
                                                                                  onednn_server):
    """A host that reaches GitHub (here: the server standing for it) gets oneDNN's line ok without
    staging anything. The absent patch keeps the run from going on to
    the build key, which would download vLLM's sdist."""
    server, commit = onednn_server
    absent = tmp_path / "absent.patch"
    done = dry_run(campaign_copy(tmp_path, tmp_path / "not-staged", extra_patch=str(absent)), server.url)
    assert (f"[ok     ] oneDNN source: fetched at configure time: {server.url}/oneapi-src/oneDNN.git has v3.13 "
            f"(commit {commit[:12]}); {tmp_path / 'not-staged'} has no CMakeLists.txt") in done.stdout, done.stdout
    assert "[MISSING] oneDNN" not in done.stdout and f"[MISSING] patch {absent}" in done.stdout
    assert done.returncode == 1 and server.requests == ["/oneapi-src/oneDNN.git/info/refs?service=git-upload-pack"]
