"""Quantized Hugging Face models for vLLM's CPU kernels (servebench/models/hf_quantized.py): the packing,
the quantizers, every tensor's name, dtype and shape in each format, the values read back from the files
within half a quantization step of the unquantized model, and the generated model's cache key."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from servebench.config.campaign import GeneratedModelSpec, sha256_json
from servebench.models import hf_model, hf_quantized
from servebench.models.artifact import GENERATED_HF
from servebench.models.hf_quantized import AWQ_ORDER, FORMATS, SourceTensor, source_tensors

# shapes whose every linear input is a multiple of the int4 formats' group of 128
SMALL = {"layers": 2, "hidden": 128, "heads": 4, "kv_heads": 2, "intermediate": 256, "vocab_size": 512}
LINEAR_SUFFIXES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def spec_of(preset: str, **overrides) -> GeneratedModelSpec:
    return GeneratedModelSpec.model_validate({"generate": preset, **SMALL, **overrides})


@pytest.fixture(scope="module")
def bf16_model(tmp_path_factory) -> Path:
    """A Qwen2-shaped model (q/k/v biases) in bf16, as hf_model writes it."""
    path = tmp_path_factory.mktemp("source") / "bf16"
    hf_model.write_hf_model(spec_of("qwen2-1.5b"), path)
    return path


def tensors_by_name(directory: Path) -> dict[str, SourceTensor]:
    return {tensor.name: tensor for tensor in source_tensors(directory)}


def raw(tensor: SourceTensor) -> np.ndarray:
    """A tensor's values in its own dtype, as a loader reads them."""
    dtypes = {"I8": "i1", "I32": "<i4", "I64": "<i8", "BF16": "<u2", "F32": "<f4"}
    return np.fromfile(tensor.path, dtype=dtypes[tensor.dtype], count=tensor.values,
                       offset=tensor.offset).reshape(tensor.shape)


# --- packing and quantizers -----------------------------------------------------------------------------

def test_nibbles_pack_low_first_and_awq_in_its_own_order():
    columns = np.arange(8, dtype=np.uint8)[None, :]
    assert hf_quantized.pack_nibbles(columns, axis=1).view(np.uint32).tolist() == [[0x76543210]]
    assert hf_quantized.pack_nibbles(columns, axis=1, order=AWQ_ORDER).view(np.uint32).tolist() == [[0x75316420]]
    rows = np.array([[15], [0], [0], [0], [0], [0], [0], [8]], dtype=np.uint8)  # along axis 0: the high bit set
    packed = hf_quantized.pack_nibbles(rows, axis=0)
    assert packed.dtype == np.int32 and packed.shape == (1, 1) and packed.view(np.uint32)[0, 0] == 0x8000000F


@pytest.mark.parametrize("axis, order", [(0, tuple(range(8))), (1, tuple(range(8))), (1, AWQ_ORDER)])
def test_nibbles_unpack_to_what_was_packed(axis, order):
    values = np.random.default_rng(1).integers(0, 16, size=(16, 24), dtype=np.uint8)
    packed = hf_quantized.pack_nibbles(values, axis=axis, order=order)
    assert packed.shape[axis] == values.shape[axis] // 8
    assert np.array_equal(hf_quantized.unpack_nibbles(packed, axis=axis, order=order), values)


@pytest.mark.parametrize("bits, group, dtype", [(8, None, "BF16"), (4, 128, "BF16"), (4, 32, "F32")])
def test_symmetric_quantization_reconstructs_within_half_a_step(bits, group, dtype):
    weight = np.random.default_rng(2).standard_normal((64, 256), dtype=np.float32) * 0.02
    weight[3] = 0.0  # a row of zeros: the eps scale, all zeros, no division by zero
    quantized, scale = hf_quantized.quantize_symmetric(weight, bits, group, dtype)
    assert quantized.dtype == np.int8 and scale.shape == (64, 256 // (group or 256))
    assert quantized.min() >= -(2 ** (bits - 1)) and quantized.max() <= 2 ** (bits - 1) - 1
    assert np.array_equal(hf_quantized.as_dtype(scale, dtype), scale)  # what the file holds, exactly
    assert not quantized[3].any()
    step = np.repeat(scale, group or 256, axis=1)
    error = np.abs(hf_quantized.dequantize(quantized, scale, group) - weight)
    assert (error <= step / 2 * (1 + 1e-5)).all()  # float32 arithmetic at the exact half step
    assert error.max() > step.max() / 8  # a real rounding, not a copy


def test_asymmetric_quantization_reconstructs_within_half_a_step_with_zero_points():
    weight = np.random.default_rng(3).standard_normal((32, 256), dtype=np.float32) * 0.02 + 0.01
    quantized, scale, zero = hf_quantized.quantize_asymmetric(weight, 4, 128, "BF16")
    assert quantized.dtype == np.uint8 and quantized.max() <= 15 and zero.shape == (32, 2) and zero.max() <= 15
    error = np.abs(hf_quantized.dequantize(quantized, scale, 128, zero) - weight)
    step = np.repeat(scale, 128, axis=1)
    assert (error <= step * (1 + 1e-5)).all()  # a group's extremes: the zero point's rounding on top
    assert (error <= step / 2 * (1 + 1e-5)).mean() > 0.99


# --- whole models ---------------------------------------------------------------------------------------

def expected_layout(fmt: str, out: int, inp: int) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Suffix -> (dtype, shape) of a quantized linear, as vLLM's loader for the format registers them."""
    groups = inp // 128
    layouts: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = {
        "w8a8": {"weight": ("I8", (out, inp)), "weight_scale": ("BF16", (out, 1))},
        "w4a16": {"weight_packed": ("I32", (out, inp // 8)), "weight_scale": ("BF16", (out, groups)),
                  "weight_shape": ("I64", (2,))},
        "gptq": {"qweight": ("I32", (inp // 8, out)), "qzeros": ("I32", (groups, out // 8)),
                 "scales": ("BF16", (groups, out)), "g_idx": ("I32", (inp,))},
        "awq": {"qweight": ("I32", (inp, out // 8)), "qzeros": ("I32", (groups, out // 8)),
                "scales": ("BF16", (groups, out))},
    }
    return layouts[fmt]


def dequantized(fmt: str, tensors: dict[str, SourceTensor], prefix: str) -> np.ndarray:
    """The [out, in] weight a quantized linear stands for, read back from its files' raw bytes."""
    def tensor(suffix: str) -> np.ndarray:
        values = raw(tensors[f"{prefix}.{suffix}"])
        return (values.astype(np.uint32) << 16).view(np.float32) if values.dtype == np.dtype("<u2") else values

    if fmt == "w8a8":
        return tensor("weight").astype(np.float32) * tensor("weight_scale")
    if fmt == "w4a16":
        out, inp = tensor("weight_shape").tolist()
        signed = hf_quantized.unpack_nibbles(tensor("weight_packed"), axis=1).astype(np.int8) - 8
        return hf_quantized.dequantize(signed, tensor("weight_scale"), 128)
    if fmt == "gptq":
        assert (tensor("qzeros").view(np.uint32) == 0x77777777).all()  # zero - 1, AutoGPTQ's v1 layout
        signed = hf_quantized.unpack_nibbles(tensor("qweight"), axis=0).T.astype(np.int8) - 8
        return hf_quantized.dequantize(signed, np.ascontiguousarray(tensor("scales").T), 128)
    unsigned = hf_quantized.unpack_nibbles(tensor("qweight"), axis=1, order=AWQ_ORDER).T
    zeros = hf_quantized.unpack_nibbles(tensor("qzeros"), axis=1, order=AWQ_ORDER).T
    return hf_quantized.dequantize(unsigned, np.ascontiguousarray(tensor("scales").T), 128, zeros)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_every_linear_is_quantized_as_the_loader_expects_and_reads_back_within_half_a_step(tmp_path, bf16_model,
                                                                                           fmt):
    hf_quantized.write_quantized_model(bf16_model, tmp_path / fmt, fmt)
    source, written = tensors_by_name(bf16_model), tensors_by_name(tmp_path / fmt)
    linears = [name for name in source if name.endswith(tuple(f"{s}.weight" for s in LINEAR_SUFFIXES))]
    assert len(linears) == 2 * 7
    expected_names = set(source) - set(linears)
    for name in linears:
        prefix = name[: -len(".weight")]
        out, inp = source[name].shape
        for suffix, (dtype, shape) in expected_layout(fmt, out, inp).items():
            assert (written[f"{prefix}.{suffix}"].dtype, written[f"{prefix}.{suffix}"].shape) == (dtype, shape)
            expected_names.add(f"{prefix}.{suffix}")
        weight = source[name].float32()
        error = np.abs(dequantized(fmt, written, prefix) - weight)
        step = np.abs(weight).max(axis=1, keepdims=True) / (127.5 if fmt == "w8a8" else 7.5)
        assert error.max() > 0 and (error <= step * (1.02 if fmt == "awq" else 0.51)).all(), name
    assert set(written) == expected_names
    for name in set(source) - set(linears):  # embeddings, norms, biases, lm_head: the same bytes
        assert (source[name].dtype, source[name].shape) == (written[name].dtype, written[name].shape)
        assert raw(source[name]).tobytes() == raw(written[name]).tobytes(), name


def test_the_config_says_the_format_as_its_tool_writes_it_and_the_tokenizer_comes_along(tmp_path, bf16_model):
    for fmt in FORMATS:
        hf_quantized.write_quantized_model(bf16_model, tmp_path / fmt, fmt)
    config = {fmt: json.loads((tmp_path / fmt / "config.json").read_text())["quantization_config"]
              for fmt in FORMATS}
    w8a8 = config["w8a8"]
    assert (w8a8["quant_method"], w8a8["format"], w8a8["ignore"]) == (
        "compressed-tensors", "int-quantized", ["lm_head"])
    group = w8a8["config_groups"]["group_0"]
    assert {key: group["weights"][key] for key in ("num_bits", "type", "symmetric", "strategy")} == {
        "num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}
    assert {key: group["input_activations"][key] for key in ("num_bits", "dynamic", "strategy")} == {
        "num_bits": 8, "dynamic": True, "strategy": "token"}
    w4 = config["w4a16"]["config_groups"]["group_0"]
    assert config["w4a16"]["format"] == "pack-quantized" and w4["input_activations"] is None
    assert (w4["weights"]["num_bits"], w4["weights"]["strategy"], w4["weights"]["group_size"]) == (4, "group", 128)
    assert {k: config["gptq"][k] for k in ("quant_method", "bits", "group_size", "sym", "desc_act")} == {
        "quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}
    assert {k: config["awq"][k] for k in ("quant_method", "bits", "group_size", "zero_point", "version")} == {
        "quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
    assert config["awq"]["modules_to_not_convert"] is None and config["w4a16"]["ignore"] == ["lm_head"]
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        assert (tmp_path / "w8a8" / name).read_bytes() == (bf16_model / name).read_bytes()
    marker = json.loads((tmp_path / "w8a8" / hf_model.MARKER_NAME).read_text())
    assert marker["quantization"] == "w8a8" and marker["quantized_layers"] == 14
    assert marker["source_marker"]["spec"]["generate"] == "qwen2-1.5b"


def test_the_same_model_gives_the_same_bytes_and_shards_keep_a_layer_together(tmp_path, bf16_model):
    hf_quantized.write_quantized_model(bf16_model, tmp_path / "a", "w4a16")
    hf_quantized.write_quantized_model(bf16_model, tmp_path / "b", "w4a16", max_shard_bytes=100_000)
    hf_quantized.write_quantized_model(bf16_model, tmp_path / "c", "w4a16", max_shard_bytes=100_000)
    assert len(list((tmp_path / "b").glob("*.safetensors"))) > 2
    assert [p.read_bytes() for p in sorted((tmp_path / "b").glob("*"))] == [
        p.read_bytes() for p in sorted((tmp_path / "c").glob("*"))]
    whole, sharded = tensors_by_name(tmp_path / "a"), tensors_by_name(tmp_path / "b")
    assert set(whole) == set(sharded)
    assert all(raw(whole[name]).tobytes() == raw(sharded[name]).tobytes() for name in whole)
    index = json.loads((tmp_path / "b" / "model.safetensors.index.json").read_text())["weight_map"]
    for name in index:
        if name.endswith(".weight_packed"):
            prefix = name[: -len(".weight_packed")]
            assert index[f"{prefix}.weight_scale"] == index[f"{prefix}.weight_shape"] == index[name]


def test_float32_models_keep_float32_scales(tmp_path):
    hf_model.write_hf_model(spec_of("tiny-llama", dtype="float32"), tmp_path / "fp32")
    hf_quantized.write_quantized_model(tmp_path / "fp32", tmp_path / "w8a8", "w8a8")
    written = tensors_by_name(tmp_path / "w8a8")
    assert written["model.layers.0.self_attn.q_proj.weight_scale"].dtype == "F32"
    assert written["model.embed_tokens.weight"].dtype == "F32"


def test_moe_experts_are_quantized_and_the_router_is_not(tmp_path):
    spec = spec_of("qwen3-30b-a3b", layers=1, experts=4, experts_per_token=2, moe_intermediate=128, head_dim=32)
    hf_model.write_hf_model(spec, tmp_path / "bf16")
    hf_quantized.write_quantized_model(tmp_path / "bf16", tmp_path / "w4a16", "w4a16")
    written = tensors_by_name(tmp_path / "w4a16")
    assert written["model.layers.0.mlp.gate.weight"].dtype == "BF16"
    assert {f"model.layers.0.mlp.experts.{e}.down_proj.weight_packed" for e in range(4)} <= set(written)
    config = json.loads((tmp_path / "w4a16" / "config.json").read_text())["quantization_config"]
    assert config["ignore"] == ["lm_head", "re:.*mlp.gate$"]
    hf_quantized.write_quantized_model(tmp_path / "bf16", tmp_path / "awq", "awq")
    config = json.loads((tmp_path / "awq" / "config.json").read_text())["quantization_config"]
    assert config["modules_to_not_convert"] == ["model.layers.0.mlp.gate"]


def test_refusals_name_what_is_wrong(tmp_path, bf16_model):
    with pytest.raises(ValueError, match="not a Hugging Face quantized format"):
        hf_quantized.write_quantized_model(bf16_model, tmp_path / "x", "q4_0")
    hf_model.write_hf_model(spec_of("tiny-llama", hidden=96, heads=3, kv_heads=1), tmp_path / "odd")
    with pytest.raises(ValueError, match=r"q_proj.weight: input size 96 is not a multiple of w4a16's group size 128"):
        hf_quantized.write_quantized_model(tmp_path / "odd", tmp_path / "y", "w4a16")
    hf_quantized.write_quantized_model(bf16_model, tmp_path / "w8a8", "w8a8")
    with pytest.raises(ValueError, match="quantized already"):
        hf_quantized.write_quantized_model(tmp_path / "w8a8", tmp_path / "z", "w4a16")


# --- the generated model's cache ------------------------------------------------------------------------

def test_a_quantized_format_is_a_cached_model_of_its_own_the_plain_key_unchanged(tmp_path):
    plain = spec_of("tiny-llama")
    w8a8 = plain.model_copy(update={"quantization": "w8a8"})  # campaign.py's type has GGUF's values only so far
    gguf = plain.model_copy(update={"quantization": "q8_0"})
    fields = plain.model_dump(mode="json", exclude={"quantization"})
    assert GENERATED_HF.cache_key(plain) == "generated-hf-" + sha256_json(
        {"spec": fields, "code": GENERATED_HF.code_digest()})[:16]  # the key every cached model has
    assert GENERATED_HF.cache_key(gguf) == GENERATED_HF.cache_key(plain)
    keys = {GENERATED_HF.cache_key(plain.model_copy(update={"quantization": fmt})) for fmt in FORMATS}
    assert len(keys) == 4 and GENERATED_HF.cache_key(plain) not in keys
    path = GENERATED_HF.ensure(w8a8, "unused", tmp_path)
    assert path == GENERATED_HF.path(w8a8, tmp_path)
    source = GENERATED_HF.path(plain, tmp_path)
    assert (source / hf_model.MARKER_NAME).exists()  # the unquantized model, generated first, kept
    marker = json.loads((path / hf_model.MARKER_NAME).read_text())
    assert (marker["quantization"], marker["source"]) == ("w8a8", str(source))
    before = (path / "model.safetensors").stat().st_mtime_ns
    assert GENERATED_HF.ensure(w8a8, "unused", tmp_path) == path
    assert (path / "model.safetensors").stat().st_mtime_ns == before  # found, not written again
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == sorted([path.name, source.name])


# --- served by vLLM -------------------------------------------------------------------------------------


# --- the memory plan counts what the format stores --------------------------------------------------------

def written_bytes(directory: Path) -> int:
    return sum(tensor.values * hf_quantized.DTYPE_BYTES[tensor.dtype] for tensor in source_tensors(directory))


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_the_memory_plan_counts_a_quantized_model_at_the_bytes_its_checkpoint_holds(tmp_path, bf16_model, fmt):
    """The weights `servebench plan` counts for one rank holding the whole quantized model are the bytes its
    checkpoint's tensors take (the projections at the format's bits with their scales and zero points, the
    embedding, head, norms and biases in bf16), not the bf16 model's: found from the generated spec and
    from the directory's own config.json alike. GPTQ's `g_idx` (an int32 per input feature of every
    projection) is left out of the count: 4 bytes per output row, 2 % at this toy width, under
    0.1 % at a real one."""
    from servebench.engines.base import RankShare
    from servebench.planning.memory import ModelWeights, config_quantization, quantized_weights, share_weight_bytes

    hf_quantized.write_quantized_model(bf16_model, tmp_path / fmt, fmt)
    shape = spec_of("qwen2-1.5b").shape()
    whole = RankShare(node="n", label="rank0", layers=shape.layers, embedding=True, head=True)
    planned = share_weight_bytes(quantized_weights(shape, FORMATS[fmt], "bfloat16", "bfloat16"), whole)
    config = json.loads((tmp_path / fmt / "config.json").read_text())
    declared = config_quantization(config)
    assert declared is not None and (declared.bits, declared.group_size) == (FORMATS[fmt].bits, FORMATS[fmt].group_size)
    assert share_weight_bytes(quantized_weights(shape, declared, "bfloat16", "bfloat16"), whole) == planned
    written = written_bytes(tmp_path / fmt)
    tolerance = 0.03 if fmt == "gptq" else 0.01
    assert abs(planned - written) / written < tolerance, (fmt, planned, written)
    unquantized = share_weight_bytes(ModelWeights(shape, "bfloat16"), whole)
    assert planned < unquantized and abs(unquantized - written_bytes(bf16_model)) / unquantized < 0.01


def test_a_quantized_8b_rank_plans_its_int8_and_int4_layers_beside_a_bf16_vocabulary():
    """At Llama-3.1-8B's shape the plan's weights per rank follow the format: W8A8 about half of bf16's
    layers, the int4 formats about a quarter, the embedding and head (1.05 GB each) unchanged."""
    from servebench.engines.base import RankShare
    from servebench.models.shapes import preset
    from servebench.planning.memory import ModelWeights, quantized_weights, share_weight_bytes

    shape = preset("llama-3.1-8b")
    whole = RankShare(node="n", label="rank0", layers=shape.layers, embedding=True, head=True)
    vocab = 2 * shape.vocab_size * shape.hidden * 2
    bf16 = share_weight_bytes(ModelWeights(shape, "bfloat16"), whole) - vocab
    for fmt, ratio in (("w8a8", 0.5), ("w4a16", 0.25), ("gptq", 0.25), ("awq", 0.25)):
        layers = share_weight_bytes(quantized_weights(shape, FORMATS[fmt], "bfloat16", "bfloat16"), whole) - vocab
        assert ratio <= layers / bf16 < ratio * 1.06, (fmt, layers / bf16)
