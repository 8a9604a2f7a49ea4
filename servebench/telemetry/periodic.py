"""The loop both telemetry processes share: every 1/hz seconds (no drift), write one JSON
line, until SIGTERM/SIGINT or until `done()` says so. Standard library only."""

from __future__ import annotations

import json
import signal
import time
from typing import Callable


def run_periodic(hz: float, out: str, row: Callable[[], dict | None],
                 done: Callable[[], bool] = lambda: False) -> int:
    """Write row() to `out` at `hz` (a None row is skipped); return how many lines were written."""
    stop = {"now": False}

    def handle(signum, frame) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    period = 1.0 / hz
    written = 0
    next_at = time.monotonic() + period
    with open(out, "a", buffering=1) as sink:
        while not stop["now"]:
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            next_at += period
            if done():
                break
            value = row()
            if value is not None:
                sink.write(json.dumps(value) + "\n")
                written += 1
    return written
