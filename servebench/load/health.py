"""A hung server caught during the load, not after its requests' timeouts: the server's health path
probed a few times a second on a connection of its own. A server that has neither answered it nor
sent a byte on any request for `hang_after_s` (SIGSTOPped, deadlocked, its host gone) is hung; the
generator then stops the load (`servebench/load/runner.py`). One small GET at most every second is
all it adds to the load.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable
from urllib.parse import urlsplit


def probe_timing(hang_after_s: float) -> tuple[float, float]:
    """(seconds between probes, seconds a probe may take): at least four probes fit in the hang
    limit, and never more than one a second."""
    return min(1.0, hang_after_s / 4), min(2.0, hang_after_s / 2)


async def answers(url: str, timeout_s: float) -> bool:
    """Whether GET url answers 200 within timeout_s (a new connection, closed after)."""
    parts = urlsplit(url)
    writer = None
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
            writer.write(f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n"
                         .encode())
            await writer.drain()
            status = await reader.readline()
        return status.split(b" ")[1:2] == [b"200"]
    except (OSError, TimeoutError, IndexError):
        return False
    finally:
        if writer is not None:
            writer.close()


async def hung_since(url: str, hang_after_s: float, activity: Callable[[], float]) -> float:
    """Return (a monotonic time: the last sign of life) once the server has shown none for
    hang_after_s: no answer on its health path and no byte on any request (`activity()`: when the
    last one came, so a server whose HTTP threads are all busy streaming is alive, not hung).
    Never returns while it lives. A watch that breaks raises `WatchBroken` naming the cause: the
    caller runs the load on, but the cell was not checked for hangs and is invalid saying so."""
    interval_s, timeout_s = probe_timing(hang_after_s)
    alive = started = time.monotonic()
    try:
        while True:
            if await answers(url, timeout_s):
                alive = time.monotonic()
            alive = max(alive, activity())
            if time.monotonic() - alive >= hang_after_s:
                return alive
            await asyncio.sleep(interval_s)
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        raise WatchBroken(f"the hang watchdog broke {time.monotonic() - started:.1f} s into the load: "
                          f"{type(exc).__name__}: {exc}") from exc


class WatchBroken(Exception):
    """The hang watch could not go on judging; its message says when and why."""
