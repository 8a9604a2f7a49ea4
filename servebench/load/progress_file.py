"""The load generator's live counts, kept in a file while it runs: what a campaign's `after_requests`
fault waits on."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol


class Counts(Protocol):
    """What the load's live counts give (`runner.LiveCounts`, written by its event loop)."""

    @property
    def sent(self) -> int: ...
    @property
    def done(self) -> int: ...
    @property
    def failed(self) -> int: ...


@contextlib.contextmanager
def progress_file(path: str | None, live: Counts, period_s: float = 0.05) -> Iterator[None]:
    """While the load runs, a thread writes the live counts to `path` (write then rename, so a reader
    never sees half a file); the last counts are written when it ends. Nothing on the send path."""
    if path is None:
        yield
        return
    target, stop = Path(path), threading.Event()
    target.parent.mkdir(parents=True, exist_ok=True)

    def write() -> None:  # best effort: a progress file that cannot be written never stops the load
        partial = target.with_suffix(".partial")
        try:
            partial.write_text(json.dumps({"sent": live.sent, "done": live.done, "failed": live.failed}))
            partial.replace(target)
        except OSError:
            pass

    def keep_writing() -> None:
        while not stop.wait(period_s):
            write()

    thread = threading.Thread(target=keep_writing, daemon=True, name="progress-file")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        write()
