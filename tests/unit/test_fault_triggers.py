"""When a campaign's fault fires: `at_s`, or after N finished requests read from the load
generator's progress file (written by `servebench load --progress-file`). The provider here only
records the call: what is tested is the trigger, the real injection is in tests/e2e/test_faults.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import psutil

from servebench.config.campaign import FaultSpec
from servebench.load.progress_file import progress_file
from servebench.load.runner import LiveCounts
from servebench.providers import Node
from servebench.serving.faults import FaultTimer, finished_requests, inject
from tests.support.waiting import wait_until

NODE = Node(name="a", address="127.0.0.1", cpus=[0])


class RecordingProvider:
    run_id = "r1"

    def __init__(self) -> None:
        self.calls: list[float] = []

    def run(self, node, argv, timeout=None):
        self.calls.append(time.monotonic())
        return subprocess.CompletedProcess(argv, 0, stdout=json.dumps([[4711, "worker"]]) + "\n", stderr="")


def test_the_progress_file_follows_the_live_counts_and_ends_with_the_last(tmp_path):
    live, path = LiveCounts(), tmp_path / "cell.progress.json"
    with progress_file(str(path), live, period_s=0.01):
        live.sent, live.done = 3, 2
        wait_until(lambda: path.exists() and json.loads(path.read_text()) == {"sent": 3, "done": 2, "failed": 0},
                   "the progress file to show the live counts", timeout_s=5, poll_s=0.01)
        live.done, live.failed = 3, 1
    assert finished_requests(path) == 4 and not path.with_suffix(".partial").exists()
    assert finished_requests(tmp_path / "absent.json") == 0


def test_a_fault_after_n_requests_waits_for_them_and_one_whose_cell_ends_first_says_so(tmp_path):
    path, provider = tmp_path / "p.json", RecordingProvider()
    path.write_text(json.dumps({"sent": 2, "done": 1, "failed": 0}))
    timer = FaultTimer(provider, NODE, FaultSpec(cell="c", after_requests=3, action="kill"), path).start()
    time.sleep(0.3)                                   # the timer's chance to fire too early
    assert provider.calls == []                       # 1 of 3 finished: not yet
    path.write_text(json.dumps({"sent": 4, "done": 2, "failed": 1}))
    wait_until(lambda: provider.calls, "the fault to fire once 3 requests had finished", timeout_s=5, poll_s=0.02)
    done = timer.finish()
    assert len(provider.calls) == 1 and done.hit == [[4711, "worker"]] and done.fired_s >= 0.3
    assert done.describe().startswith("fault kill on a after 3 requests (")

    path.write_text(json.dumps({"sent": 1, "done": 1, "failed": 0}))
    early = FaultTimer(provider, NODE, FaultSpec(cell="c", after_requests=5, action="kill"), path).start()
    threading.Event().wait(0.1)
    result = early.finish()
    assert result.error == "the cell ended before 5 requests had finished (1 had)" and len(provider.calls) == 1


class ThisHost:
    """Runs the fault's script here, for real (the local provider does the same through its node)."""

    run_id = "r1"

    def run(self, node, argv, timeout=None):
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)


def test_a_signal_hits_the_nodes_own_processes_of_the_run_and_never_an_instrument():
    """Real processes, each `sleep N` with the environment servebench gives it: node a's only the
    one that names node a, the one that names no node and the one whose parent names node a; never
    node b's, the load generator's (SERVEBENCH_INSTRUMENT), another run's, or one whose own /proc
    environment lacks the node's name (as setproctitle can leave a Ray agent's) while its parent
    names node b."""
    kinds = {61: {"SERVEBENCH_PROCESS": "r1.1", "SERVEBENCH_NODE_NAME": "a"},
             62: {"SERVEBENCH_PROCESS": "r1.2", "SERVEBENCH_NODE_NAME": "ab"},
             63: {"SERVEBENCH_PROCESS": "r1.3", "SERVEBENCH_INSTRUMENT": "1"},
             64: {"SERVEBENCH_PROCESS": "r1.4"},
             65: {"SERVEBENCH_PROCESS": "r2.1", "SERVEBENCH_NODE_NAME": "a"},
             66: {"SERVEBENCH_PROCESS": "r1.6", "SERVEBENCH_NODE_NAME": "ab"},
             67: {"SERVEBENCH_PROCESS": "r1.7", "SERVEBENCH_NODE_NAME": "a"}}
    def started(seconds: int, env: dict) -> subprocess.Popen:
        if seconds < 66:
            return subprocess.Popen(["sleep", str(seconds)], env={"PATH": "/usr/bin:/bin", **env})
        # a parent (sh) with the node's name, its child `sleep` without it (`; true`: sh must not exec it)
        return subprocess.Popen(["sh", "-c", f"env -u SERVEBENCH_NODE_NAME sleep {seconds}; true"],
                                env={"PATH": "/usr/bin:/bin", **env}, start_new_session=True)
    sleeps = {seconds: started(seconds, env) for seconds, env in kinds.items()}
    try:
        wait_until(lambda: all(psutil.Process(process.pid).children() for seconds, process in sleeps.items()
                               if seconds >= 66), "the children of sh to be running", timeout_s=10, poll_s=0.02)
        done = inject(ThisHost(), NODE, FaultSpec(cell="c", action="kill", node="a", match=r"^sleep 6\d$"))
        assert sorted(command for _, command in done.hit) == ["sleep 61", "sleep 64", "sleep 67"], done
        for seconds, process in sleeps.items():
            process.wait(timeout=5) if seconds in (61, 64, 67) else None
            assert (process.poll() is not None) == (seconds in (61, 64, 67)), seconds
    finally:
        for process in sleeps.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL) if process.args[0] == "sh" else process.kill()
            process.wait()
