"""Memory known before anything starts (servebench/serving/memory.py): what each node of a mode holds,
the refusal of a mode a node cannot hold, `servebench plan`'s lines, the start-up timeout and the KV
capacity the model's shape gives."""

from __future__ import annotations

from pathlib import Path

import pytest

from servebench.analysis.saturation import shape_capacity
from servebench.campaign import feasibility
from servebench.campaign.loading import SpecError, load_campaign, parse_campaign
from servebench.campaign.plan import make_plan
from servebench.cli import plan as plan_cli
from servebench.engines import get_engine
from servebench.serving.memory import GIB, campaign_memory, startup_timeout_s

ROOT = Path(__file__).parents[1]
HOST_CPUS = {0, 1}


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
    text = campaign_text("{generate: llama-3.1-8b}", "[{name: tp1}]", '[{name: n0, cpus: "0", memory_gib: 8}]')
    with pytest.raises(SpecError) as refused:
        parse_campaign(text, host_cpus=HOST_CPUS)
    message = str(refused.value)
    # 8.03 B parameters x 2 bytes (bf16) = 14.96 GiB, 1 GiB of KV cache, 1 GiB of working set
    assert "<string>:6: modes[0].name: " in message
    assert ("mode tp1 needs 16.96 GiB on node n0 (weights 14.96, KV 1.00, working set 1.00) but 8.00 GiB is free "
            "there (memory_gib)") in message


def test_tp2_halves_the_weights_but_two_8_gib_nodes_still_cannot_hold_them(host_has):
    # 7.48 GiB of weights a rank + 1 GiB KV + 1 GiB working set = 9.48 GiB > 8
    text = campaign_text("{generate: llama-3.1-8b}", "[{name: tp2, tp: 2, executor: ray}]", TWO_NODES % (8, 8))
    with pytest.raises(SpecError) as refused:
        parse_campaign(text, host_cpus=HOST_CPUS)
    assert "mode tp2 needs 9.48 GiB on node n0" in str(refused.value)
    assert "mode tp2 needs 9.48 GiB on node n1" in str(refused.value)
    parse_campaign(text.replace("memory_gib: 8", "memory_gib: 12"), host_cpus=HOST_CPUS)  # fits in 12


def test_local_nodes_share_this_hosts_memory(host_has):
    host_has(16)
    text = campaign_text("{generate: llama-3.1-8b}", "[{name: tp2, tp: 2, executor: ray}]", TWO_NODES % (12, 12))
    with pytest.raises(SpecError) as refused:
        parse_campaign(text, host_cpus=HOST_CPUS)
    assert "needs 18.96 GiB on nodes n0, n1, which share this host, but 16.00 GiB is free here" in str(refused.value)


def test_a_tiny_model_always_fits(host_has):
    host_has(8)
    load_campaign(ROOT / "campaigns" / "smoke.yaml", host_cpus=HOST_CPUS)


def test_a_node_whose_memory_is_not_known_is_not_refused():
    campaign = parse_campaign(campaign_text("{generate: llama-3.1-8b}", "[{name: tp1}]", '[{name: n0, cpus: "0"}]'),
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
    assert ("node0 (rank0, rank1): weights 0.00 + KV 2.00 + working set 2.00 = 4.00 of 64.00 available "
            "(this host's MemAvailable)") in text

    big = tmp_path / "big.yaml"
    big.write_text(campaign_text("{generate: llama-3.1-8b}", "[{name: tp2, tp: 2, executor: ray}]",
                                 TWO_NODES % (12, 12)))
    text = plan_cli.describe_plan(make_plan(load_campaign(big, host_cpus=HOST_CPUS), HOST_CPUS), big)
    assert "shape    llama-3.1-8b: 8,030,261,248 parameters, 32 layers" in text
    assert "KV 131,072 bytes a token (bfloat16, all layers)" in text
    assert "memory   GiB per node (KV capacity 16,384 tokens):" in text
    assert "n0 (rank0): weights 7.48 + KV 1.00 + working set 1.00 = 9.48 of 12.00 available (memory_gib)" in text
    assert "these nodes share this host: 18.96 of 64.00 available" in text


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
