"""Every tree of the cache, for `servebench builds list|gc`: the engine builds (`engines/`, cache.py)
and what the ARM work and the runs keep beside them.

- engine builds (`engines/<key>`): a build holds `<key>.lock`, a run `<key>.use` (cache.py);
- compile caches (`compile/<key>`): go with their build;
- sysroots (`sysroots/<key>`): held by `<key>.use` while unpacked or while a venv is built on one
  (sysroot.py), needed while an engine build that stays links to one;
- emulation roots (`emulation/<profile>-<hash>`): used by the processes that run under one (qemu's
  `-L ROOT`), needed while a build that stays runs on its sysroot;
- models, sources, tools, ccache, scratch: listed only.

The rules and what each kind counts as its lineage are in docs/builds.md ("The cache's trees").
Models, sources (sdists, the .debs sysroots are made of, git mirrors) and tools (the node sampler,
the load generator, the hwcap probe) are read by runs and builds at any time without a lock or
marker, so gc cannot tell they are unused: it lists them and never removes them.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from pydantic import BaseModel

from servebench.builds.cache import (
    MARKER,
    CacheEntry,
    _record,
    _size,
    file_lock_held,
    list_entries,
    lock_held,
    remove_entry,
    select_for_gc,
)
from servebench.platform.emulation import EMULATION
from servebench.platform.sysroot import MARKER as SYSROOT_MARKER
from servebench.platform.sysroot import SYSROOTS, use_file

REMOVABLE = ("engine", "compile", "sysroot", "emulation")
LISTED_ONLY = {"models": "model", "sources": "source", "tools": "tool"}
WHOLE = {"ccache": "ccache", "scratch": "scratch"}


class CacheItem(BaseModel):
    """One tree of the cache as `builds list` shows it and `builds gc` decides on it."""

    kind: str                        # engine, compile, sysroot, emulation, model, source, tool, ccache, scratch
    key: str
    path: str
    size_bytes: int
    last_used: datetime              # its last build or use, as far as the cache records it
    complete: bool = True            # False: a build or unpacking that never finished
    detail: str = ""                 # engine and version, a sysroot's architecture, ...
    lineage: str = ""                # what `gc --keep N` counts within
    refers_to: str | None = None     # the sysroot an engine venv or emulation root runs on; a compile cache's build
    in_use: bool = False             # a lock held or a process naming it, when listed
    entry: CacheEntry | None = None  # an engine build's own entry


class GcPlan(BaseModel):
    """What gc removes, in order (dependents before what they depend on), and what it keeps and why."""

    remove: list[CacheItem] = []
    kept: list[tuple[CacheItem, str]] = []


@dataclass(frozen=True)
class GcRules:
    """What `builds gc` was asked to remove, the same for every kind of tree: these keys, trees unused for
    `older_than_days` (as of `now`), incomplete ones, all but the newest `keep` complete ones of a lineage."""

    now: datetime
    keys: tuple[str, ...] = ()
    older_than_days: float | None = None
    incomplete: bool = False
    keep: int | None = None

    def old(self, item: CacheItem) -> bool:
        return self.older_than_days is not None and \
            (self.now - item.last_used).total_seconds() > self.older_than_days * 86400

    def chosen(self, items: list[CacheItem]) -> set[str]:
        """select_for_gc's rules over items of one kind (newest first): named, unused for N days,
        incomplete, or beyond the newest N complete ones of their lineage."""
        chosen: set[str] = set()
        seen: dict[str, int] = {}  # lineage -> complete items of it so far
        for item in items:
            if item.key in self.keys or self.old(item) or (self.incomplete and not item.complete):
                chosen.add(item.key)
            if self.keep is not None and item.complete:
                seen[item.lineage] = seen.get(item.lineage, 0) + 1
                if seen[item.lineage] > self.keep:
                    chosen.add(item.key)
        return chosen


def list_cache(cache: Path) -> list[CacheItem]:
    """Every tree of the cache, engines first, each kind newest first."""
    named = process_paths()
    return [*engine_items(cache), *compile_items(cache), *sysroot_items(cache, named),
            *emulation_items(cache, named), *listed_only_items(cache)]


def engine_items(cache: Path) -> list[CacheItem]:
    root = cache / "engines"
    return [CacheItem(kind="engine", key=e.key, path=e.path, size_bytes=e.size_bytes, last_used=e.used_at,
                      complete=e.complete, detail=f"{e.engine} {e.version}" if e.complete else "incomplete",
                      lineage=f"{e.engine}/{e.target}", refers_to=sysroot_of_build(Path(e.path), cache),
                      in_use=lock_held(root, e.key), entry=e)
            for e in list_entries(root)]


def sysroot_of_build(build: Path, cache: Path) -> str | None:
    """The sysroot an engine venv for another architecture runs on: its bin/python's link (a build in
    progress has it before its record), else its record's inputs."""
    linked = _sysroot_under(cache, (build / "bin" / "python").resolve())
    if linked is not None:
        return linked
    sysroot = ((_record(build / MARKER).get("inputs") or {}).get("sysroot") or {})
    return sysroot.get("key")


def compile_items(cache: Path) -> list[CacheItem]:
    engines = cache / "engines"
    return [CacheItem(kind="compile", key=d.name, path=str(d), size_bytes=_size(d), last_used=_mtime(d),
                      detail="compile cache" if (engines / d.name).is_dir() else "compile cache, its build gone",
                      refers_to=d.name, in_use=lock_held(engines, d.name))
            for d in _newest_first(_dirs(cache / "compile"))]


def sysroot_items(cache: Path, named: set[str]) -> list[CacheItem]:
    items = []
    for d in _newest_first(_dirs(cache / SYSROOTS), marker=SYSROOT_MARKER):
        key = d.name.removesuffix(".partial")
        complete = (d / SYSROOT_MARKER).exists() and key == d.name
        arch = key.split("-")[1] if key.startswith("debian-") else "?"
        items.append(CacheItem(kind="sysroot", key=d.name, path=str(d), size_bytes=_size(d),
                               last_used=_mtime(d / SYSROOT_MARKER if complete else d), complete=complete,
                               detail=f"Debian {arch} userland" if complete else "incomplete", lineage=arch,
                               in_use=file_lock_held(use_file(cache, key)) or _named(d, named)))
    return items


def emulation_items(cache: Path, named: set[str]) -> list[CacheItem]:
    items = []
    for d in _newest_first(_dirs(cache / EMULATION)):
        name, _, pid = d.name.partition(".partial-")
        userland = _emulated_userland(d, cache)
        profile = name.rsplit("-", 1)[0]
        making = bool(pid) and _alive(pid)
        items.append(CacheItem(kind="emulation", key=d.name, path=str(d), size_bytes=_size(d), last_used=_mtime(d),
                               complete=not pid, detail=f"node root for {profile}" if not pid else "incomplete",
                               lineage=f"{profile}/{userland}", refers_to=userland,
                               in_use=making or _named(d, named)))
    return items


def listed_only_items(cache: Path) -> list[CacheItem]:
    """Models, sources, tools (one item per entry; a source's git mirrors one each), ccache, scratch."""
    items = []
    for folder, kind in LISTED_ONLY.items():
        entries = [p for p in _entries(cache / folder) if not (kind == "source" and p.name == "git")]
        entries += _entries(cache / folder / "git") if kind == "source" else []
        for path in _newest_first(entries):
            items.append(CacheItem(kind=kind, key=str(path.relative_to(cache / folder)), path=str(path),
                                   size_bytes=_size(path) if path.is_dir() else path.stat().st_size,
                                   last_used=_mtime(path), detail=f"{kind}: listed only"))
    for folder, kind in WHOLE.items():
        if (cache / folder).is_dir():
            items.append(CacheItem(kind=kind, key=folder, path=str(cache / folder), size_bytes=_size(cache / folder),
                                   last_used=_mtime(cache / folder), detail=f"{kind}: listed only"))
    return items


def plan_gc(items: list[CacheItem], now: datetime, *, keys: Iterable[str] = (), older_than_days: float | None = None,
            incomplete: bool = False, keep: int | None = None) -> GcPlan:
    """What gc removes (pure). Engine builds by `select_for_gc`'s rules, less those in use; a compile
    cache with its build, or alone once its build is gone; sysroots and emulation roots by the same
    rules over their own lineages (architecture; profile and sysroot), never one a remaining build
    needs or one in use, and an emulation root whose sysroot goes goes with it."""
    rules = GcRules(now=now, keys=tuple(keys), older_than_days=older_than_days, incomplete=incomplete, keep=keep)
    plan = GcPlan()
    engines = [i for i in items if i.kind == "engine"]
    gone = _engines_removed(engines, rules, plan)
    remaining = [i for i in engines if i.key not in gone]
    needed = {i.refers_to: i.key for i in remaining if i.refers_to}
    _plan_compile([i for i in items if i.kind == "compile"], gone, rules, plan)
    sysroots = [i for i in items if i.kind == "sysroot"]
    chosen = rules.chosen(sysroots)
    removed_sysroots = {i.key for i in sysroots if i.key in chosen and _allowed(i, needed, plan, "a build links to it")}
    present = {i.key for i in sysroots if i.complete} - removed_sysroots
    _plan_emulation([i for i in items if i.kind == "emulation"], present, needed, rules, plan)
    plan.remove += [i for i in sysroots if i.key in removed_sysroots]
    for item in items:
        if item.key in rules.keys and item.kind not in REMOVABLE:
            plan.kept.append((item, f"gc does not remove a {item.kind}: nothing records whether a run uses it"))
    return plan


def _engines_removed(engines: list[CacheItem], rules: GcRules, plan: GcPlan) -> set[str]:
    """The engine builds gc removes (added to the plan); the chosen ones in use are kept."""
    by_key = {i.key: i for i in engines}
    chosen = select_for_gc([i.entry for i in engines if i.entry], rules.now, keys=rules.keys,
                           older_than_days=rules.older_than_days, incomplete=rules.incomplete,
                           keep_per_engine=rules.keep)
    gone = set()
    for entry in chosen:
        item = by_key[entry.key]
        if item.in_use:
            plan.kept.append((item, "in use (a build or a run holds its lock)"))
        else:
            plan.remove.append(item)
            gone.add(item.key)
    return gone


def _plan_compile(caches: list[CacheItem], gone: set[str], rules: GcRules, plan: GcPlan) -> None:
    """A compile cache goes with its build (remove_entry takes both); one whose build is gone already is
    chosen by any rule but age, or by age when it is old."""
    present = {i.key for i in plan.remove} | {i.key for i, _ in plan.kept}
    for item in caches:
        if item.key in gone:
            plan.remove.append(item)  # removed with its build: listed for its size
            continue
        if item.in_use:
            continue
        orphan = "its build gone" in item.detail
        if orphan and (item.key in rules.keys or rules.incomplete or rules.keep is not None or rules.old(item)):
            plan.remove.append(item)
        elif item.key in rules.keys and item.key not in present:
            plan.kept.append((item, "goes with its build: name the build"))


def _plan_emulation(roots: list[CacheItem], sysroots: set[str], needed: dict[str, str], rules: GcRules,
                    plan: GcPlan) -> None:
    """Emulation roots: by the rules, or because their sysroot is (or goes) away; the newest complete root
    of each profile on a sysroot a remaining build needs stays, and any in use."""
    chosen = rules.chosen(roots)
    newest: dict[str, str] = {}
    for item in roots:  # newest first
        if item.complete:
            newest.setdefault(item.lineage, item.key)
    for item in roots:
        orphan = item.refers_to not in sysroots
        if not (item.key in chosen or orphan):
            continue
        if item.in_use:
            plan.kept.append((item, "in use (a process runs under it)"))
        elif not orphan and item.refers_to in needed and newest.get(item.lineage) == item.key:
            plan.kept.append((item, f"needed: build {needed[item.refers_to]} runs on its sysroot"))
        else:
            plan.remove.append(item)


def _allowed(item: CacheItem, needed: dict[str, str], plan: GcPlan, why: str) -> bool:
    """Whether a chosen sysroot may go: not in use, not needed by a remaining build (else kept, said)."""
    if item.in_use:
        plan.kept.append((item, "in use (a build holds it, or a process runs under it)"))
        return False
    base = item.key.removesuffix(".partial")
    if base in needed and item.complete:
        plan.kept.append((item, f"needed: {why} (build {needed[base]})"))
        return False
    return True


def remove_item(cache: Path, item: CacheItem) -> bool:
    """Remove one tree, checking again under its lock that nothing uses it; False (nothing removed) if
    something does."""
    if item.kind in ("engine", "compile"):
        return remove_entry(cache / "engines", item.key)
    if item.kind == "sysroot":
        return remove_sysroot(cache, item.key)
    if item.kind == "emulation":
        return remove_emulation_root(cache, item.key)
    raise ValueError(f"gc does not remove a {item.kind}")


def remove_sysroot(cache: Path, name: str) -> bool:
    """A sysroot (or its partial tree), under its lock held exclusively: a venv build or unpacking
    holds it shared. Refused while an engine build in the cache links to it or a process names it."""
    key = name.removesuffix(".partial")
    path = cache / SYSROOTS / name
    with open(use_file(cache, key), "a") as use:
        try:
            fcntl.flock(use, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        linked = {i.refers_to for i in engine_items(cache)} if name == key else set()
        if key in linked or _named(path, process_paths()):
            return False
        _remove_tree(path)
    return True


def remove_emulation_root(cache: Path, name: str) -> bool:
    """An emulation root, unless a process runs under it or is still making it."""
    path = cache / EMULATION / name
    _, _, pid = name.partition(".partial-")
    if (pid and _alive(pid)) or _named(path, process_paths()):
        return False
    _remove_tree(path)
    return True


def process_paths() -> set[str]:
    """Every argument of every process here that is an absolute path (qemu's `-L ROOT`, a venv's
    python): what `_named` looks a tree up in."""
    found: set[str] = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        found.update(arg.decode(errors="replace") for arg in argv if arg.startswith(b"/"))
    return found


def _named(path: Path, named: set[str]) -> bool:
    prefix = str(path)
    return any(arg == prefix or arg.startswith(prefix + "/") for arg in named)


def _remove_tree(path: Path) -> None:
    """Renamed out of the way first (a reader never sees half a tree), then removed; symlinks are
    removed, never followed (an emulation root links its sysroot's directories)."""
    trash = path.with_name(f".{path.name}.removing-{os.getpid()}")
    try:
        path.rename(trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


def _emulated_userland(root: Path, cache: Path) -> str | None:
    """The sysroot an emulation root links its directories to."""
    for entry in _entries(root):
        if entry.is_symlink():
            found = _sysroot_under(cache, Path(os.path.realpath(entry)))
            if found:
                return found
    return None


def _sysroot_under(cache: Path, path: Path) -> str | None:
    sysroots = (cache / SYSROOTS).resolve()
    if not path.is_relative_to(sysroots) or path == sysroots:
        return None
    return path.relative_to(sysroots).parts[0]


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


def _entries(folder: Path) -> list[Path]:
    """A folder's entries but lock files and trees being removed."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if not p.name.endswith((".use", ".lock")) and ".removing-" not in p.name)


def _dirs(folder: Path) -> list[Path]:
    return [p for p in _entries(folder) if p.is_dir() and not p.is_symlink()]


def _newest_first(paths: list[Path], marker: str | None = None) -> list[Path]:
    def used(path: Path) -> float:
        stamp = path / marker if marker and (path / marker).exists() else path
        return stamp.lstat().st_mtime
    return sorted(paths, key=used, reverse=True)


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.lstat().st_mtime, timezone.utc)
