"""The plan names the per-process working-set figures a vLLM mode's memory is computed from as what they
are: the fallback measured once on a small x86 host, not this build's on the campaign's nodes."""

from __future__ import annotations

import pytest

from servebench.config.campaign import ModeSpec
from servebench.engines import LaunchRequest, get_engine
from servebench.engines.vllm import memory
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.providers import Node
from tests.support.ports import CountingPorts

NODES = [Node(name="n0", address="10.0.0.1", cpus=[0, 1, 2, 3]), Node(name="n1", address="10.0.0.2", cpus=[0, 1])]


@pytest.mark.parametrize("mode", [ModeSpec(name="tp1", executor="mp"), ModeSpec(name="tp2", tp=2, executor="mp"),
                                  ModeSpec(name="pp2", pp=2, executor="mp-multinode"),
                                  ModeSpec(name="dp2", dp=2, executor="mp-multinode")], ids=lambda m: m.name)
def test_every_vllm_mode_of_the_plan_says_its_working_sets_are_the_fallback_figures(mode):
    launch = get_engine("vllm").launch(LaunchRequest(
        python="/venv/bin/python", build_dir="/venv", spec=VllmEngineSpec(), mode=mode, model_dir="/m",
        served_name="tiny", dtype="float32", nodes=NODES, ports=CountingPorts(9000), planning=True))
    assert launch.notes.count(memory.WORKING_SET_NOTE) == 1


def test_the_note_states_the_figures_the_working_sets_use():
    note = memory.WORKING_SET_NOTE
    assert f"{memory.PROCESS_RUNTIME_BYTES // memory.MIB} MiB" in note
    assert f"{memory.API_SERVER_BYTES_PER_TOKEN // 1024} KiB per vocabulary token" in note
    assert f"{memory.ENGINE_CORE_BYTES_PER_TOKEN / 1024:.1f} KiB in the engine core" in note
    assert f"{memory.PROCESS_OVERHEAD_BYTES // memory.GIB} GiB a process" in note and "fallback" in note
