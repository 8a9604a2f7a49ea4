"""The tests' one way to wait for something to happen: poll a check until it holds, with a deadline.

A fixed sleep is either too short on a loaded machine (the test fails for no reason) or too long
everywhere else (the suite pays it every run); a poll returns as soon as the condition holds and
fails, naming what it waited for, only when it never does. The loop is the library's
(`servebench.waiting`): a failed wait here is a test's AssertionError."""

from __future__ import annotations

from typing import Callable, TypeVar

from servebench.waiting import wait_for

T = TypeVar("T")


def wait_until(check: Callable[[], T], what: str, timeout_s: float = 20.0, poll_s: float = 0.1) -> T:
    """check()'s first truthy value, asked every `poll_s`; fails naming `what` after `timeout_s`.

    An exception raised by `check` (an assertion that something else still holds, say) ends the
    wait at once: it is the test's failure, not a reason to keep polling."""
    return wait_for(check, what, timeout_s, interval_s=poll_s, error=AssertionError)
