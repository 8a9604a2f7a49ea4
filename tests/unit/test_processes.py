"""Process groups are stopped by PID, children included; /dev/shm and the temp dir are restored."""

import sys
import time
from pathlib import Path

import psutil

from servebench.processes import ManagedProcess, free_port, remove_shm_created_since, shm_entries
from tests.support.waiting import wait_until

SPAWNER = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])
# a grandchild that leaves the process group, as some workers do
escapee = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], start_new_session=True)
print(child.pid, escapee.pid, flush=True)
time.sleep(600)
"""

IGNORES_TERM = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                "print('up', flush=True); time.sleep(600)")


def wait_for_output(path: Path) -> str:
    def printed() -> str:
        text = path.read_text() if path.exists() else ""
        return text if text.strip() else ""
    return wait_until(printed, f"the process to print to {path}", timeout_s=10, poll_s=0.05)


def gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_stop_kills_the_group_and_descendants_that_left_it(tmp_path):
    log = tmp_path / "p.log"
    proc = ManagedProcess.start([sys.executable, "-c", SPAWNER], log_path=log)
    child, escapee = map(int, wait_for_output(log).split())
    proc.stop(grace_s=5)
    for pid in (proc.pid, child, escapee):
        wait_until(lambda: gone(pid), f"process {pid} to end", timeout_s=5, poll_s=0.05)


def test_stop_escalates_to_sigkill(tmp_path):
    log = tmp_path / "p.log"
    proc = ManagedProcess.start([sys.executable, "-c", IGNORES_TERM], log_path=log)
    wait_for_output(log)
    started = time.monotonic()
    proc.stop(grace_s=0.5)
    assert time.monotonic() - started < 5
    assert not proc.alive()


def test_shm_cleanup_removes_only_new_entries():
    before = shm_entries()
    mine = Path("/dev/shm") / f"servebench-test-{free_port()}"
    mine.write_bytes(b"x")
    removed = remove_shm_created_since(before)
    assert mine.name in removed and not mine.exists()
    assert shm_entries() >= before - {mine.name}


def test_shm_cleanup_spares_segments_a_live_process_holds(tmp_path):
    before = shm_entries()
    held = Path("/dev/shm") / f"servebench-held-{free_port()}"
    log = tmp_path / "p.log"
    holder = ManagedProcess.start([sys.executable, "-c",
                                   f"f = open({str(held)!r}, 'w'); print('up', flush=True); "
                                   "import time; time.sleep(600)"],
                                  log_path=log)
    try:
        wait_for_output(log)
        assert held.name not in remove_shm_created_since(before)
        assert held.exists()
    finally:
        holder.stop(grace_s=2)
    assert held.name in remove_shm_created_since(before)


def test_free_port_is_bindable():
    import socket
    port = free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_process_on_this_host_gets_the_runs_scratch_as_tmpdir_and_release_removes_it(tmp_path):
    """What an engine leaves in its temp dir when killed (vLLM's ZeroMQ sockets) goes with the run."""
    from servebench.providers import get_provider_class
    from servebench.providers.base import Node
    from servebench.providers.this_host import scratch_path

    local = get_provider_class("local")
    provider = local(local.spec_model.model_validate({"kind": "local", "nodes": [{"name": "n0", "cpus": [0]}]}))
    node = Node(name="n0", address="127.0.0.1", cpus=[0])
    leaves = "import socket, tempfile; s = socket.socket(socket.AF_UNIX); s.bind(tempfile.gettempdir() + '/ipc'); " \
             "print(tempfile.gettempdir(), flush=True); import time; time.sleep(60)"
    process = provider.start(node, [sys.executable, "-c", leaves], {}, tmp_path / "out.log")
    scratch = Path(scratch_path(provider.run_id))
    def bound() -> bool:
        assert process.alive(), (tmp_path / "out.log").read_text()
        return (scratch / "ipc").exists()
    wait_until(bound, f"the process to bind {scratch / 'ipc'}", timeout_s=30)
    assert (tmp_path / "out.log").read_text().strip() == str(scratch) == provider.scratch_dir(node)
    process.stop(grace_s=0)  # killed: nothing of its own removes the socket
    assert (scratch / "ipc").exists()
    provider.stop_leftovers()
    assert not scratch.exists()
