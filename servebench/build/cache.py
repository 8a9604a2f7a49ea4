"""The content-addressed artifact cache under `<cache>/engines/`: one directory per key.

An artifact is usable only once its marker file (the build record, JSON) is written, so an
interrupted build is redone; a lock file per key makes a second campaign that needs the
same artifact wait for the first instead of building it twice.
"""

from __future__ import annotations

import contextlib
import fcntl
import shutil
from pathlib import Path
from typing import Callable, Iterator

MARKER = "servebench-build.json"


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

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        with open(self.root / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield
