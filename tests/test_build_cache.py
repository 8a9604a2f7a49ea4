"""The artifact cache's listing and removal (`servebench builds list|gc`), on a cache directory of
this test's own: complete builds (a marker file), an incomplete one, one in use (its lock held)."""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from servebench.build.cache import MARKER, compile_cache_dir, hold_in_use, list_entries, remove_entry, select_for_gc
from servebench.engines.vllm.launch import compile_cache_env


def artifact(root, key: str, engine: str | None, age_days: float = 0.0) -> None:
    directory = root / key
    (directory / "bin").mkdir(parents=True)
    (directory / "bin" / "tool").write_bytes(b"x" * 1000)
    if engine:
        (directory / MARKER).write_text(json.dumps({"engine": engine, "engine_version": "1.0",
                                                    "created_at": "2026-11-01T00:00:00Z"}))
    (root / f"{key}.build.log").write_text("log")
    stamp = time.time() - age_days * 86400
    os.utime(directory, (stamp, stamp))


def test_builds_are_listed_newest_first_with_their_state_and_size(tmp_path):
    artifact(tmp_path, "vllm-old", "vllm", age_days=30)
    artifact(tmp_path, "vllm-new", "vllm")
    artifact(tmp_path, "llamacpp-half", None, age_days=1)
    entries = list_entries(tmp_path)
    assert [e.key for e in entries] == ["vllm-new", "llamacpp-half", "vllm-old"]
    assert [e.complete for e in entries] == [True, False, True] and entries[0].size_bytes >= 1000
    assert list_entries(tmp_path / "absent") == []


def test_gc_removes_only_what_is_asked():
    now = datetime.now(timezone.utc)

    def entry(key, engine, days, complete=True, target=None):
        from servebench.build.cache import CacheEntry
        stamp = datetime.fromtimestamp(now.timestamp() - days * 86400, timezone.utc)
        return CacheEntry(key=key, engine=engine, version="1", complete=complete, size_bytes=1, created_at=None,
                          modified_at=stamp, path=key, target=target)

    entries = [entry("v3", "vllm", 0), entry("g2", "llamacpp", 0.5, target="graviton2"), entry("l2", "llamacpp", 1),
               entry("v2", "vllm", 5), entry("x", None, 6, complete=False), entry("v1", "vllm", 40)]
    keys = lambda chosen: [e.key for e in chosen]  # noqa: E731
    assert select_for_gc(entries, now) == []
    assert keys(select_for_gc(entries, now, keep_per_engine=1)) == ["v2", "v1"]  # each engine *and target* keeps one
    assert keys(select_for_gc(entries, now, older_than_days=10)) == ["v1"]
    assert keys(select_for_gc(entries, now, incomplete=True, keys=["l2"])) == ["l2", "x"]


def test_a_build_being_built_or_used_by_a_run_is_not_removed(tmp_path):
    for key in ("vllm-a", "vllm-b", "vllm-c"):
        artifact(tmp_path, key, "vllm")
    with open(tmp_path / "vllm-a.lock", "w") as building:
        fcntl.flock(building, fcntl.LOCK_EX)   # a build in progress
        assert remove_entry(tmp_path, "vllm-a") is False
    use = hold_in_use(tmp_path, "vllm-b")     # a run serving from it
    assert remove_entry(tmp_path, "vllm-b") is False
    use.close()
    assert (tmp_path / "vllm-a" / MARKER).exists() and (tmp_path / "vllm-b" / MARKER).exists()
    assert remove_entry(tmp_path, "vllm-c") is True
    assert not any(p.name.startswith("vllm-c") for p in tmp_path.iterdir())
    assert remove_entry(tmp_path, "vllm-b") is True   # the run ended


def test_a_builds_compile_cache_sits_beside_it_and_goes_with_it(tmp_path):
    engines = tmp_path / "engines"
    artifact(engines, "vllm-a", "vllm")
    kernels = compile_cache_dir(engines / "vllm-a") / "inductor"
    assert kernels == tmp_path / "compile" / "vllm-a" / "inductor"
    kernels.mkdir(parents=True)
    (kernels / "kernel.so").write_bytes(b"\x7fELF")
    env = compile_cache_env(str(engines / "vllm-a"))
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(kernels) and env["VLLM_DISABLE_COMPILE_CACHE"] == "1"
    assert Path(env["VLLM_CACHE_ROOT"]).parent == kernels.parent   # nothing in the user's ~/.cache
    assert [e.key for e in list_entries(engines)] == ["vllm-a"]      # not a build of its own
    assert remove_entry(engines, "vllm-a") is True
    assert not (tmp_path / "compile" / "vllm-a").exists()
