"""Mixture-of-experts shapes by name (servebench/models/shapes.py: deepseek-r1, qwen3-30b-a3b): their
parameter counts against the published ones, the refusal of an override that cannot route, the Hugging Face
directory (tensor names and shapes vLLM's loader maps, config.json in each architecture's own format), the
GGUF file (llama.cpp's DEEPSEEK2 and qwen3moe keys and tensors) and the memory plan (MoE weights per rank,
MLA's KV cache of kv_lora_rank + qk_rope_head_dim a token a layer)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pydantic import ValidationError

from servebench.campaign.loading import parse_campaign
from servebench.config.campaign import GeneratedModelSpec
from servebench.engines import get_engine
from servebench.engines.base import RankShare
from servebench.models import gguf_model, hf_model
from servebench.models.shapes import PRESETS, PUBLISHED_ACTIVE_PARAMETERS, PUBLISHED_PARAMETERS, preset
from servebench.planning.memory import GIB, ModelWeights, campaign_memory, shape_from_config, share_weight_bytes

# DeepSeek's architecture cut small: MLA keeps vLLM's CPU latent (512 + 64), one dense layer, two with experts
TINY_DEEPSEEK = {"generate": "deepseek-r1", "layers": 3, "dense_layers": 1, "experts": 8, "experts_per_token": 2,
                 "expert_groups": 4, "expert_groups_used": 2, "hidden": 128, "heads": 2, "kv_heads": 2,
                 "intermediate": 256, "moe_intermediate": 64, "q_lora_rank": 96, "qk_nope_head_dim": 32,
                 "v_head_dim": 32, "vocab_size": 1000, "max_position": 1024}
TINY_QWEN3 = {"generate": "qwen3-30b-a3b", "layers": 2, "hidden": 128, "heads": 4, "kv_heads": 2, "head_dim": 64,
              "experts": 8, "experts_per_token": 2, "moe_intermediate": 64, "vocab_size": 1000, "max_position": 1024}


def spec_of(fields: dict, **overrides) -> GeneratedModelSpec:
    return GeneratedModelSpec.model_validate({**fields, **overrides})


# --- shapes ---------------------------------------------------------------------------------------------

def test_deepseek_r1_is_671b_without_its_mtp_layer_and_37b_active():
    shape = preset("deepseek-r1")
    # by hand: MLA 187,107,328 a layer with its norms (q_a 7168x1536, q_b 1536x128x192, kv_a 7168x576,
    # kv_b 512x128x256, o 16384x7168), dense MLP 3 x 7168 x 18432, experts (256 + 1 shared) x 3 x 7168 x 2048
    attention = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168
    assert attention == 187_107_328
    dense = attention + 3 * 7168 * 18432 + 2 * 7168
    moe = attention + 257 * 3 * 7168 * 2048 + 256 * 7168 + 256 + 2 * 7168
    assert shape.parameters() == 3 * dense + 58 * moe + 2 * 129280 * 7168 + 7168 == 671_026_419_200
    assert abs(shape.parameters() / PUBLISHED_PARAMETERS["deepseek-r1"] - 1) < 0.001
    assert shape.active_parameters() == 37_552_297_472
    assert abs(shape.active_parameters() / PUBLISHED_ACTIVE_PARAMETERS["deepseek-r1"] - 1) < 0.02


def test_qwen3_30b_a3b_is_30_5b_and_3_3b_active():
    shape = preset("qwen3-30b-a3b")
    layer = 2048 * 4096 * 2 + 2 * 2048 * 512 + 2 * 128 + 128 * 3 * 2048 * 768 + 128 * 2048 + 2 * 2048
    assert shape.parameters() == 48 * layer + 2 * 151936 * 2048 + 2048 == 30_532_122_624
    assert abs(shape.parameters() / PUBLISHED_PARAMETERS["qwen3-30b-a3b"] - 1) < 0.002   # "30.5B": rounded
    assert shape.active_parameters() == 3_353_032_704
    assert abs(shape.active_parameters() / PUBLISHED_ACTIVE_PARAMETERS["qwen3-30b-a3b"] - 1) < 0.02


def test_mla_caches_the_latent_and_the_rope_key_not_keys_and_values_per_head():
    shape = preset("deepseek-r1")
    assert shape.kv_bytes_per_token("bfloat16") == 61 * (512 + 64) * 2              # 70,272, not 61 x 2 x 128 x 192 x 2
    assert shape.rank_kv_bytes_per_token("bfloat16", tp=2) == 61 * 576 * 2         # the latent is on every TP rank
    assert shape.rank_kv_bytes_per_token("bfloat16", pp=2) == 31 * 576 * 2
    assert preset("qwen3-30b-a3b").kv_bytes_per_token("bfloat16") == 2 * 48 * 4 * 128 * 2


def test_the_overrides_fit_the_shape_to_this_machine():
    cut = spec_of({"generate": "deepseek-r1", "layers": 3, "experts": 16})
    assert (cut.layers, cut.experts, cut.dense_layers, cut.kv_lora_rank, cut.qk_rope_head_dim) == (3, 16, 2, 512, 64)
    assert cut.shape().moe_layers == 1                 # the preset's 3 dense layers cut to layers - 1
    assert spec_of({"generate": "deepseek-r1", "layers": 3, "dense_layers": 1, "experts": 16}).shape().moe_layers == 2
    assert spec_of({"generate": "deepseek-r1", "layers": 10}).dense_layers == 3   # not cut when there is room
    assert spec_of({"generate": "llama-3.1-8b", "layers": 2}).shape() == preset("llama-3.1-8b").with_overrides(layers=2)
    assert set(PUBLISHED_PARAMETERS) <= set(PRESETS)


@pytest.mark.parametrize("overrides, field, why", [
    ({"experts": 4}, "experts_per_token", "experts_per_token (8) must be between 1 and experts (4)"),
    ({"experts": 12}, "experts", "experts (12) must be divisible by expert_groups (8)"),
    ({"experts_per_token": 8, "expert_groups": 4, "expert_groups_used": 1, "experts": 16}, "experts_per_token",
     "experts_per_token (8) is more than the 4 experts in expert_groups_used (1) groups of 4"),
    ({"expert_groups_used": 9}, "expert_groups_used", "expert_groups_used (9) must be at most expert_groups (8)"),
    ({"layers": 3, "dense_layers": 3}, "dense_layers", "dense_layers (3) must be fewer than layers (3)"),
    ({"kv_heads": 1}, "kv_heads", "kv_heads (1) must equal heads (128) for deepseek_v3"),
    ({"kv_lora_rank": None}, "kv_lora_rank", "kv_lora_rank: deepseek_v3 needs"),
    ({"experts": 0}, "experts", "experts: architecture deepseek_v3 needs at least 1 routed expert"),
])
def test_a_shape_that_cannot_route_is_refused_naming_the_field(overrides, field, why):
    with pytest.raises(ValidationError) as refused:
        spec_of({"generate": "deepseek-r1"}, **overrides)
    assert why in str(refused.value) and field in str(refused.value)


def test_experts_and_latent_attention_are_refused_where_the_architecture_has_none():
    with pytest.raises(ValidationError, match="experts: 8 on architecture llama, which has no experts"):
        spec_of({"generate": "llama-3.1-8b", "experts": 8})
    with pytest.raises(ValidationError, match="kv_lora_rank: multi-head latent attention is deepseek_v3's"):
        spec_of({"generate": "qwen3-30b-a3b", "kv_lora_rank": 512})
    with pytest.raises(ValidationError, match="dense_layers \\(1\\): qwen3_moe has experts in every layer"):
        spec_of({"generate": "qwen3-30b-a3b", "dense_layers": 1})


# --- the Hugging Face directory -------------------------------------------------------------------------

def headers(directory) -> dict[str, dict]:
    entries = {}
    for path in sorted(directory.glob("*.safetensors")):
        header = hf_model.read_safetensors_header(path)
        header.pop("__metadata__")
        entries.update(header)
    return entries


def test_hf_deepseek_has_v3s_tensor_names_and_shapes(tmp_path):
    spec = spec_of(TINY_DEEPSEEK)
    hf_model.write_hf_model(spec, tmp_path / "model", chunk_values=5000)
    entries = headers(tmp_path / "model")
    attention = {"q_a_proj.weight": [96, 128], "q_a_layernorm.weight": [96], "q_b_proj.weight": [2 * (32 + 64), 96],
                 "kv_a_proj_with_mqa.weight": [512 + 64, 128], "kv_a_layernorm.weight": [512],
                 "kv_b_proj.weight": [2 * (32 + 32), 512], "o_proj.weight": [128, 2 * 32]}
    layer = {"input_layernorm.weight": [128], "post_attention_layernorm.weight": [128],
             **{f"self_attn.{name}": shape for name, shape in attention.items()}}
    dense = {"mlp.gate_proj.weight": [256, 128], "mlp.up_proj.weight": [256, 128], "mlp.down_proj.weight": [128, 256]}
    moe = {"mlp.gate.weight": [8, 128], "mlp.gate.e_score_correction_bias": [8],
           "mlp.shared_experts.gate_proj.weight": [64, 128], "mlp.shared_experts.up_proj.weight": [64, 128],
           "mlp.shared_experts.down_proj.weight": [128, 64],
           **{f"mlp.experts.{e}.{p}_proj.weight": ([128, 64] if p == "down" else [64, 128])
              for e in range(8) for p in ("gate", "up", "down")}}
    expected = {"model.embed_tokens.weight": [1000, 128], "model.norm.weight": [128], "lm_head.weight": [1000, 128],
                **{f"model.layers.0.{n}": s for n, s in {**layer, **dense}.items()},
                **{f"model.layers.{i}.{n}": s for i in (1, 2) for n, s in {**layer, **moe}.items()}}
    assert {name: entry["shape"] for name, entry in entries.items()} == expected
    assert sum(int(np.prod(entry["shape"])) for entry in entries.values()) == spec.shape().parameters()
    dtypes = {name: entry["dtype"] for name, entry in entries.items()}
    for layer in (1, 2):
        assert dtypes.pop(f"model.layers.{layer}.mlp.gate.e_score_correction_bias") == "F32"  # as DeepSeek ships it
    assert set(dtypes.values()) == {"BF16"}
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert (config["architectures"], config["model_type"]) == (["DeepseekV3ForCausalLM"], "deepseek_v3")
    assert {key: config[key] for key in ("first_k_dense_replace", "n_routed_experts", "num_experts_per_tok",
                                         "n_shared_experts", "moe_intermediate_size", "n_group", "topk_group",
                                         "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                         "v_head_dim", "num_key_value_heads", "topk_method", "scoring_func",
                                         "routed_scaling_factor", "norm_topk_prob", "num_nextn_predict_layers")} == {
        "first_k_dense_replace": 1, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
        "moe_intermediate_size": 64, "n_group": 4, "topk_group": 2, "kv_lora_rank": 512, "q_lora_rank": 96,
        "qk_nope_head_dim": 32, "qk_rope_head_dim": 64, "v_head_dim": 32, "num_key_value_heads": 2,
        "topk_method": "noaux_tc", "scoring_func": "sigmoid", "routed_scaling_factor": 2.5, "norm_topk_prob": True,
        "num_nextn_predict_layers": 0}
    assert config["rope_scaling"]["type"] == "yarn" and config["rope_scaling"]["factor"] == 40
    read_back = shape_from_config(config)   # what the plan reads of a local directory
    assert read_back.parameters() == spec.shape().parameters() and read_back.moe_layers == 2
    assert read_back.kv_bytes_per_token("bfloat16") == 3 * 576 * 2
    tokenizer = json.loads((tmp_path / "model" / "tokenizer_config.json").read_text())
    assert tokenizer["tokenizer_class"] == "PreTrainedTokenizerFast"


def test_hf_qwen3_moe_has_its_tensor_names_and_config(tmp_path):
    spec = spec_of(TINY_QWEN3)
    hf_model.write_hf_model(spec, tmp_path / "model")
    entries = headers(tmp_path / "model")
    assert entries["model.layers.1.self_attn.q_proj.weight"]["shape"] == [4 * 64, 128]
    assert entries["model.layers.1.self_attn.k_norm.weight"]["shape"] == [64]
    assert entries["model.layers.0.mlp.gate.weight"]["shape"] == [8, 128]
    assert entries["model.layers.0.mlp.experts.7.down_proj.weight"]["shape"] == [128, 64]
    assert not [name for name in entries if "shared" in name or "bias" in name or ".mlp.gate_proj" in name]
    assert sum(int(np.prod(entry["shape"])) for entry in entries.values()) == spec.shape().parameters()
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    assert (config["architectures"], config["model_type"], config["num_experts"], config["num_experts_per_tok"],
            config["moe_intermediate_size"], config["head_dim"], config["norm_topk_prob"], config["mlp_only_layers"],
            config["decoder_sparse_step"]) == (["Qwen3MoeForCausalLM"], "qwen3_moe", 8, 2, 64, 64, True, [], 1)
    read_back = shape_from_config(config)
    assert read_back.parameters() == spec.shape().parameters() and read_back.moe_layers == 2
    tokenizer = json.loads((tmp_path / "model" / "tokenizer_config.json").read_text())
    assert tokenizer["tokenizer_class"] == "Qwen2Tokenizer"   # transformers imposes Qwen2's on qwen3_moe


def test_hf_refuses_an_mla_latent_the_cpu_kernels_do_not_take(tmp_path):
    """Measured: kv_lora_rank 256 started, then failed its first decode ('Unsupported block size: 16')."""
    with pytest.raises(ValueError, match="kv_lora_rank \\(256\\) and qk_rope_head_dim \\(64\\): the CPU MLA kernels"):
        hf_model.write_hf_model(spec_of(TINY_DEEPSEEK, kv_lora_rank=256), tmp_path / "model")
    assert not (tmp_path / "model").exists()
    gguf_model.write_gguf(spec_of(TINY_DEEPSEEK, kv_lora_rank=256), tmp_path / "model.gguf")   # llama.cpp: any


# --- the GGUF file --------------------------------------------------------------------------------------

def gguf_fields_and_tensors(path):
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    fields = {name: field.contents() for name, field in reader.fields.items() if not name.startswith("tokenizer.")}
    tensors = {t.name: ([int(n) for n in t.shape], t.tensor_type.name) for t in reader.tensors}
    return fields, tensors


def test_gguf_deepseek_is_deepseek2_with_mla_keys_and_sigmoid_routing(tmp_path):
    spec = spec_of(TINY_DEEPSEEK, quantization="q8_0")
    path = gguf_model.write_gguf(spec, tmp_path / "model.gguf")
    fields, tensors = gguf_fields_and_tensors(path)
    assert fields["general.architecture"] == "deepseek2"
    expected = {"block_count": 3, "embedding_length": 128, "feed_forward_length": 256, "attention.head_count": 2,
                "attention.head_count_kv": 1, "attention.key_length": 576, "attention.value_length": 512,
                "attention.key_length_mla": 96, "attention.value_length_mla": 32, "rope.dimension_count": 64,
                "attention.q_lora_rank": 96, "attention.kv_lora_rank": 512, "leading_dense_block_count": 1,
                "expert_count": 8, "expert_used_count": 2, "expert_feed_forward_length": 64,
                "expert_shared_count": 1, "expert_weights_scale": 2.5, "expert_weights_norm": True,
                "expert_gating_func": 2, "expert_group_count": 4, "expert_group_used_count": 2,
                "rope.scaling.type": "yarn", "rope.scaling.factor": 40.0,
                "rope.scaling.original_context_length": 4096}
    assert {key: fields[f"deepseek2.{key}"] for key in expected} == expected
    assert fields["deepseek2.rope.scaling.yarn_log_multiplier"] == pytest.approx(0.1)
    # ggml order (ne0 first), as deepseek2.cpp creates them
    assert tensors["blk.1.attn_k_b.weight"] == ([32, 512, 2], "Q8_0")
    assert tensors["blk.1.attn_v_b.weight"] == ([512, 32, 2], "Q8_0")
    assert tensors["blk.1.attn_kv_a_mqa.weight"] == ([128, 576], "Q8_0")
    assert tensors["blk.1.ffn_gate_exps.weight"] == ([128, 64, 8], "Q8_0")
    assert tensors["blk.1.ffn_down_exps.weight"] == ([64, 128, 8], "Q8_0")
    assert tensors["blk.2.ffn_up_shexp.weight"] == ([128, 64], "Q8_0")
    assert tensors["blk.2.ffn_gate_inp.weight"] == ([128, 8], "F32")
    assert tensors["blk.2.exp_probs_b.bias"] == ([8], "F32")
    assert tensors["blk.0.ffn_gate.weight"] == ([128, 256], "Q8_0") and "blk.0.ffn_gate_inp.weight" not in tensors
    assert not [name for name in tensors if "attn_kv_b" in name]      # the legacy non-MLA tensor
    assert sum(int(np.prod(shape)) for shape, _ in tensors.values()) == spec.shape().parameters()


def test_gguf_qwen3_moe_is_qwen3moe(tmp_path):
    spec = spec_of(TINY_QWEN3)
    path = gguf_model.write_gguf(spec, tmp_path / "model.gguf")
    fields, tensors = gguf_fields_and_tensors(path)
    assert fields["general.architecture"] == "qwen3moe"
    assert (fields["qwen3moe.expert_count"], fields["qwen3moe.expert_used_count"],
            fields["qwen3moe.expert_feed_forward_length"], fields["qwen3moe.attention.key_length"],
            fields["qwen3moe.attention.head_count_kv"]) == (8, 2, 64, 64, 2)
    assert "qwen3moe.expert_gating_func" not in fields        # softmax, llama.cpp's default
    assert tensors["blk.0.attn_q_norm.weight"] == ([64], "F32")
    assert tensors["blk.1.ffn_up_exps.weight"] == ([128, 64, 8], "F16")
    assert sum(int(np.prod(shape)) for shape, _ in tensors.values()) == spec.shape().parameters()


def test_gguf_refuses_a_deepseek_without_q_lora_that_llama_cpp_would_not_read(tmp_path):
    with pytest.raises(ValueError, match="q_lora_rank null: a DEEPSEEK2 GGUF without attention.q_lora_rank is read"):
        gguf_model.write_gguf(spec_of(TINY_DEEPSEEK, q_lora_rank=None), tmp_path / "model.gguf")


# --- memory ---------------------------------------------------------------------------------------------

def campaign(model: dict, modes: str, engine: str = "vllm"):
    """The campaign parsed as on a host with 64 GiB free (the plan's check against this host's memory is
    tests/unit/test_memory_plan.py's; here the layout is what is checked, whatever the machine has free now)."""
    from unittest import mock

    from servebench.planning import feasibility

    with mock.patch.object(feasibility, "this_host_available_bytes", lambda: 64 * GIB):
        return _campaign(model, modes, engine)


def _campaign(model: dict, modes: str, engine: str):
    text = f"""
name: moe-memory
provider: {{kind: local, nodes: [{{name: n0, cpus: "0"}}, {{name: n1, cpus: "1"}}]}}
engine: {{kind: {engine}, env: {{VLLM_CPU_KVCACHE_SPACE: 1}}}}
model: {json.dumps(model)}
modes: {modes}
load: {{clients: [1], input_len: 16, output_len: 16, requests: 2, client: {{cpus: shared}}}}
"""
    if engine == "llamacpp":
        text = text.replace(", env: {VLLM_CPU_KVCACHE_SPACE: 1}", "")
    return parse_campaign(text, host_cpus={0, 1})


def test_vllm_plans_the_mla_kv_capacity_and_moe_weights_per_rank():
    model = {**TINY_DEEPSEEK, "hidden": 256, "heads": 4, "kv_heads": 4}
    [tp1, tp2] = campaign_memory(campaign(model, "[{name: tp1}, {name: tp2, tp: 2, oversubscribe: true}]"),
                                 get_engine, [("n0", [0])], None, 64 * GIB)
    # 1 GiB a rank over 3 layers x 576 values x 2 bytes: the same on both TP ranks (the latent is not split)
    assert tp1.kv_capacity_tokens == tp2.kv_capacity_tokens == GIB // (3 * 576 * 2) == 310_689
    shape = spec_of(model).shape()
    [rank] = tp1.nodes[0].ranks
    assert rank.weights == shape.parameters() * 2
    half = tp2.nodes[0].ranks[0].weights
    dense, moe = shape.layer_breakdown(False), shape.layer_breakdown(True)
    replicated = dense.replicated + dense.small + 2 * (moe.replicated + moe.small) + 256
    assert half == round((shape.parameters() - replicated) / 2 * 2 + replicated * 2)
    assert replicated > 0 and rank.weights / 2 < half < rank.weights


def test_llamacpp_plans_mla_kv_cells_in_f16():
    [memory] = campaign_memory(campaign({**TINY_DEEPSEEK, "quantization": "q8_0"},
                                        "[{name: local, executor: local, knobs: {ctx_size: 1024}}]", "llamacpp"),
                               get_engine, [("n0", [0])], None, 64 * GIB)
    [server] = memory.nodes[0].ranks
    assert server.kv == 1024 * 3 * 576 * 2          # K only: llama.cpp's MLA cache keeps no V
    assert memory.kv_capacity_tokens == 1024


def test_a_pipeline_stage_of_a_moe_model_is_counted_with_its_largest_layers():
    shape = spec_of(TINY_DEEPSEEK).shape()
    weights = ModelWeights(shape, "bfloat16")
    stage = share_weight_bytes(weights, RankShare(node="n", label="rank1", layers=2))
    assert stage == 2 * shape.layer_parameters(True) * 2                    # the two MoE layers, not one dense
    whole = share_weight_bytes(weights, RankShare(node="n", label="rank0", layers=3, embedding=True, head=True))
    assert whole == shape.parameters() * 2


def test_vllm_refuses_an_mla_latent_its_cpu_kernels_do_not_take_at_plan_time_and_not_a_full_deepseek_head(
        monkeypatch):
    from servebench.campaign.loading import SpecError, parse_campaign
    from servebench.planning import feasibility

    # the cut model needs 13.6 GiB: this host's free memory is the test's, not whatever the machine has now
    monkeypatch.setattr(feasibility, "this_host_available_bytes", lambda: 64 * 1024 ** 3)

    text = ("name: x\nprovider: {kind: local, nodes: [{name: n, cpus: '0'}]}\n"
            "engine: {kind: vllm}\nmodel: {generate: deepseek-r1, layers: 2, experts: 16%s}\nmodes: [{name: tp1}]\n"
            "load: {clients: [1], input_len: 8, output_len: 8, requests: 2, client: {cpus: '1'}}\n")
    with pytest.raises(SpecError, match=r"<string>:4: model: kv_lora_rank 256 \+ qk_rope_head_dim 64: vLLM's "
                       "CPU_MLA backend takes only 512 \\+ 64"):
        parse_campaign(text % ", kv_lora_rank: 256", host_cpus={0, 1})
    parse_campaign(text % "", host_cpus={0, 1})   # hidden/heads = 56 is no head of an MLA model
