"""The CPU-Ray plugin's node logic (no vLLM needed): core lists per local rank, per-node
bindings, thread pinning and node keys."""

import json
import os
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "engine_side"))
from servebench_engine.vllm_cpu_ray.node import (  # noqa: E402
    cpus_for_local_rank,
    node_binding,
    node_key,
    parse_cpu_ids,
    pin_all_threads,
)


def test_core_list_of_each_local_rank():
    assert cpus_for_local_rank("0-1|2-3", 0) == [0, 1]
    assert cpus_for_local_rank("0-1|2-3", 1) == [2, 3]
    assert cpus_for_local_rank("0,4-5", 0) == [0, 4, 5]
    assert cpus_for_local_rank("auto", 0) is None and cpus_for_local_rank(None, 0) is None


def test_a_rank_without_a_core_list_is_an_error_that_says_so():
    with pytest.raises(ValueError, match="has 1 core lists, but this node runs local rank 1"):
        cpus_for_local_rank("0-3", 1)


def test_the_servers_per_node_binding_beats_the_raylets_default():
    binds = json.dumps({"node0": "0|1", "node1": "2|3"})
    raylet = {"SERVEBENCH_NODE_NAME": "node1", "VLLM_CPU_OMP_THREADS_BIND": "0-3"}
    assert node_binding(raylet, {"SERVEBENCH_NODE_BINDS": binds}) == "2|3"
    assert node_binding({**raylet, "SERVEBENCH_NODE_BINDS": binds}) == "2|3"
    assert node_binding(raylet) == "0-3"                        # no per-server binding: the raylet's
    assert node_binding({"VLLM_CPU_OMP_THREADS_BIND": "1"}, {"SERVEBENCH_NODE_BINDS": binds}) == "1"


def test_pinning_reaches_threads_that_already_exist():
    original = os.sched_getaffinity(0)
    target = {min(original)}
    ready, release = threading.Event(), threading.Event()
    seen: dict[str, set[int]] = {}

    def worker():
        ready.set()
        release.wait(10)
        seen["affinity"] = os.sched_getaffinity(0)

    thread = threading.Thread(target=worker)
    thread.start()
    ready.wait(10)
    try:
        pin_all_threads(sorted(target))
        release.set()
        thread.join(10)
        assert seen["affinity"] == target and os.sched_getaffinity(0) == target
    finally:
        release.set()
        pin_all_threads(sorted(original))


def test_node_key_is_explicit_or_host_and_boot(monkeypatch):
    monkeypatch.setenv("SERVEBENCH_NODE_KEY", "node7@host")
    assert node_key() == "node7@host"
    monkeypatch.delenv("SERVEBENCH_NODE_KEY")
    assert node_key().count(":") >= 1
    assert parse_cpu_ids("0-2,5") == [0, 1, 2, 5]
