"""Memory known before anything starts (servebench/planning/memory.py): what each node of a mode holds,
the refusal of a mode a node cannot hold, `servebench plan`'s lines, the start-up timeout and the KV
capacity the model's shape gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from servebench.analysis.saturation import shape_capacity
from servebench.campaign.loading import SpecError, load_campaign, parse_campaign
from servebench.cli import plan as plan_cli
from servebench.engines import get_engine
from servebench.planning import feasibility
from servebench.planning.memory import GIB, campaign_memory, startup_timeout_s
from servebench.planning.plan import make_plan

ROOT = Path(__file__).parents[2]
HOST_CPUS = {0, 1}
# real shapes at a served context of 4,096 tokens (vLLM refuses a context its KV pool cannot hold: the
# presets' own, 131,072, needs 16 GiB of KV at the 8B shape)
LLAMA_8B = "{generate: llama-3.1-8b, max_position: 4096}"
LLAMA_1B = "{generate: llama-3.2-1b, max_position: 4096}"
QWEN_1_5B = "{generate: qwen2-1.5b, max_position: 4096}"


def campaign_text(model: str, modes: str, nodes: str, engine: str = "vllm") -> str:
    return f"""
name: memory
provider: {{kind: local, nodes: {nodes}}}
engine: {{kind: {engine}}}
model: {model}
modes: {modes}
load: {{clients: [1], input_len: 16, output_len: 16, requests: 2, client: {{cpus: shared}}}}
"""


@pytest.fixture
def host_has(monkeypatch):
    """This host's MemAvailable as the test says (the real one varies from machine to machine)."""
    def set_available(gib: float) -> None:
        monkeypatch.setattr(feasibility, "this_host_available_bytes", lambda: int(gib * GIB))
        monkeypatch.setattr(plan_cli, "this_host_available_bytes", lambda: int(gib * GIB))
    set_available(64)
    return set_available


TWO_NODES = '[{name: n0, cpus: "0", memory_gib: %s}, {name: n1, cpus: "1", memory_gib: %s}]'


def test_an_8b_model_at_tp1_is_refused_on_an_8_gib_node_naming_mode_node_need_and_free(host_has):
    text = campaign_text(LLAMA_8B, "[{name: tp1}]", '[{name: n0, cpus: "0", memory_gib: 8}]')
    with pytest.raises(SpecError) as refused:
        parse_campaign(text, host_cpus=HOST_CPUS)
    message = str(refused.value)
    # 8.03 B parameters x 2 bytes (bf16) = 14.96 GiB, 1 GiB of KV cache and a working set of 4.62 GiB: three
    # processes' runtime (API server, engine core, worker: 1.5), the tokenizer's 128,256 tokens in the API server
    # and the engine core (0.67), the worker's second copy of the embedding and head (1.96), a 2048-token step's
    # activations (0.25) and 128 sequences' logits (0.24)
    assert "<string>:6: modes[0].name: " in message
    assert ("mode tp1 needs 20.58 GiB on node n0 (weights 14.96, KV 1.00, working set 4.62) but 8.00 GiB is free "
            "there (memory_gib)") in message


def test_tp2_halves_the_weights_but_two_8_gib_nodes_still_cannot_hold_them(host_has):
    # 7.48 GiB of weights a rank + 1 GiB KV + its working set > 8: n0 holds the API server and the engine core too
    text = campaign_text(LLAMA_8B, "[{name: tp2, tp: 2, executor: ray}]", TWO_NODES % (8, 8))
    with pytest.raises(SpecError) as refused:
        parse_campaign(text, host_cpus=HOST_CPUS)
    assert "mode tp2 needs 12.42 GiB on node n0 (weights 7.48, KV 1.00, working set 3.94)" in str(refused.value)
    assert "mode tp2 needs 10.74 GiB on node n1 (weights 7.48, KV 1.00, working set 2.26)" in str(refused.value)
    parse_campaign(text.replace("memory_gib: 8", "memory_gib: 13"), host_cpus=HOST_CPUS)  # fits in 13


def test_local_nodes_share_this_hosts_memory(host_has):
    host_has(16)
    text = campaign_text(LLAMA_8B, "[{name: tp2, tp: 2, executor: ray}]", TWO_NODES % (13, 13))
    with pytest.raises(SpecError) as refused:
        parse_campaign(text, host_cpus=HOST_CPUS)
    assert "needs 23.16 GiB on nodes n0, n1, which share this host, but 16.00 GiB is free here" in str(refused.value)


def test_replicas_on_local_nodes_each_count_against_this_hosts_memory(host_has):
    """Each replica is a whole server on nodes of its own; on local nodes all of them share this host: two
    Llama-3.2-1B servers need twice one's memory (6.35 GiB each)."""
    host_has(7)
    one = campaign_text(LLAMA_1B, "[{name: single, nodes: [n0]}]", TWO_NODES % (13, 13))
    parse_campaign(one, host_cpus=HOST_CPUS)
    text = campaign_text(LLAMA_1B, "[{name: r2, replicas: 2}]", TWO_NODES % (13, 13))
    with pytest.raises(SpecError) as refused:
        parse_campaign(text, host_cpus=HOST_CPUS)
    assert "mode r2 needs 12.69 GiB on 2 replicas of 6.35 (the first on n0), all on this host, but 7.00 GiB is " \
           "free here" in str(refused.value)


def test_a_tiny_model_always_fits(host_has):
    host_has(8)
    load_campaign(ROOT / "campaigns" / "smoke.yaml", host_cpus=HOST_CPUS)


def test_a_node_whose_memory_is_not_known_is_not_refused(host_has):
    campaign = parse_campaign(campaign_text(LLAMA_8B, "[{name: tp1}]", '[{name: n0, cpus: "0"}]'),
                              host_cpus=HOST_CPUS)
    [memory] = campaign_memory(campaign, get_engine, [("n0", [0])], None, host_available=None)
    assert memory.nodes[0].available is None and memory.nodes[0].need is not None


def test_llamacpp_rpc_splits_layers_and_kv_cells_over_its_workers(host_has):
    text = campaign_text("{generate: llama-3.1-8b, quantization: q4_0}",
                         "[{name: rpc2, executor: rpc, pp: 2, knobs: {ctx_size: 4096}}]",
                         TWO_NODES % (8, 8), engine="llamacpp")
    campaign = parse_campaign(text, host_cpus=HOST_CPUS)
    [memory] = campaign_memory(campaign, get_engine, [("n0", [0]), ("n1", [1])], None, 64 * GIB)
    n0, n1 = memory.nodes
    assert [r.share.label for r in n0.ranks] == ["server", "rpc0"] and [r.share.label for r in n1.ranks] == ["rpc1"]
    # 16 layers x 8 KV heads x 128 x 2 (K and V) x 2 bytes (f16) = 64 KiB a token, 4096 cells
    assert n1.ranks[0].kv == 4096 * 64 * 1024
    assert memory.kv_capacity_tokens == 4096
    assert n0.ranks[0].weights < n1.ranks[0].weights  # the server keeps the embedding, rpc1 the head too


def test_plan_prints_memory_per_mode_and_node(host_has, tmp_path):
    smoke = ROOT / "campaigns" / "smoke.yaml"
    text = plan_cli.describe_plan(make_plan(load_campaign(smoke, host_cpus=HOST_CPUS), HOST_CPUS), smoke)
    assert "shape    tiny-llama: 853,120 parameters, 4 layers" in text
    assert "vllm: weights as bfloat16, KV 1,024 bytes a token (bfloat16, all layers)" in text
    assert ("node0 (rank0, rank1): weights 0.00 + KV 2.00 + working set 2.03 = 4.03 of 64.00 available "
            "(this host's MemAvailable)") in text

    big = tmp_path / "big.yaml"
    big.write_text(campaign_text(LLAMA_8B, "[{name: tp2, tp: 2, executor: ray}]",
                                 TWO_NODES % (13, 13)))
    text = plan_cli.describe_plan(make_plan(load_campaign(big, host_cpus=HOST_CPUS), HOST_CPUS), big)
    assert "shape    llama-3.1-8b: 8,030,261,248 parameters, 32 layers" in text
    assert "KV 131,072 bytes a token (bfloat16, all layers)" in text
    # vLLM keeps one block of 128 tokens of each pool as its null block: the plan says what serves
    assert "memory   GiB per node (KV capacity 16,256 tokens: a pool of 16,384 less the 128 the engine keeps):" \
        in text
    assert "n0 (rank0): weights 7.48 + KV 1.00 + working set 3.94 = 12.42 of 13.00 available (memory_gib)" in text
    assert "these nodes share this host: 23.16 of 64.00 available" in text


def test_the_start_up_timeout_grows_with_the_weights_a_rank_loads():
    assert startup_timeout_s(600, 1_706_240, emulated=False) == 600        # the tiny model: as before
    assert startup_timeout_s(600, 16_060_522_496, emulated=False) == 760   # 8B bf16 at 100 MB/s
    assert startup_timeout_s(600, 16_060_522_496, emulated=True) == 1403   # at 20 MB/s under qemu
    assert startup_timeout_s(600, None, emulated=False) == 600             # unknown: the configured value


def test_the_kv_capacity_from_the_shape():
    spec = {"engine": {"kind": "vllm"}, "model": {"generate": "llama-3.1-8b"},
            "modes": [{"name": "tp2", "executor": "mp", "tp": 2}]}
    row = {"mode": "tp2-kvg2", "engine": "vllm", "tp": 2, "pp": 1, "executor": "mp",
           "knobs": '{"kv_cache_gib": 2}', "spec": spec}
    assert shape_capacity(row) == 2 * GIB // (2 * 32 * 4 * 128 * 2)   # 2 GiB over a rank's 4 KV heads
    assert shape_capacity({**row, "knobs": '{"kv_cache_blocks": 8}'}) == 8 * 128
    gguf = {"engine": {"kind": "llamacpp"}, "model": {"generate": "tiny-llama"},
            "modes": [{"name": "rpc2", "executor": "rpc", "pp": 2}]}
    assert shape_capacity({"mode": "rpc2-cs1000", "engine": "llamacpp", "tp": 1, "pp": 2, "executor": "rpc",
                           "knobs": '{"ctx_size": 1000}', "spec": gguf}) == 1024   # rounded up to 256


# data parallel: each engine the whole model


DP_NODES = '[{name: n0, cpus: "0-3"}, {name: n1, cpus: "4-7"}]'


def memory_of(modes: str, nodes: str = DP_NODES) -> dict:
    campaign = parse_campaign(campaign_text(QWEN_1_5B, modes, nodes), host_cpus=set(range(8)))
    found = campaign_memory(campaign, get_engine, [("n0", [0, 1, 2, 3]), ("n1", [4, 5, 6, 7])], None, 64 * GIB)
    return {memory.mode.name: memory for memory in found}


def test_each_dp_engine_holds_the_whole_model_and_its_own_kv_pools(host_has):
    found = memory_of("[{name: tp1}, {name: dp2, dp: 2}, {name: tp2, tp: 2}, {name: dp2tp2, dp: 2, tp: 2}]")
    [tp1] = found["tp1"].nodes[0].ranks
    dp2 = found["dp2"].nodes[0].ranks
    assert [r.share.label for r in dp2] == ["dp0.rank0", "dp1.rank0"]
    assert all(r.share.embedding and r.share.head and r.share.layers == 28 for r in dp2)
    assert [r.weights for r in dp2] == [tp1.weights] * 2 and [r.kv for r in dp2] == [GIB] * 2
    assert found["dp2"].kv_capacity_tokens == found["tp1"].kv_capacity_tokens    # per engine, as vLLM logs it
    # dp=2 x tp=2 on one node: two engines of two TP ranks, each engine the whole model over its two ranks
    dp2tp2 = found["dp2tp2"].nodes[0]
    assert [r.share.label for r in dp2tp2.ranks] == ["dp0.rank0", "dp0.rank1", "dp1.rank0", "dp1.rank1"]
    assert dp2tp2.part("weights") == 2 * found["tp2"].nodes[0].part("weights")
    assert found["dp2tp2"].kv_capacity_tokens == found["tp2"].kv_capacity_tokens


def test_dp_engines_across_nodes_each_hold_the_model_on_their_node(host_has):
    found = memory_of("[{name: tp2, tp: 2}, {name: dp2, dp: 2, tp: 2, executor: mp-multinode}]")
    n0, n1 = found["dp2"].nodes
    assert [r.share.label for r in n0.ranks] == ["dp0.rank0", "dp0.rank1"]
    assert [r.share.label for r in n1.ranks] == ["dp1.rank0", "dp1.rank1"]
    assert n0.part("weights") == n1.part("weights") == found["tp2"].nodes[0].part("weights")
    assert n0.part("kv") == n1.part("kv") == 2 * GIB
    # each node an engine core and two workers; n0 the API server and the DP coordinator, n1 its headless launcher
    from servebench.engines.vllm.memory import API_SERVER_BYTES_PER_TOKEN, PROCESS_RUNTIME_BYTES
    api_server = PROCESS_RUNTIME_BYTES + 151_936 * API_SERVER_BYTES_PER_TOKEN
    assert n0.part("working_set") - n1.part("working_set") == api_server   # coordinator and launcher alike


# the working set: from the shape and the settings (docs/memory.md)


def vllm_node(model: str, modes: str, knobs_gib: float = 64) -> list:
    campaign = parse_campaign(campaign_text(model, modes, '[{name: n0, cpus: "0-3"}]'), host_cpus=set(range(4)))
    return [memory.nodes[0] for memory in campaign_memory(campaign, get_engine, [("n0", [0, 1, 2, 3])], None,
                                                          int(knobs_gib * GIB))]


def test_the_working_set_grows_with_the_vocabulary_the_batch_and_the_processes(host_has):
    from servebench.engines.vllm.memory import API_SERVER_BYTES_PER_TOKEN, PROCESS_RUNTIME_BYTES
    tiny, qwen = vllm_node("{generate: tiny-llama}", "[{name: tp1}]")[0], \
        vllm_node(QWEN_1_5B, "[{name: tp1}]")[0]
    # the tiny model: the runtime of its three processes and little of its own (a 1,024-token vocabulary)
    assert 3 * PROCESS_RUNTIME_BYTES <= tiny.part("working_set") < 3 * PROCESS_RUNTIME_BYTES + 0.05 * GIB
    # Qwen2-1.5B: the embedding and the head held twice (2 x 151,936 x 1,536 x 2 bytes) make most of the rest
    vocab_copies = 2 * 151_936 * 1_536 * 2
    assert qwen.part("working_set") - tiny.part("working_set") > vocab_copies
    tied = vllm_node("{generate: qwen2-1.5b, tie_embeddings: true, max_position: 4096}", "[{name: tp1}]")[0]
    assert qwen.part("working_set") - tied.part("working_set") == pytest.approx(vocab_copies / 2, rel=0.001)
    seqs = vllm_node(QWEN_1_5B, "[{name: tp1, knobs: {max_num_seqs: 256}}]")[0]
    assert seqs.part("working_set") - qwen.part("working_set") == 128 * 151_936 * 4 * 4   # logits, 4 copies
    dp2, tp2 = vllm_node(QWEN_1_5B, "[{name: dp2, dp: 2}, {name: tp2, tp: 2}]")
    # dp=2: two engines, each its core and worker, one API server and the DP coordinator (a bare runtime)
    assert dp2.part("working_set") == 2 * qwen.part("working_set") - 151_936 * API_SERVER_BYTES_PER_TOKEN
    assert tp2.part("working_set") < 2 * qwen.part("working_set")   # the vocabulary split over two ranks


# Measured (docs/memory.md): smaps_rollup Pss of every process of vLLM 0.32 serving the tiny
# Llama (float32, eager) at DP=2 on one node: API server 0.462, DP coordinator 0.413, engine cores 0.438 and
# 0.438, workers (with 1 GiB of KV each) 1.475 and 1.472 GiB
MEASURED_TINY_DP2_PSS_GIB = 0.462 + 0.413 + 2 * 0.438 + 1.475 + 1.472


# ... and the Qwen2-1.5B shape cut to 2 layers (bf16, eager, 1 GiB of KV a rank), each process at its peak Pss
# under the load of tests/e2e/test_e2e_campaign.py's campaign at that shape: TP=1 API server 0.939,
# engine core 0.594, worker 3.483, resource tracker 0.006; TP=2 API server 0.918, engine core 0.590, workers
# 2.504 and 2.498, four helpers 0.153
MEASURED_REAL_SHAPE_PSS_GIB = {"tp1": 0.939 + 0.594 + 3.483 + 0.006, "tp2": 0.918 + 0.590 + 2.504 + 2.498 + 0.153}
REAL_SHAPE_CUT = "{generate: qwen2-1.5b, layers: 2, max_position: 4096}"


def test_the_plan_covers_what_a_served_server_held(host_has):
    [dp2] = vllm_node("{generate: tiny-llama, dtype: float32}", "[{name: dp2, dp: 2}]")
    assert MEASURED_TINY_DP2_PSS_GIB <= dp2.need / GIB <= 1.25 * MEASURED_TINY_DP2_PSS_GIB
    tp1, tp2 = vllm_node(REAL_SHAPE_CUT, "[{name: tp1}, {name: tp2, tp: 2}]")
    for mode, node in (("tp1", tp1), ("tp2", tp2)):
        measured = MEASURED_REAL_SHAPE_PSS_GIB[mode]
        assert measured <= node.need / GIB <= 1.35 * measured, (mode, node.need / GIB, measured)


def test_a_vllm_pool_that_cannot_hold_one_context_is_refused_and_the_null_block_is_not_counted(host_has):
    """vLLM keeps the first block of its pool as the null block and refuses to start when the rest cannot
    hold one sequence of the served context (measured at the 8B shape: 16 blocks, "maximum model length is
    1920"): refused at plan time, naming mode, capacity and context; a mode's --max-model-len is the context."""
    def modes(knobs: str, args: str = "[]") -> str:
        return f"[{{name: tp1, knobs: {knobs}, args: {args}}}]"
    model = "{generate: tiny-llama, max_position: 2048}"
    node = '[{name: n0, cpus: "0"}]'
    with pytest.raises(SpecError) as refused:
        parse_campaign(campaign_text(model, modes("{kv_cache_blocks: 16}"), node), host_cpus=HOST_CPUS)
    assert ("mode tp1: its KV cache holds 1,920 tokens of a sequence, fewer than the model's context of 2,048"
            in str(refused.value))
    parse_campaign(campaign_text(model, modes("{kv_cache_blocks: 17}"), node), host_cpus=HOST_CPUS)
    parse_campaign(campaign_text(model, modes("{kv_cache_blocks: 16}", '["--max-model-len", "1920"]'), node),
                   host_cpus=HOST_CPUS)
