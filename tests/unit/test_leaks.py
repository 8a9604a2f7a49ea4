"""The leak check's temp dirs (tests/support/leaks.py): a test is blamed for what
its own processes leave, in the session's temp dir or under a name servebench makes in /tmp, and
not for what another program on the machine makes in /tmp meanwhile."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.leaks import (
    SESSION_TMP_PREFIX,
    SESSION_TMP_VARIABLE,
    SHARED_TMP,
    leaks_since,
    remove_dead_sessions_temp_dirs,
    session_temp_dir,
    snapshot,
)
from tests.support.waiting import wait_until


@pytest.fixture
def in_shared_tmp(request) -> Iterator[Path]:
    """A path in /tmp named `request.param` plus this process's PID; removed afterwards."""
    path = Path(SHARED_TMP) / f"{request.param}{os.getpid()}"
    yield path
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def test_the_session_and_the_processes_it_starts_use_a_short_temp_dir_of_its_own():
    own = session_temp_dir()
    assert own == os.environ["TMPDIR"] == tempfile.gettempdir() == os.environ[SESSION_TMP_VARIABLE]
    assert own.startswith(f"{SHARED_TMP}/{SESSION_TMP_PREFIX}") and len(own) <= 20  # this_host.short_tmp_dir
    child = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.gettempdir())"],
                           capture_output=True, text=True, check=True)
    assert child.stdout.strip() == own


def test_what_a_child_leaves_in_the_session_temp_dir_is_blamed():
    before = snapshot()
    made = subprocess.run([sys.executable, "-c", "import tempfile; print(tempfile.mkstemp(prefix='sb-left-')[1])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    try:
        found = leaks_since(before, grace_s=0)
        assert made in found.tmp and made in found.describe()
    finally:
        os.unlink(made)
    assert made not in leaks_since(before, grace_s=0).tmp


def test_a_kept_cache_in_the_session_temp_dir_is_not_blamed():
    before = snapshot()
    left = Path(tempfile.mkdtemp(prefix="leak-check-"))
    cache = Path(tempfile.gettempdir()) / f"torchinductor_leak-check-{os.getpid()}"
    cache.mkdir()
    try:
        found = [path for path in leaks_since(before, grace_s=0).tmp if path.startswith(session_temp_dir())]
        assert found == [str(left)]
    finally:
        left.rmdir()
        cache.rmdir()


@pytest.mark.parametrize("in_shared_tmp", ["ccleak-check.s.", "tmpleak-check-"], indirect=True)
def test_what_another_program_makes_in_tmp_is_not_blamed(in_shared_tmp):
    """A compiler's /tmp/cc*.s, another program's mkdtemp: made here directly, as no process of
    this test would (they get the session's TMPDIR)."""
    before = snapshot()
    in_shared_tmp.write_text("")
    assert str(in_shared_tmp) not in leaks_since(before, grace_s=0).tmp


@pytest.mark.parametrize("in_shared_tmp", ["sb-ssh-leak-check-", "servebench-run-leak-check-", "sbt-leak-check-"],
                         indirect=True)
def test_a_name_servebench_makes_in_tmp_is_blamed(in_shared_tmp):
    before = snapshot()
    in_shared_tmp.mkdir()
    assert str(in_shared_tmp) in leaks_since(before, grace_s=0).tmp


@pytest.mark.parametrize("in_shared_tmp", ["sb-ray-leak-check-"], indirect=True)
def test_a_name_servebench_makes_in_tmp_is_not_blamed_while_another_sessions_process_uses_it(in_shared_tmp):
    """Another campaign or pytest run on the same host makes the same names in /tmp: one its process
    works in is its own. Once that process is gone nothing tells them apart: the test is blamed."""
    before = snapshot()
    in_shared_tmp.mkdir()
    pid = start_detached_in(in_shared_tmp)
    try:
        assert str(in_shared_tmp) not in leaks_since(before, grace_s=0).tmp
    finally:
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: not running(pid), f"process {pid} to end")
    assert str(in_shared_tmp) in leaks_since(before, grace_s=0).tmp


def test_the_temp_dir_of_a_session_that_is_gone_is_removed(tmp_path):
    ended = subprocess.Popen(["true"])
    ended.wait()  # its PID is free now (reused this soon only after the PIDs wrap around)
    dead, alive = tmp_path / f"{SESSION_TMP_PREFIX}{ended.pid}", tmp_path / f"{SESSION_TMP_PREFIX}{os.getpid()}"
    for session in (dead, alive):
        (session / "left").mkdir(parents=True)
    remove_dead_sessions_temp_dirs(str(tmp_path))
    assert not dead.exists() and alive.exists()


def start_detached_in(directory: Path) -> int:
    """A process working in `directory` that is neither this process's descendant (its parent, a
    shell, has exited) nor carries the session's variable: as one of another session."""
    env = {name: value for name, value in os.environ.items() if name != SESSION_TMP_VARIABLE} | {"TMPDIR": SHARED_TMP}
    shell = subprocess.run(["sh", "-c", "sleep 60 </dev/null >/dev/null 2>&1 & echo $!"], cwd=directory, env=env,
                           capture_output=True, text=True, check=True)
    return int(shell.stdout)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
