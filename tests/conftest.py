"""The tests' shared fixtures: `isolated` (a flow run in the test's own directory), and what
in-process Prefect flows leave behind, cleaned up at the end of the session, with the one
Prefect server every test's flows report to (tests/support/prefect_session.py).

Left alone, two kinds of noise follow pytest's final summary line, both from Prefect state
that outlives the tests (reproduced with a failing flow under `prefect_test_harness`):

- "--- Logging error --- ... ValueError: I/O operation on closed file": when the body of
  `prefect_test_harness()` raises (a failing e2e flow), the harness skips its own cleanup
  (no try/finally around its `yield`), so its server subprocess runs on until Prefect's
  atexit hook stops it and logs "Stopping temporary server". Prefect's console handler
  writes to the sys.stderr of the moment Prefect configured logging, the first flow run:
  inside a test, pytest's capture file, which pytest has closed by then.
  `stop_leftover_prefect_servers` does the harness's cleanup instead (drain the log and
  event workers, stop the server) while pytest still runs.
- "nanobind: leaked N instances ... types ... functions" from DuckDB's bindings: Prefect's
  global event loop thread is a daemon that nothing shuts down; it keeps the shutdown
  calls of Prefect's services, whose captured contexts hold the flow run, its failed
  state, the exception, its traceback and so every frame's locals, a (closed)
  DuckDBPyConnection among them. A daemon thread's objects are never freed at interpreter
  exit, and nanobind reports each instance still alive then, its type and the type's
  methods. `release_prefect_background_threads` drains the services and lets those
  threads finish, so the objects are freed while Python still runs.

Nothing is hidden: no stream is redirected and no warning switched off. A log handler
still bound to pytest's capture file at the very end is pointed at the real stream, so
anything logged at exit is printed as a log line instead of a "closed file" traceback.
Only the end of the session is touched: a fixture may keep a harness across tests.

The session's own temp dir (`use_session_temp_dir`, tests/support/leaks.py), made when this file is
loaded, before any test makes a temp file or starts a process: TMPDIR for the session and every
process it starts, so that the leak check blames a test for no entry another program makes in /tmp.
"""

from __future__ import annotations

import compileall
import gc
import logging
import os
import sys
from pathlib import Path

import pytest

from servebench.paths import CHECKOUT
from tests.support.kinds import kind_of, kind_problem
from tests.support.leaks import use_session_temp_dir
from tests.support.nightly import nightly_skip

use_session_temp_dir()  # first: before a test makes a temp file or starts a process


def compile_the_checkout() -> None:
    """Byte-compile the checkout's own modules once for the session's processes. Where
    PYTHONDONTWRITEBYTECODE is set (the CI image sets it), no process writes the .pyc it compiled, so
    every `servebench load`, sampler, CLI and flow process a test starts would compile the ~200 modules
    of servebench again: 0.3-0.4 s a process on a 2-core EPYC, some hundreds of processes a session.
    compileall writes them whatever that setting says; a later pytest run finds them current."""
    if sys.dont_write_bytecode and CHECKOUT is not None:
        for folder in ("servebench", "flows", "tasks", "warehouse", "tests"):
            compileall.compile_dir(CHECKOUT / folder, quiet=1)


compile_the_checkout()

THREAD_JOIN_S = 10.0
TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Each test's folder is its kind (tests/support/kinds.py): tests/e2e/ and tests/nightly/ get the `e2e`
    marker, and markers that disagree with the folder stop the session. The nightly lane's tests are
    skipped, each with its reason, unless SERVEBENCH_NIGHTLY=1 (tests/support/nightly.py)."""
    problems = []
    for item in items:
        where = Path(str(item.path)).relative_to(TESTS).as_posix()
        problem = kind_problem(where, {mark.name for mark in item.iter_markers()})
        if problem is not None:
            problems.append(problem)
        if kind_of(where) in ("e2e", "nightly"):
            item.add_marker(pytest.mark.e2e)
    if problems:
        raise pytest.UsageError("tests in the wrong folder:\n  " + "\n  ".join(sorted(set(problems))))
    for item in items:
        skip = nightly_skip(item.get_closest_marker("nightly"), os.environ)
        if skip is not None:
            item.add_marker(skip)


@pytest.fixture
def isolated(tmp_path, monkeypatch) -> Path:
    """A run of the flow in this test's own directory: run dirs under tmp_path, no Prefect
    analytics; returns the warehouse file to use."""
    monkeypatch.setenv("SERVEBENCH_RUNS", str(tmp_path / "runs"))
    monkeypatch.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    return tmp_path / "w.duckdb"


@pytest.fixture(scope="session", autouse=True)
def _prefect_leftovers():
    """Torn down last (autouse, session): after every other fixture, harnesses included."""
    yield
    from tests.support.prefect_session import close_session_prefect

    rebind_handlers_from_capture(closed_only=True)  # the session server's stop is logged: not to a closed capsys
    close_session_prefect()  # the one server the session's flows reported to (tests/support/prefect_session.py)
    stop_leftover_prefect_servers()
    release_prefect_background_threads()
    rebind_handlers_from_capture()  # last: pytest's capture is still sys.stderr here


def stop_leftover_prefect_servers() -> None:
    """What prefect_test_harness does on the way out, when a raising body made it skip it."""
    if "prefect.server.api.server" not in sys.modules:  # no harness ran in this process
        return
    from prefect.server.api.server import SubprocessASGIServer

    running = [server for server in set(SubprocessASGIServer._instances.values()) if server.server_process]
    if running:
        _drain_prefect_services()  # send what was logged while the server still answers
        for server in running:
            server.stop()
    if SubprocessASGIServer._instances.get(None) is not None and not SubprocessASGIServer._instances[None].running:
        SubprocessASGIServer._instances.pop(None)  # the harness's alias for the server it started


def release_prefect_background_threads() -> None:
    """Drain Prefect's services and let its event loop threads end, then collect."""
    if "prefect._internal.concurrency.threads" not in sys.modules:
        return
    from prefect._internal.concurrency import threads

    _drain_prefect_services()
    for loop_thread in (threads._global_loop, threads._run_sync_loop):
        if loop_thread is not None and loop_thread.thread.is_alive():
            loop_thread.shutdown()  # runs its shutdown calls, then drops them (Prefect issue #10338)
            loop_thread.thread.join(THREAD_JOIN_S)
    gc.collect()


def _drain_prefect_services() -> None:
    """Stop every running Prefect service (log and event workers...) once its queue is sent."""
    from prefect._internal.concurrency.services import _QueueServiceBase

    if _QueueServiceBase._instances:  # one registry shared by all services
        _QueueServiceBase.drain_all(timeout=THREAD_JOIN_S, at_exit=False)


def rebind_handlers_from_capture(closed_only: bool = False) -> None:
    """Point log handlers that write to a capture of pytest's at the real stream it stands for.

    Prefect configures its handlers at the first flow run, with the sys.stderr of that moment:
    inside a test, pytest's capture file, which pytest closes after the session, or the test's
    `capsys` stream, closed when that test ends (a handler left on it is pointed at the real stderr).
    `closed_only`: only those on a closed stream (what is logged to pytest's open capture stays there).
    """
    real = {id(sys.stdout): sys.__stdout__, id(sys.stderr): sys.__stderr__}
    real = {key: stream for key, stream in real.items()
            if key not in (id(sys.__stdout__), id(sys.__stderr__)) and not closed_only}
    loggers = [logging.getLogger(), *(logger for logger in logging.Logger.manager.loggerDict.values()
                                      if isinstance(logger, logging.Logger))]
    for handler in {handler for logger in loggers for handler in logger.handlers}:
        if not isinstance(handler, logging.StreamHandler):
            continue
        closed = getattr(handler.stream, "closed", False)
        stream = real.get(id(handler.stream)) or (sys.__stderr__ if closed else None)
        if stream is None:
            continue
        console = getattr(handler, "console", None)  # Prefect's console handler prints through rich
        if console is not None and console.file is handler.stream:
            console.file = stream
        if closed:
            handler.stream = stream  # setStream would flush the closed one first
        else:
            handler.setStream(stream)


LEAK_GRACE_S = 10.0


@pytest.fixture(autouse=True)
def engine_memory_figures(request, monkeypatch):
    """A unit test's memory plan uses the engines' own per-process figures, whatever a campaign on this host
    measured before (a run keeps what a server process held on each node: servebench/planning/runtime_probe.py,
    whose own tests read and write a cache of their own)."""
    if request.node.get_closest_marker("e2e") is None:
        from servebench.planning import memory

        monkeypatch.setattr(memory, "measured_runtimes", lambda *args, **kwargs: {})


@pytest.fixture(autouse=True)
def no_leaks():
    """Fail the test that leaves anything behind: a process it started (a child of
    this process, or any process carrying a run's SERVEBENCH_PROCESS mark), a new /dev/shm entry,
    a network namespace, an ssh master of a run, a new entry in the session's temp dir or under a
    servebench name in /tmp (tests/support/leaks.py). What leaked of this process's own is stopped by
    PID afterwards, so one leak does not fail the tests after it. (Run the tests where no campaign
    runs at the same time: its processes would be reported, never stopped.)"""
    from tests.support.leaks import leaks_since, snapshot, stop_leaked

    before = snapshot()
    yield
    found = leaks_since(before, grace_s=LEAK_GRACE_S)
    if found:
        stop_leaked(found)
        pytest.fail("left behind by this test:\n  " + "\n  ".join(found.describe()), pytrace=False)
