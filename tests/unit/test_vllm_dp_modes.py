"""Data parallel (`dp`) and expert parallel (`ep`) modes (docs/parallel-modes.md): the spec, the
plan-time refusals (each naming the mode, the field and the reason), vLLM's server commands and core lists,
the landed rows, the per-rank metrics; and one real run, DP=2 on one node served by vLLM and gated against
TP=1 (marked e2e/vllm like the other vLLM runs)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from servebench.campaign.loading import SpecError, parse_campaign
from servebench.config.campaign import ModeSpec
from servebench.engines import LaunchRequest, get_engine
from servebench.engines.vllm.placement import (
    dp_ranks_per_node,
    mode_problem,
    node_bindings,
    ray_slots_per_node,
    workers_per_node,
)
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.load.server_metrics import counter_by_label
from servebench.providers import Node
from tests.support.ports import CountingPorts
from tests.support.vllm_dp_modes import E2E_CAMPAIGN

NODES = [Node(name="n0", address="127.0.1.1", cpus=[0, 1]), Node(name="n1", address="127.0.1.2", cpus=[2, 3])]


def request(mode: ModeSpec, nodes: list[Node] = NODES, shared=None) -> LaunchRequest:
    return LaunchRequest(python="/venv/bin/python", build_dir="/venv", spec=VllmEngineSpec(), mode=mode,
                         model_dir="/m", served_name="tiny", dtype="float32", nodes=nodes,
                         ports=CountingPorts(9000), shared=shared)


def value(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# --- the spec


def test_dp_and_ep_default_to_none_and_count_in_the_world_size():
    mode = ModeSpec(name="m", tp=2, executor="mp")
    assert (mode.dp, mode.ep, mode.world_size, mode.engine_size, mode.ep_size) == (1, False, 2, 2, 1)
    mode = ModeSpec(name="m", tp=2, pp=2, dp=3, ep=True, executor="mp")
    assert (mode.world_size, mode.engine_size, mode.ep_size) == (12, 4, 6)


def test_a_campaign_without_dp_or_ep_keeps_its_hash():
    text = """
name: t
provider: {kind: local, nodes: [{name: n0, cpus: "0-1"}]}
model: {generate: tiny-llama}
modes: [{name: tp1}]
load: {clients: [1], requests: 4}
"""
    spelled = text.replace("{name: tp1}", "{name: tp1, dp: 1, ep: false}")
    assert parse_campaign(text).spec_hash() == parse_campaign(spelled).spec_hash()
    assert "dp" not in parse_campaign(text).normalized()["modes"][0]
    assert parse_campaign(text.replace("{name: tp1}", "{name: dp2, dp: 2, oversubscribe: true}")).spec_hash() \
        != parse_campaign(text).spec_hash()


def test_dp_must_be_at_least_one():
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        ModeSpec(name="m", dp=0, executor="mp")


# --- placement


def test_dp_engines_on_one_node_with_mp_get_one_core_list_per_worker_dp_major():
    assert workers_per_node("mp", 4, [[0, 1, 2, 3]], 2) == [4]
    assert node_bindings("mp", 4, ["a"], [[0, 1, 2, 3]], 2) == {"a": "0|1|2|3"}
    assert node_bindings("mp", 2, ["a"], [[0]], 1) == {"a": "0|0"}  # oversubscribed: both engines on CPU 0


def test_dp_engines_across_nodes_stay_whole_on_a_node():
    four = [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert workers_per_node("mp-multinode", 4, four[:2], 1) == [2, 2]
    assert workers_per_node("mp-multinode", 6, four[:2], 2) == [4, 2]      # 3 engines of 2: 2 on n0, 1 on n1
    assert workers_per_node("ray", 4, four, 2) == [2, 2, 0, 0]            # 2 engines of 2 on 4 nodes
    mode = ModeSpec(name="m", tp=2, dp=3, executor="mp-multinode")
    assert dp_ranks_per_node(mode, four[:2]) == [2, 1]
    assert node_bindings("mp-multinode", 6, ["a", "b"], [[0, 1, 2, 3], [4, 5]], 2) == {"a": "0|1|2|3", "b": "4|5"}


def test_a_ray_cluster_holds_each_dp_engine_with_its_engine_core():
    dp = ModeSpec(name="m", tp=2, dp=2, executor="ray")
    # one engine per node: its 2 workers and the engine core's CPU bundle
    assert ray_slots_per_node([2], 2, (dp,)) == 3
    assert ray_slots_per_node([4], 2) == 2  # without DP modes, as before


# --- refusals (the engine's, then the campaign's: field and mode named)


@pytest.mark.parametrize("mode, why", [
    (ModeSpec(name="e", ep=True, executor="mp"), "dp x tp = 1"),
    (ModeSpec(name="d", dp=2, executor="mp-multinode"), "has one node"),
    (ModeSpec(name="d", dp=2, executor="ray"), "hang at the executor's start barrier"),
    (ModeSpec(name="d", dp=4, executor="mp"), "dp x tp x pp = 4 x 1 x 1 = 4 exceeds the largest node's 2 CPUs"),
])
def test_vllm_refuses_what_its_cpu_backend_cannot_serve(mode, why):
    nodes = [[0, 1]] if mode.executor == "mp-multinode" else [[0, 1], [2, 3]]
    problem = mode_problem(mode, nodes, ["n0", "n1"][:len(nodes)])
    assert problem is not None and why in problem, problem


@pytest.mark.parametrize("mode", [
    ModeSpec(name="e", tp=2, ep=True, executor="mp"),
    ModeSpec(name="e", dp=2, ep=True, executor="mp"),
    ModeSpec(name="e", tp=2, dp=2, ep=True, executor="mp-multinode"),
    ModeSpec(name="e", dp=2, executor="mp"),
])
def test_expert_and_data_parallel_modes_are_servable(mode):
    """servebench's engine-side fill-ins make them serve on vLLM 0.32's CPU backend (vllm_cpu_moe)."""
    assert mode_problem(mode, [[0, 1], [2, 3]], ["n0", "n1"]) is None


def test_oversubscribed_dp_fits_one_core():
    assert mode_problem(ModeSpec(name="d", dp=2, oversubscribe=True, executor="mp"), [[0]], ["n0"]) is None
    too_many = mode_problem(ModeSpec(name="d", tp=2, dp=2, executor="mp-multinode"), [[0, 1], [2], [3, 4]],
                            ["n0", "n1", "n2"])
    assert too_many is not None and "2 on node n1, which has 1 CPUs" in too_many, too_many


CAMPAIGN = """
name: t
engine: {kind: ENGINE}
provider: {kind: local, nodes: [{name: n0, cpus: "0-1"}]}
model: MODEL
modes: [MODE]
load: {clients: [1], requests: 4}
"""


def problems(mode: str, engine: str = "vllm", model: str = "{generate: tiny-llama}", base_dir: Path | None = None
             ) -> list[tuple[str, str]]:
    text = CAMPAIGN.replace("ENGINE", engine).replace("MODEL", model).replace("MODE", mode)
    with pytest.raises(SpecError) as caught:
        parse_campaign(text, base_dir=base_dir, host_cpus={0, 1})
    return [(p.field, p.message) for p in caught.value.problems]


def test_llamacpp_has_no_data_or_expert_parallelism():
    found = problems("{name: both, dp: 2, ep: true, executor: local}", engine="llamacpp")
    assert [field for field, _ in found] == ["modes[0].dp", "modes[0].ep"], found
    assert all(message.startswith("mode both: engine 'llamacpp' has no") for _, message in found), found


def test_ep_on_a_dense_model_is_refused_at_ep():
    ((field, message),) = problems("{name: tp2-ep, tp: 2, ep: true}")
    assert field == "modes[0].ep" and message.startswith("mode tp2-ep: ep: true but the model is dense"), message


def moe_dir(tmp_path: Path, experts: int) -> Path:
    model = tmp_path / "moe"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"num_attention_heads": 4, "num_hidden_layers": 2,
                                                   "num_local_experts": experts}))
    return model


def test_ep_over_ranks_that_do_not_divide_the_experts_is_refused(tmp_path):
    moe_dir(tmp_path, 3)
    messages = [m for field, m in problems("{name: tp2-ep, tp: 2, ep: true}", model="{path: moe}",
                                           base_dir=tmp_path) if field == "modes[0].ep"]
    assert any("3 routed experts over dp x tp = 2 ranks, which does not divide" in m for m in messages), messages


def plans(mode: str, model: str, base_dir: Path | None = None) -> None:
    text = CAMPAIGN.replace("ENGINE", "vllm").replace("MODEL", model).replace("MODE", mode)
    parse_campaign(text, base_dir=base_dir, host_cpus={0, 1})


@pytest.mark.parametrize("mode", ["{name: tp2-ep, tp: 2, ep: true}",
                                  "{name: dp2-ep, dp: 2, ep: true, oversubscribe: true}",
                                  "{name: dp2, dp: 2, oversubscribe: true}"])
def test_ep_and_dp_on_an_moe_model_plan(tmp_path, mode):
    moe_dir(tmp_path, 4)
    plans(mode, "{path: moe}", tmp_path)
    plans(mode, "{generate: qwen3-30b-a3b, layers: 1, experts: 8, experts_per_token: 2}")


def test_too_few_cpus_for_dp_names_dp():
    ((field, message),) = problems("{name: dp4, dp: 4}")
    assert field == "modes[0].dp" and message.startswith("mode dp4: dp x tp x pp = 4 x 1 x 1 = 4"), message
    assert "oversubscribe" in message


def test_pp_that_does_not_divide_the_layers_is_refused():
    ((field, message),) = problems("{name: pp3, pp: 3, executor: ray, oversubscribe: true}")
    assert field == "modes[0].pp" and "pp=3 does not divide the model's 4 layers" in message, message


# --- server commands


def test_dp_on_one_node_is_one_api_server_over_dp_engines():
    (api,) = get_engine("vllm").launch(request(ModeSpec(name="dp2", dp=2, executor="mp"))).processes
    assert api.api and api.argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    assert value(api.argv, "--data-parallel-size") == "2" and value(api.argv, "--tensor-parallel-size") == "1"
    assert value(api.argv, "--distributed-executor-backend") == "mp"
    assert "--headless" not in api.argv and "--enable-expert-parallel" not in api.argv
    assert api.env["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"


def test_a_mode_without_dp_or_ep_gets_the_command_it_had():
    (api,) = get_engine("vllm").launch(request(ModeSpec(name="tp2", tp=2, executor="mp"))).processes
    assert not any(arg.startswith("--data-parallel") or arg == "--enable-expert-parallel" for arg in api.argv)


def test_ep_adds_the_expert_parallel_flag():
    (api,) = get_engine("vllm").launch(request(ModeSpec(name="tp2-ep", tp=2, ep=True, executor="mp"))).processes
    assert "--enable-expert-parallel" in api.argv and value(api.argv, "--tensor-parallel-size") == "2"


def test_dp_across_nodes_is_the_head_api_server_and_a_headless_node_with_its_start_rank():
    three = [*NODES, Node(name="n2", address="127.0.1.3", cpus=[4, 5])]
    head, second, third = get_engine("vllm").launch(request(ModeSpec(name="dp3", dp=3, executor="mp-multinode"),
                                                            three)).processes
    assert (head.api, head.node, second.node, third.node) == (True, "n0", "n1", "n2")
    assert head.argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"] and "--headless" not in head.argv
    assert value(head.argv, "--distributed-executor-backend") == "mp"
    for process, local, start in ((second, "1", "0"), (third, "1", "2")):
        assert process.argv[1:5] == ["-m", "vllm.entrypoints.cli.main", "serve", "/m"] and "--headless" in process.argv
        assert value(process.argv, "--data-parallel-size-local") == local
        assert value(process.argv, "--data-parallel-start-rank") == (start if process is third else "1")
    assert value(head.argv, "--data-parallel-size-local") == "1" and "--data-parallel-start-rank" not in head.argv
    for process in (head, second, third):
        assert value(process.argv, "--data-parallel-size") == "3"
        assert value(process.argv, "--data-parallel-address") == "127.0.1.1"
        assert value(process.argv, "--data-parallel-rpc-port") == value(head.argv, "--data-parallel-rpc-port")
        assert process.env["VLLM_HOST_IP"] == next(n.address for n in three if n.name == process.node)
    assert (second.env["VLLM_CPU_OMP_THREADS_BIND"], third.env["VLLM_CPU_OMP_THREADS_BIND"]) == ("2-3", "4-5")


def test_dp_across_two_nodes_puts_whole_engines_on_each():
    head, other = get_engine("vllm").launch(request(ModeSpec(name="dp2tp2", tp=2, dp=2, executor="mp-multinode"))
                                            ).processes
    assert value(head.argv, "--data-parallel-size-local") == value(other.argv, "--data-parallel-size-local") == "1"
    assert value(other.argv, "--data-parallel-start-rank") == "1" and value(other.argv, "--tensor-parallel-size") == "2"
    assert (head.env["VLLM_CPU_OMP_THREADS_BIND"], other.env["VLLM_CPU_OMP_THREADS_BIND"]) == ("0|1", "2|3")
    assert "--nnodes" not in head.argv and "--nnodes" not in other.argv  # engines are whole on a node


def test_dp_over_ray_uses_vllms_ray_backend_on_the_cluster():
    class Cluster:
        address = "127.0.1.1:6379"

    (api,) = get_engine("vllm").launch(request(ModeSpec(name="dp2-ray", dp=2, executor="ray"), shared=Cluster())
                                       ).processes
    assert value(api.argv, "--data-parallel-backend") == "ray" and value(api.argv, "--data-parallel-size") == "2"
    assert value(api.argv, "--distributed-executor-backend") == "ray" and api.env["RAY_ADDRESS"] == "127.0.1.1:6379"
    # one engine on each of the two nodes (vLLM's strict packing puts this many on every node it uses)
    assert value(api.argv, "--data-parallel-size-local") == "1" and value(api.argv, "--data-parallel-address") \
        == "127.0.1.1"


def test_the_plan_prints_a_dp_modes_ranks_and_command(tmp_path):
    from servebench.cli.plan import describe_plan
    from servebench.planning.plan import make_plan

    campaign_file = tmp_path / "dp.yaml"
    campaign_file.write_text(E2E_CAMPAIGN.read_text())
    campaign = parse_campaign(campaign_file.read_text(), base_dir=tmp_path, host_cpus={0, 1})
    text = describe_plan(make_plan(campaign, {0, 1}), campaign_file)
    assert "mode dp2-ep (tp=1 pp=1 dp=2 ep=2 executor=mp) on node0:" in text, text
    assert "ranks    2 workers: node0 (API server, cores 0|0)" in text, text
    assert "--data-parallel-size 2 --enable-expert-parallel" in text and "VLLM_CPU_OMP_THREADS_BIND='0|0'" in text, text


# --- rows and metrics


def test_servers_and_cells_rows_name_dp_and_ep(tmp_path):
    from servebench import warehouse
    from servebench.config.sweep import expand
    from warehouse import landing

    campaign = parse_campaign(textwrap.dedent("""
        name: t
        provider: {kind: local, nodes: [{name: n0, cpus: "0"}]}
        model: {generate: tiny-llama}
        modes: [{name: dp2, dp: 2, oversubscribe: true}]
        load: {clients: [1], requests: 4}
        """), host_cpus={0, 1})
    con = warehouse.connect(tmp_path / "w.duckdb")
    landing.insert_run(con, "r1", landing.RunRecord(
        campaign="t", spec_hash=campaign.spec_hash(), spec_text="", spec_normalized=campaign.normalized(),
        campaign_file="t.yaml", run_dir=tmp_path))
    server = dict(pid=1, port=8000, command=["serve"], env={}, log_path=None, started_at=None, ready_seconds=None,
                  stopped_at=None, status="ready", error=None)
    dp2, one_worker = landing.ServerLayout.of(campaign.modes[0]), landing.ServerLayout(tp=1, pp=1, dp=1, ep=False)
    landing.land_server(con, "r1", landing.ServerRecord(mode="dp2", layout=dp2, **server))
    landing.land_server(con, "r1", landing.ServerRecord(mode="reference-tp1", layout=one_worker, **server))
    # a configuration of the knob axes: its mode's layout
    landing.land_server(con, "r1", landing.ServerRecord(mode="dp2-mns8", layout=dp2, **server))
    cell = expand(campaign)[0]
    landing.land_cell(con, "r1", landing.CellRecord(cell=cell, input_len=8, output_len=4, status="failed", error="x"))
    rows = con.execute("select mode, tp, pp, dp, ep from servers order by mode").fetchall()
    assert rows == [("dp2", 1, 1, 2, False), ("dp2-mns8", 1, 1, 2, False), ("reference-tp1", 1, 1, 1, False)], rows
    assert con.execute("select dp, ep from cells").fetchall() == [(2, False)]
    comments = dict(con.execute("select table_name || '.' || column_name, comment from duckdb_columns() "
                                "where column_name in ('dp', 'ep')").fetchall())
    # the tables', and the views that carry them (cell_rank_network) say what they hold too
    assert {"cells.dp", "cells.ep", "servers.dp", "servers.ep"} <= set(comments) and all(comments.values()), comments
    con.close()


METRICS = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 3.0
vllm:num_requests_waiting{engine="1",model_name="tiny"} 0.0
# TYPE vllm:request_success counter
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny"} 5.0
vllm:request_success_total{engine="1",finished_reason="length",model_name="tiny"} 7.0
vllm:request_success_total{engine="1",finished_reason="stop",model_name="tiny"} 1.0
"""


def test_per_engine_counters_are_read_by_their_engine_label():
    assert counter_by_label(METRICS, "vllm:request_success_total") == {"0": 5.0, "1": 8.0}
    assert counter_by_label(METRICS, "vllm:num_requests_waiting") == {"0": 3.0, "1": 0.0}
    assert counter_by_label(METRICS, "vllm:absent_total") == {}


# --- one real run


