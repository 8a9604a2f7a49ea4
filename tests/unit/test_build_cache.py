"""The artifact cache's listing and removal (`servebench builds list|gc`), on a cache directory of
this test's own: complete builds (a marker file), an incomplete one, one in use (its lock held)."""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from servebench.builds.cache import MARKER, compile_cache_dir, hold_in_use, list_entries, remove_entry, select_for_gc
from servebench.engines.vllm.launch import compile_cache_env
from tests.support.waiting import wait_until


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
    (tmp_path / ".vllm-new.scratch-x1y2").mkdir()   # a target venv build's scratch: not a build
    entries = list_entries(tmp_path)
    assert [e.key for e in entries] == ["vllm-new", "llamacpp-half", "vllm-old"]
    assert [e.complete for e in entries] == [True, False, True] and entries[0].size_bytes >= 1000
    assert list_entries(tmp_path / "absent") == []


def test_gc_removes_only_what_is_asked():
    now = datetime.now(timezone.utc)

    def entry(key, engine, days, complete=True, target=None):
        from servebench.builds.cache import CacheEntry
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


# The other trees of the cache (servebench/builds/cache_trees.py): a fake cache with two aarch64 venvs on
# two sysroots, their emulation roots, a compile cache, and what is only listed.

def fake_cache(cache: Path) -> None:
    """engines: a host venv and two aarch64 venvs (the old one on an old sysroot); each sysroot with
    node roots linking into it; an orphaned compile cache; partial trees; a model, tools, sources."""
    engines = cache / "engines"
    artifact(engines, "vllm-host", "vllm", age_days=3)
    for name, days in (("old", 20), ("new", 2)):
        sysroot = cache / "sysroots" / f"debian-arm64-{name}"
        (sysroot / "usr" / "bin").mkdir(parents=True)
        (sysroot / "usr" / "bin" / "python3.11").write_bytes(b"\x7fELF" * 100)
        (sysroot / "servebench-sysroot.json").write_text("{}")
        _age(sysroot / "servebench-sysroot.json", days)
        venv = engines / f"vllm-aarch64-{name}"
        artifact(engines, venv.name, "vllm", age_days=days)
        (venv / MARKER).write_text(json.dumps({"engine": "vllm", "engine_version": "0.32.0", "inputs": {
            "target": "manylinux_2_28_aarch64", "sysroot": {"key": sysroot.name}}}))
        (venv / "bin" / "python").symlink_to(sysroot / "usr" / "bin" / "python3.11")
        _age(venv, days)
    (cache / "sysroots" / "debian-arm64-half.partial" / "usr").mkdir(parents=True)
    for root, sysroot, days in (("graviton3-new", "new", 1), ("graviton3-stale", "new", 5),
                                ("graviton2-old", "old", 20), ("a64fx-x.partial-999999999", "new", 1)):
        directory = cache / "emulation" / root
        (directory / "proc").mkdir(parents=True)
        (directory / "proc" / "cpuinfo").write_text("processor\t: 0\n")
        (directory / "usr").symlink_to(cache / "sysroots" / f"debian-arm64-{sysroot}" / "usr")
        _age(directory, days)
    (cache / "compile" / "vllm-aarch64-old" / "inductor").mkdir(parents=True)
    (cache / "compile" / "vllm-gone" / "inductor").mkdir(parents=True)
    for tree in ("models/tiny-llama-abc", "tools/node-sampler-abc", "sources/vllm-0.32.0", "sources/git/0123",
                 "ccache"):
        (cache / tree).mkdir(parents=True)
        (cache / tree / "file").write_bytes(b"y" * 100)


def _age(path: Path, days: float) -> None:
    stamp = time.time() - days * 86400
    os.utime(path, (stamp, stamp), follow_symlinks=False)


def gc(cache: Path, *args: str) -> tuple[int, set[str]]:
    """`servebench builds gc` in this process; its exit code and the (kind, key) of what is left."""
    from servebench.builds.cache_trees import list_cache
    from servebench.cli import main
    code = main(["builds", "gc", *args])
    return code, {f"{i.kind} {i.key}" for i in list_cache(cache)}


def test_builds_list_shows_every_tree_of_the_cache(tmp_path, monkeypatch, capsys):
    from servebench.builds.cache_trees import list_cache
    from servebench.cli import main
    fake_cache(tmp_path)
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path))
    items = {f"{i.kind} {i.key}": i for i in list_cache(tmp_path)}
    assert set(items) == {
        "engine vllm-host", "engine vllm-aarch64-old", "engine vllm-aarch64-new",
        "compile vllm-aarch64-old", "compile vllm-gone",
        "sysroot debian-arm64-new", "sysroot debian-arm64-old", "sysroot debian-arm64-half.partial",
        "emulation graviton3-new", "emulation graviton3-stale", "emulation graviton2-old",
        "emulation a64fx-x.partial-999999999", "model tiny-llama-abc", "tool node-sampler-abc",
        "source vllm-0.32.0", "source git/0123", "ccache ccache"}
    assert items["engine vllm-aarch64-old"].refers_to == "debian-arm64-old"    # the venv's python links there
    assert items["engine vllm-host"].refers_to is None
    assert items["emulation graviton2-old"].refers_to == "debian-arm64-old"   # its directories link there
    assert items["emulation graviton2-old"].lineage == "graviton2/debian-arm64-old"
    assert not items["sysroot debian-arm64-half.partial"].complete
    assert not items["emulation a64fx-x.partial-999999999"].complete
    assert items["sysroot debian-arm64-new"].size_bytes == 402   # its files (python, marker)
    assert items["emulation graviton3-new"].size_bytes < 100   # not the sysroot it links
    assert (datetime.now(timezone.utc) - items["sysroot debian-arm64-old"].last_used).days == 20   # its marker
    assert "gone" in items["compile vllm-gone"].detail
    assert main(["builds", "list"]) == 0
    out = capsys.readouterr().out
    assert "sysroot   debian-arm64-new" in out and "emulation graviton3-new" in out
    assert "model     tiny-llama-abc" in out


def test_gc_keep_removes_the_old_build_with_what_only_it_needed(tmp_path, monkeypatch):
    fake_cache(tmp_path)
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path))
    code, left = gc(tmp_path, "--keep", "1")
    assert code == 0
    gone = {"engine vllm-aarch64-old", "compile vllm-aarch64-old",   # the build and its compile cache
            "compile vllm-gone",                                      # a compile cache whose build went before
            "sysroot debian-arm64-old",                               # the newest build of arm64 is on the new one
            "emulation graviton2-old",                                # on the sysroot that went
            "emulation graviton3-stale"}                              # an older root of the same profile and sysroot
    assert not gone & left
    assert {"engine vllm-host", "engine vllm-aarch64-new", "sysroot debian-arm64-new", "emulation graviton3-new",
            "sysroot debian-arm64-half.partial", "emulation a64fx-x.partial-999999999",   # --incomplete's
            "model tiny-llama-abc", "tool node-sampler-abc", "source git/0123", "ccache ccache"} <= left
    # the kept venv's python still runs from its sysroot: removing a root never followed its links
    assert (tmp_path / "engines" / "vllm-aarch64-new" / "bin" / "python").resolve().is_file()
    code, left = gc(tmp_path, "--incomplete")
    assert code == 0 and not {"sysroot debian-arm64-half.partial", "emulation a64fx-x.partial-999999999"} & left


def test_gc_keeps_what_a_run_uses_and_what_a_kept_build_needs(tmp_path, monkeypatch, capsys):
    fake_cache(tmp_path)
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path))
    use = hold_in_use(tmp_path / "engines", "vllm-aarch64-old")   # a run serves the old aarch64 build
    try:
        code, left = gc(tmp_path, "--keep", "1")
    finally:
        use.close()
    assert code == 1   # asked to remove something in use
    assert {"engine vllm-aarch64-old", "compile vllm-aarch64-old", "sysroot debian-arm64-old",
            "emulation graviton2-old"} <= left
    assert "emulation graviton3-stale" not in left
    out = capsys.readouterr().out
    assert "kept engine vllm-aarch64-old: in use" in out
    assert "kept sysroot debian-arm64-old: needed: a build links to it (build vllm-aarch64-old)" in out
    # named, a sysroot a build needs stays, and so does a model (nothing says whether a run reads it)
    code, left = gc(tmp_path, "--key", "debian-arm64-new", "--key", "tiny-llama-abc")
    assert code == 1 and {"sysroot debian-arm64-new", "model tiny-llama-abc"} <= left
    assert "kept model tiny-llama-abc: gc does not remove a model" in capsys.readouterr().out


def test_a_sysroot_held_by_a_venv_build_or_a_root_used_by_a_process_stays(tmp_path, monkeypatch):
    import subprocess
    import sys

    from servebench.builds.cache_trees import process_paths, remove_emulation_root, remove_sysroot
    from servebench.platform import sysroot as sysroot_module
    fake_cache(tmp_path)
    packages = {"python3.11": "3.11.2-6"}
    key = sysroot_module.sysroot_key("aarch64", packages)
    (tmp_path / "sysroots" / "debian-arm64-old").rename(tmp_path / "sysroots" / key)
    monkeypatch.setattr(sysroot_module, "closure", lambda arch, minor, extra=(): packages)   # no apt: the tree is there
    with sysroot_module.sysroot_in_use("aarch64", "3.11", tmp_path, log=print) as held:
        assert held.key == key
        assert remove_sysroot(tmp_path, key) is False          # a venv is being built on it
    assert remove_sysroot(tmp_path, key) is True
    assert (tmp_path / "sysroots" / f"{key}.use").exists()     # the lock file stays (see use_file)
    root = tmp_path / "emulation" / "graviton3-new"
    qemu_like = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "-L", str(root)])
    try:
        wait_until(lambda: str(root) in process_paths(), "the stand-in's -L root in its command line")
        assert remove_emulation_root(tmp_path, "graviton3-new") is False   # a process runs under it
    finally:
        qemu_like.kill()
        qemu_like.wait()
    assert remove_emulation_root(tmp_path, "graviton3-new") is True
    assert (tmp_path / "sysroots" / "debian-arm64-new" / "usr" / "bin" / "python3.11").is_file()


def test_older_than_days_counts_from_the_last_use(tmp_path, monkeypatch):
    artifact(tmp_path / "engines", "vllm-built-long-ago", "vllm", age_days=40)
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path))
    hold_in_use(tmp_path / "engines", "vllm-built-long-ago").close()   # a run used it today
    code, left = gc(tmp_path, "--older-than-days", "10")
    assert code == 0 and "engine vllm-built-long-ago" in left
