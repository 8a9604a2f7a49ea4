"""Waiting for something to happen: poll a check until it holds or a deadline passes.

One loop for every wait in the library (a process gone, a port open, a job running, a lock
free) and in the tests, so each wait reads as what it waits for, and the deadline arithmetic
(check at least once; the last check after the deadline, so a slow poll never fails a
condition that held in time) is written, and tested, once.

`poll` returns the last value checked and leaves the timeout to the caller (it knows what to
say, or that a timeout is no error); `wait_for` raises, naming what it waited for. An
exception raised by the check ends the wait at once: it is an answer (the process being waited
on died), not a reason to keep asking. Standard library only: no Prefect or DuckDB here.
"""

from __future__ import annotations

import time
from typing import Callable, TypeVar

T = TypeVar("T")

Interval = float | Callable[[], float]


def poll(check: Callable[[], T], timeout_s: float, *, interval_s: Interval = 0.1,
         until: Callable[[T], object] = bool) -> T:
    """check()'s first value that satisfies `until` (by default: a truthy one); once `timeout_s`
    has passed, the last value checked, which does not.

    `check` runs at least once, also with a timeout of 0 (a single look), and once more after the
    deadline has passed. `interval_s`: the sleep between checks, or a function giving each next
    one (growing, or with jitter so that processes contending for one lock do not poll in step).
    `timeout_s` may be `math.inf`: wait for as long as it takes."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if until(value):
            return value
        now = time.monotonic()
        if now >= deadline:
            return value
        pause = interval_s() if callable(interval_s) else interval_s
        time.sleep(max(0.0, min(pause, deadline - now)))


def wait_for(check: Callable[[], T], what: str, timeout_s: float, *, interval_s: Interval = 0.1,
             until: Callable[[T], object] = bool,
             error: Callable[[str], BaseException] = TimeoutError) -> T:
    """`poll`, raising `error("timed out after <timeout_s> s waiting for <what>")` if the check
    never holds: for a wait whose timeout is a failure with nothing more to say than what."""
    value = poll(check, timeout_s, interval_s=interval_s, until=until)
    if not until(value):
        raise error(f"timed out after {timeout_s:g} s waiting for {what}")
    return value
