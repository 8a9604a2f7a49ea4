"""servebench.waiting: the library's one poll loop (and the tests' wait_until built on it)."""

from __future__ import annotations

import math
import time
from types import SimpleNamespace

import pytest

from servebench.waiting import poll, wait_for
from tests.support.waiting import wait_until


def counter(truthy_from: int, value: object = "ready"):
    """A check that answers falsy until its `truthy_from`-th call; `calls` counts them."""
    calls = []

    def check():
        calls.append(time.monotonic())
        return value if len(calls) >= truthy_from else None

    return check, calls


def test_poll_returns_the_first_truthy_value_without_waiting_out_the_timeout():
    check, calls = counter(3, value={"state": "RUNNING"})
    started = time.monotonic()
    assert poll(check, 2.0, interval_s=0.01) == {"state": "RUNNING"}
    assert len(calls) == 3
    assert time.monotonic() - started < 1.0


def test_poll_returns_the_last_falsy_value_after_the_timeout():
    answers = iter([None, 0, ""])
    assert poll(lambda: next(answers, False), 0.05, interval_s=0.01) is False
    started = time.monotonic()
    assert poll(lambda: 0, 0.1, interval_s=0.02) == 0
    assert 0.1 <= time.monotonic() - started < 1.0


def test_poll_checks_once_more_at_the_deadline_and_never_sleeps_past_it():
    check, calls = counter(10**6)
    started = time.monotonic()
    poll(check, 0.15, interval_s=10.0)  # an interval longer than the timeout: cut to the deadline
    assert len(calls) == 2
    assert calls[1] - started >= 0.15
    assert time.monotonic() - started < 1.0


def test_a_zero_timeout_is_a_single_look():
    check, calls = counter(10**6)
    assert poll(check, 0.0, interval_s=1.0) is None
    assert len(calls) == 1
    check, calls = counter(1)
    assert poll(check, 0.0) == "ready"


def test_until_judges_the_value_and_poll_returns_it_either_way():
    states = iter(["COMPLETING", "COMPLETING", "CANCELLED"])
    assert poll(lambda: next(states), 2.0, interval_s=0.01, until=lambda s: s != "COMPLETING") == "CANCELLED"
    # survivors: waited on until none is left; at the timeout, the ones still there
    assert poll(lambda: [41, 42], 0.05, interval_s=0.01, until=lambda left: not left) == [41, 42]
    assert poll(lambda: [], 2.0, until=lambda left: not left) == []


def test_an_exception_from_the_check_ends_the_wait_at_once():
    calls = []

    def check():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the process waited on exited")
        return False

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="exited"):
        poll(check, 10.0, interval_s=0.01)
    assert len(calls) == 2
    assert time.monotonic() - started < 1.0


def test_the_interval_may_be_a_function_giving_each_next_pause(monkeypatch):
    import servebench.waiting as waiting

    slept = []
    clock = SimpleNamespace(monotonic=time.monotonic, sleep=lambda s: (slept.append(s), time.sleep(s)))
    monkeypatch.setattr(waiting, "time", clock)  # this module's clock only: other threads sleep unseen
    pauses = iter([0.01, 0.02, 0.04, 0.08])
    check, calls = counter(4)
    assert poll(check, 2.0, interval_s=lambda: next(pauses)) == "ready"
    assert slept == [0.01, 0.02, 0.04]  # growing, as asked; none after the last check
    assert calls[3] - calls[0] >= 0.07


def test_an_infinite_timeout_waits_as_long_as_it_takes():
    check, calls = counter(5)
    assert poll(check, math.inf, interval_s=0.001) == "ready"
    assert len(calls) == 5


def test_wait_for_raises_the_given_error_naming_what_it_waited_for():
    class Failed(Exception):
        pass

    with pytest.raises(Failed, match=r"^timed out after 0.05 s waiting for the port to open$"):
        wait_for(lambda: False, "the port to open", 0.05, interval_s=0.01, error=Failed)
    with pytest.raises(TimeoutError, match="the job to end"):
        wait_for(lambda: ["job"], "the job to end", 0.0, until=lambda left: not left)
    check, _ = counter(2, value=8000)
    assert wait_for(check, "a port", 2.0, interval_s=0.01) == 8000


def test_the_tests_wait_until_is_the_library_wait_failing_as_an_assertion():
    check, calls = counter(2)
    assert wait_until(check, "ready", timeout_s=2.0, poll_s=0.01) == "ready"
    with pytest.raises(AssertionError, match="waiting for the server to answer"):
        wait_until(lambda: None, "the server to answer", timeout_s=0.05, poll_s=0.01)
