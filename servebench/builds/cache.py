"""The content-addressed artifact cache under `<cache>/engines/`: one directory per key.

An artifact is usable only once its marker file (the build record, JSON) is written, so an
interrupted build is redone; a lock file per key makes a second campaign that needs the
same artifact wait for the first instead of building it twice. `servebench builds list|gc`
shows and removes artifacts (never one whose lock is held), with the cache's other trees
(cache_trees.py: compile caches, sysroots, emulation roots, ...).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Callable, Iterator, Sequence

from pydantic import BaseModel

MARKER = "servebench-build.json"


def file_sha256(path: Path) -> str:
    """A file's sha256, read in 1 MiB blocks (wheels and sdists are tens of MB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class ArtifactCache:
    def __init__(self, root: Path):
        self.root = root

    def path(self, key: str) -> Path:
        return self.root / key

    def log_path(self, key: str) -> Path:
        return self.root / f"{key}.build.log"

    def get(self, key: str) -> str | None:
        """The artifact's build record, waiting for a build of it in progress elsewhere; None if absent."""
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked(key):
            marker = self.path(key) / MARKER
            return marker.read_text() if marker.exists() else None

    @contextlib.contextmanager
    def building(self, key: str, log: Callable[[str], None]) -> Iterator[tuple[Path, str | None]]:
        """Hold the key's lock while the artifact is built into its (emptied) directory; yields the
        directory and the build record if another process completed it meanwhile (then build nothing)."""
        with self._locked(key):
            target = self.path(key)
            marker = target / MARKER
            if marker.exists():
                yield target, marker.read_text()
                return
            if target.exists():
                log(f"removing incomplete build {target}")
                shutil.rmtree(target)
            yield target, None

    def complete(self, key: str, record: str) -> None:
        """Mark the artifact usable (call inside `building`)."""
        (self.path(key) / MARKER).write_text(record)

    def invalidate(self, key: str) -> None:
        """Make the artifact unusable (its files no longer match the record): the next build redoes it."""
        with self._locked(key):
            (self.path(key) / MARKER).unlink(missing_ok=True)

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        with open(self.root / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield


class CacheEntry(BaseModel):
    """One artifact of the cache, as `servebench builds list` shows it."""

    key: str
    engine: str | None          # from the build record (None: incomplete)
    version: str | None
    complete: bool
    size_bytes: int
    created_at: datetime | None
    modified_at: datetime       # the directory's mtime: when it was last built or touched
    path: str
    target: str | None = None   # the target CPU of a cmake build (graviton2, ...); None: the host's
    last_used: datetime | None = None  # the latest of modified_at and a run's last hold (None: modified_at)

    @property
    def used_at(self) -> datetime:
        """When a run last used the build, or it was built: what `gc --older-than-days` reads."""
        return max(self.modified_at, self.last_used or self.modified_at)

    @property
    def lineage(self) -> tuple[str | None, str | None]:
        """What `gc --keep N` counts builds within: an engine for one target (a Graviton2 build never
        pushes out the x86 one)."""
        return self.engine, self.target


def list_entries(root: Path) -> list[CacheEntry]:
    """Every artifact directory under `root`, newest first; not the hidden scratch directories a build
    in progress keeps beside its own (`.<key>.scratch-*`: not a build, and gc must not take them)."""
    if not root.is_dir():
        return []
    entries = []
    for directory in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        record = _record(directory / MARKER)
        entries.append(CacheEntry(
            key=directory.name, engine=record.get("engine"), version=record.get("engine_version"),
            complete=bool(record), size_bytes=_size(directory), created_at=record.get("created_at"),
            target=(record.get("inputs") or {}).get("target"), last_used=_held_at(root, directory.name),
            modified_at=datetime.fromtimestamp(directory.stat().st_mtime, timezone.utc), path=str(directory)))
    return sorted(entries, key=lambda e: e.modified_at, reverse=True)


def select_for_gc(entries: list[CacheEntry], now: datetime, *, keys: Sequence[str] = (),
                  older_than_days: float | None = None, incomplete: bool = False,
                  keep_per_engine: int | None = None) -> list[CacheEntry]:
    """What `servebench builds gc` removes: the keys named, builds neither built nor used for N days,
    incomplete ones, or all but the newest N of each engine and target; nothing unless asked (pure)."""
    chosen: dict[str, CacheEntry] = {}
    for entry in entries:
        if entry.key in keys or (incomplete and not entry.complete):
            chosen[entry.key] = entry
        if older_than_days is not None and (now - entry.used_at).total_seconds() > older_than_days * 86400:
            chosen[entry.key] = entry
    if keep_per_engine is not None:
        seen: dict[tuple, int] = {}
        for entry in entries:  # newest first
            seen[entry.lineage] = seen.get(entry.lineage, 0) + 1
            if entry.complete and seen[entry.lineage] > keep_per_engine:
                chosen[entry.key] = entry
    return [entry for entry in entries if entry.key in chosen]


def compile_cache_dir(build_dir: str | Path) -> Path:
    """Where the engine's processes keep what they compile for this build (torch inductor's
    kernels): `<cache>/compile/<key>`, beside `<cache>/engines/<key>` on every node that holds
    the build, never inside it (a build's tree is verified by its digest). Keyed by the build,
    shared by every run and server of it, removed with it."""
    build = Path(build_dir)
    return build.parent.parent / "compile" / build.name


def hold_in_use(root: Path, key: str) -> IO:
    """A shared lock on the artifact's `.use` file, held (the file left open) while a run uses the
    build: `remove_entry` leaves it alone. Closing the file releases it."""
    use = open(root / f"{key}.use", "a")
    fcntl.flock(use, fcntl.LOCK_SH)
    os.utime(use.fileno())  # the build's last use, for `builds list` and `gc --older-than-days`
    return use


def _held_at(root: Path, key: str) -> datetime | None:
    """When a run last took hold of the build (its `.use` file's mtime), or None."""
    try:
        return datetime.fromtimestamp((root / f"{key}.use").stat().st_mtime, timezone.utc)
    except OSError:
        return None


def lock_held(root: Path, key: str) -> bool:
    """Whether a build holds the key's lock or a run its `.use` lock (probed, nothing created)."""
    return any(file_lock_held(root / f"{key}{suffix}") for suffix in (".lock", ".use"))


def file_lock_held(path: Path) -> bool:
    """Whether someone holds a flock on this file (probed without creating it; absent: not held)."""
    try:
        probe = open(path, "rb")
    except OSError:
        return False
    with probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
    return False


def remove_entry(root: Path, key: str) -> bool:
    """Remove an artifact and its log, digest and locks; False (nothing removed) while a build holds
    its lock or a run uses it."""
    with open(root / f"{key}.lock", "a") as lock, open(root / f"{key}.use", "a") as use:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(use, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        shutil.rmtree(root / key, ignore_errors=True)
        shutil.rmtree(compile_cache_dir(root / key), ignore_errors=True)
        for suffix in (".build.log", ".tree-sha256", ".lock", ".use"):
            (root / f"{key}{suffix}").unlink(missing_ok=True)
    return True


def _record(marker: Path) -> dict:
    try:
        return json.loads(marker.read_text())
    except (OSError, ValueError):
        return {}


def _size(directory: Path) -> int:
    total = 0
    for path in directory.rglob("*"):
        try:
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
        except OSError:
            pass
    return total
