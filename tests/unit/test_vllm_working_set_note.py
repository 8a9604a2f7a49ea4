"""The plan names the per-process figures a vLLM mode's memory is computed from as what they are: what a run
measured on the mode's nodes for its build, or, where none did, the fallback measured once on a small x86 host."""

from __future__ import annotations

import pytest

from servebench.config.campaign import ModeSpec
from servebench.engines import LaunchRequest, get_engine
from servebench.engines.vllm import memory
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.models.shapes import ModelShape
from servebench.planning.memory import ModelWeights, mode_memory
from servebench.providers import Node
from tests.support.ports import CountingPorts

NODES = [Node(name="n0", address="10.0.0.1", cpus=[0, 1, 2, 3]), Node(name="n1", address="10.0.0.2", cpus=[0, 1])]
MODES = [ModeSpec(name="tp1", executor="mp"), ModeSpec(name="tp2", tp=2, executor="mp"),
         ModeSpec(name="pp2", pp=2, executor="mp-multinode"), ModeSpec(name="dp2", dp=2, executor="mp-multinode")]
SHAPE = ModelShape(architecture="llama", layers=4, hidden=256, heads=4, kv_heads=2, intermediate=512,
                   vocab_size=32000, max_position=2048)
MEASURED = {"n0": {"private_bytes": 300 * memory.MIB, "shared_bytes": 100 * memory.MIB, "measured_at": 1_764_000_000},
            "n1": {"private_bytes": 700 * memory.MIB, "shared_bytes": 150 * memory.MIB, "measured_at": 1_764_000_000}}


def planned(mode: ModeSpec, runtimes: dict | None):
    weights = ModelWeights(shape=SHAPE, stored_as="float32", matrix_bytes=4.0, small_bytes=4, kv_dtype="float32")
    nodes = [(n.name, n.cpus) for n in NODES]
    return mode_memory(get_engine("vllm"), mode, VllmEngineSpec(), nodes, weights, {}, runtimes=runtimes)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_a_mode_no_run_measured_says_its_working_sets_are_the_fallback_figures(mode):
    assert planned(mode, None).runtime_note == memory.WORKING_SET_NOTE
    launch = get_engine("vllm").launch(LaunchRequest(
        python="/venv/bin/python", build_dir="/venv", spec=VllmEngineSpec(), mode=mode, model_dir="/m",
        served_name="tiny", dtype="float32", nodes=NODES, ports=CountingPorts(9000), planning=True))
    assert memory.WORKING_SET_NOTE not in launch.notes   # said once, with the memory it is about


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_what_a_node_measured_replaces_the_runtime_of_each_of_its_processes(mode):
    fallback, measured = planned(mode, None), planned(mode, MEASURED)
    for before, after in zip(fallback.nodes, measured.nodes):
        node = MEASURED[after.node]   # each process's own memory, and the node's shared libraries once
        processes = (after.part("working_set") - before.part("working_set") - node["shared_bytes"]) / (
            node["private_bytes"] - memory.PROCESS_RUNTIME_BYTES)
        assert processes == pytest.approx(round(processes)) and round(processes) >= 1, (after.node, processes)
    note = measured.runtime_note
    assert note.startswith("memory: a server process's runtime as measured on its nodes for this build (n0 300 MiB a "
                           "process and 100 MiB shared")
    assert "fallback" not in note


def test_a_mode_measured_on_some_of_its_nodes_names_the_others():
    note = planned(ModeSpec(name="pp2", pp=2, executor="mp-multinode"), {"n0": MEASURED["n0"]}).runtime_note
    assert note.startswith(memory.WORKING_SET_NOTE) and note.endswith("measured on 1 of its nodes, not on n1")


def test_the_note_states_the_figures_the_working_sets_use():
    note = memory.WORKING_SET_NOTE
    assert f"{memory.PROCESS_RUNTIME_BYTES // memory.MIB} MiB" in note
    assert f"{memory.API_SERVER_BYTES_PER_TOKEN // 1024} KiB per vocabulary token" in note
    assert f"{memory.ENGINE_CORE_BYTES_PER_TOKEN / 1024:.1f} KiB in the engine core" in note
    assert f"{memory.PROCESS_OVERHEAD_BYTES // memory.GIB} GiB a process" in note and "fallback" in note
