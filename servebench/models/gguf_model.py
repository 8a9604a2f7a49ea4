"""A random-weight model of any generated shape as one GGUF file, for llama.cpp (written offline with
numpy and the PyPI `gguf` package; nothing downloaded).

Layout: llama.cpp's own architecture names and keys (`llama`, `qwen2`: `qwen2.*` keys and the
`blk.N.attn_{q,k,v}.bias` tensors; `qwen3moe` for qwen3_moe, `deepseek2` for deepseek_v3, see below),
`attention.key_length`/`value_length` when head_dim is not hidden / heads, no `output.weight` when the
embeddings are tied (llama.cpp then reuses `token_embd.weight`), `rope.freq_base` = rope_theta, Llama 3's
RoPE scaling as the `rope_freqs.weight` factors the converter writes (yarn and linear as `rope.scaling.*`
keys), context length = max_position.

Mixture of experts as llama.cpp's converter writes it: each layer's experts stacked into one 3-D tensor
per projection (`ffn_{gate,up,down}_exps`, numpy [experts, out, in]), the router `ffn_gate_inp` in F32 (the
converter keeps it so). DEEPSEEK2 (docs/design/models-and-modes-on-cpu.md §6): MLA with `kv_b_proj` split
into the per-head `attn_k_b` (numpy [heads, kv_lora_rank, qk_nope], transposed as the converter does) and
`attn_v_b` ([heads, v_head, kv_lora_rank]), both `attention.key_length_mla`/`value_length_mla` keys (without
them llama.cpp runs the legacy non-MLA path), `head_count_kv` 1 and key/value lengths of the latent (576
and 512 for DeepSeek-V3: its KV cache keeps only the latent and the RoPE key), the leading dense blocks,
the shared experts (`ffn_*_shexp`), the routing bias `exp_probs_b.bias` (F32) and
`expert_gating_func` = 2 (sigmoid: absent, llama.cpp would route by softmax), the expert groups, the
weights' scale and renormalization, and YaRN's `rope.scaling.yarn_log_multiplier` (0.1 x mscale_all_dim,
as the converter writes it).

Types: every matrix, the token embedding and the output head included, is stored as the spec's
`gguf_type()` (F32, F16, Q8_0 or Q4_0), as `convert_hf_to_gguf.py --outtype` does; norms, biases and
the RoPE factors stay F32, as llama.cpp's converters keep them. A matrix whose rows are not a whole number
of 32-weight blocks falls back to F16 (what llama-quantize does with a tensor it cannot block).
`llama-quantize` would put Q4_0's output head in Q6_K; that is a k-quant gguf-py cannot write, so the
head is Q4_0 too: the file is a little smaller and faster than a published Q4_0, never larger.

Why gguf-py's numpy quantizers (`gguf.quants.quantize`) and not `llama-quantize`: they need no engine
build (the model stage runs before and apart from the build, on any host of any architecture), they
write the same block formats bit for bit (ggml's reference quantizers, `quants.py`), and they are fast
enough: measured on a loaded 2-core host, per billion weights, random numbers included, single-threaded
(`python -m servebench.models.gguf_model`): F32 10-18 s (the random numbers alone), F16 15-21 s, Q8_0
23-27 s, Q4_0 22 s. An 8B shape is three to four minutes, once: the file is cached by spec and by this
module's source.

Streaming: an 8B shape is 8e9 weights. Only the tensor infos are registered with `GGUFWriter` (its
`add_tensor` would keep every array until written); each tensor's data is then generated, quantized
and written in blocks of rows (at most `BLOCK_WEIGHTS` weights in memory at once). Each tensor's
values come from a generator seeded by (seed, tensor name), so the same spec gives the same bytes,
whatever the order or the block size.

The vocabulary is SentencePiece-style ('llama' tokenizer) for every architecture: <unk>, <s>, </s>,
the 256 byte tokens <0x00>..<0xFF> (byte fallback, so any text tokenizes), '▁' (a space) and short
words '▁w1', '▁w2', ... up to `vocab_size`. The load generator sends token-id prompts, which llama.cpp
uses verbatim (no BOS), so a prompt of N ids is N tokens: counts are exact without a tokenizer.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from servebench.config.campaign import GeneratedModelSpec

if TYPE_CHECKING:
    from gguf import GGMLQuantizationType, GGUFWriter

SPECIALS = ["<unk>", "<s>", "</s>"]
BYTE_TOKENS = [f"<0x{value:02X}>" for value in range(256)]
WEIGHT_SCALE = 0.02
BLOCK_WEIGHTS = 1 << 24  # weights generated, quantized and written at once (64 MiB as float32)
ROPE_FREQS = "rope_freqs.weight"  # RoPE factors: a tensor in the file, not a parameter of the model
# llama.cpp's architecture name of each generated architecture
GGUF_ARCHITECTURES = {"llama": "llama", "qwen2": "qwen2", "qwen3_moe": "qwen3moe", "deepseek_v3": "deepseek2"}
# DEEPSEEK2 models llama.cpp reads without attention.q_lora_rank (its "lite" ones: by layer count)
DEEPSEEK2_LITE_LAYERS = (26, 27, 48)

Fill = Literal["random", "ones", "rope_freqs"]


@dataclass(frozen=True)
class PlannedTensor:
    """One tensor of the file: its llama.cpp name, numpy shape ((out, in) like a torch Linear: ggml's
    reversed), stored type and how its values are made."""

    name: str
    shape: tuple[int, ...]
    qtype: GGMLQuantizationType
    fill: Fill

    @property
    def columns(self) -> int:
        return self.shape[-1]

    @property
    def rows(self) -> int:
        return math.prod(self.shape[:-1])

    def stored_shape(self) -> tuple[int, ...]:
        """The shape `GGUFWriter.add_tensor_info` takes: bytes per row for a block-quantized type."""
        from gguf import GGMLQuantizationType
        from gguf.quants import quant_shape_to_byte_shape

        if self.qtype in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            return self.shape
        return quant_shape_to_byte_shape(self.shape, self.qtype)

    def stored_dtype(self) -> np.dtype:
        """float32 or float16 values, or the bytes of a block-quantized type."""
        from gguf import GGMLQuantizationType

        floats = {GGMLQuantizationType.F32: np.float32, GGMLQuantizationType.F16: np.float16}
        return np.dtype(floats.get(self.qtype, np.uint8))

    def nbytes(self) -> int:
        return math.prod(self.stored_shape()) * self.stored_dtype().itemsize


def gguf_quant_type(name: str) -> GGMLQuantizationType:
    """A spec's `gguf_type()` word as ggml's type."""
    from gguf import GGMLQuantizationType

    return {"f32": GGMLQuantizationType.F32, "f16": GGMLQuantizationType.F16,
            "q8_0": GGMLQuantizationType.Q8_0, "q4_0": GGMLQuantizationType.Q4_0}[name]


def vocabulary(size: int) -> tuple[list[str], list[int], list[float]]:
    """Tokens, their types (gguf.TokenType values) and scores for a vocabulary of `size` entries."""
    from gguf import TokenType

    words = ["\u2581"] + [f"\u2581w{index}" for index in range(1, size - len(SPECIALS) - len(BYTE_TOKENS))]
    tokens = SPECIALS + BYTE_TOKENS + words
    types = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL] + [TokenType.BYTE] * 256 \
        + [TokenType.NORMAL] * len(words)
    scores = [0.0] * (len(SPECIALS) + len(BYTE_TOKENS)) + [-float(index) for index in range(len(words))]
    return tokens, [int(t) for t in types], scores


def check_spec(spec: GeneratedModelSpec) -> None:
    """Refuse what llama.cpp would not read as the shape says."""
    if spec.architecture == "deepseek_v3" and not spec.q_lora_rank and spec.layers not in DEEPSEEK2_LITE_LAYERS:
        raise ValueError(f"q_lora_rank null: a DEEPSEEK2 GGUF without attention.q_lora_rank is read only at "
                         f"{', '.join(map(str, DEEPSEEK2_LITE_LAYERS))} layers (the 'lite' models)")


def planned_tensors(spec: GeneratedModelSpec) -> list[PlannedTensor]:
    """Every tensor of the file in order (the converter's: embedding, head, then each layer)."""
    from gguf import GGMLQuantizationType

    matrix_type = gguf_quant_type(spec.gguf_type())
    f32 = GGMLQuantizationType.F32
    shape = spec.shape()
    hidden, head, q_width, kv_width = shape.hidden, shape.head_size, shape.heads * shape.head_size, \
        shape.kv_heads * shape.head_size

    def matrix(name: str, rows: int, columns: int, *outer: int) -> PlannedTensor:
        """A matrix (out, in); with `outer`, a stack of them ([experts, out, in], [heads, ...])."""
        return PlannedTensor(name, (*outer, rows, columns), _blockable(matrix_type, columns), "random")

    def small(name: str, *dims: int, fill: Fill = "ones") -> PlannedTensor:
        return PlannedTensor(name, dims, f32, fill)

    tensors = [matrix("token_embd.weight", shape.vocab_size, hidden),
               PlannedTensor("output_norm.weight", (hidden,), f32, "ones")]
    if not shape.tie_embeddings:
        tensors.append(matrix("output.weight", shape.vocab_size, hidden))
    if _rope_type(spec) == "llama3":
        tensors.append(PlannedTensor(ROPE_FREQS, (head // 2,), f32, "rope_freqs"))
    for layer in range(shape.layers):
        prefix = f"blk.{layer}."
        tensors += [small(prefix + "attn_norm.weight", hidden), small(prefix + "ffn_norm.weight", hidden)]
        if shape.is_mla:
            tensors += _latent_attention(prefix, shape, matrix, small)
        else:
            tensors += [matrix(prefix + "attn_q.weight", q_width, hidden),
                        matrix(prefix + "attn_k.weight", kv_width, hidden),
                        matrix(prefix + "attn_v.weight", kv_width, hidden)]
            if shape.attention_bias:
                tensors += [small(prefix + f"attn_{part}.bias", width, fill="random")
                            for part, width in (("q", q_width), ("k", kv_width), ("v", kv_width))]
            if spec.architecture == "qwen3_moe":
                tensors += [small(prefix + "attn_q_norm.weight", head), small(prefix + "attn_k_norm.weight", head)]
            tensors.append(matrix(prefix + "attn_output.weight", hidden, q_width))
        if shape.is_moe_layer(layer):
            tensors += _experts(prefix, shape, matrix, small)
        else:
            tensors += [matrix(prefix + "ffn_gate.weight", shape.intermediate, hidden),
                        matrix(prefix + "ffn_up.weight", shape.intermediate, hidden),
                        matrix(prefix + "ffn_down.weight", hidden, shape.intermediate)]
    return tensors


def _latent_attention(prefix: str, shape, matrix, small) -> list[PlannedTensor]:
    """DEEPSEEK2's MLA tensors (llama.cpp's deepseek2.cpp): q_a/q_a_norm/q_b (or attn_q), kv_a_mqa, its norm,
    the per-head k_b and v_b split of kv_b_proj, attn_output."""
    heads, hidden, rank = shape.heads, shape.hidden, shape.kv_lora_rank
    rope, nope, v_head = shape.qk_rope_head_dim, shape.qk_nope_head_dim, shape.v_head_dim
    if shape.q_lora_rank:
        tensors = [matrix(prefix + "attn_q_a.weight", shape.q_lora_rank, hidden),
                   small(prefix + "attn_q_a_norm.weight", shape.q_lora_rank),
                   matrix(prefix + "attn_q_b.weight", heads * (nope + rope), shape.q_lora_rank)]
    else:
        tensors = [matrix(prefix + "attn_q.weight", heads * (nope + rope), hidden)]
    return tensors + [matrix(prefix + "attn_kv_a_mqa.weight", rank + rope, hidden),
                      small(prefix + "attn_kv_a_norm.weight", rank),
                      matrix(prefix + "attn_k_b.weight", rank, nope, heads),
                      matrix(prefix + "attn_v_b.weight", v_head, rank, heads),
                      matrix(prefix + "attn_output.weight", hidden, heads * v_head)]


def _experts(prefix: str, shape, matrix, small) -> list[PlannedTensor]:
    """A MoE layer: the router (F32), DEEPSEEK2's routing bias, the stacked experts, the shared experts."""
    hidden, inner, experts = shape.hidden, shape.expert_intermediate, shape.experts
    tensors = [small(prefix + "ffn_gate_inp.weight", experts, hidden, fill="random")]
    if shape.architecture == "deepseek_v3":
        tensors.append(small(prefix + "exp_probs_b.bias", experts, fill="random"))
    tensors += [matrix(prefix + "ffn_gate_exps.weight", inner, hidden, experts),
                matrix(prefix + "ffn_up_exps.weight", inner, hidden, experts),
                matrix(prefix + "ffn_down_exps.weight", hidden, inner, experts)]
    if shape.shared_experts:
        shared = inner * shape.shared_experts
        tensors += [matrix(prefix + "ffn_gate_shexp.weight", shared, hidden),
                    matrix(prefix + "ffn_up_shexp.weight", shared, hidden),
                    matrix(prefix + "ffn_down_shexp.weight", hidden, shared)]
    return tensors


def _blockable(qtype: GGMLQuantizationType, columns: int) -> GGMLQuantizationType:
    """`qtype`, or F16 when a row is not a whole number of the type's blocks."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    block_size, _ = GGML_QUANT_SIZES[qtype]
    return qtype if columns % block_size == 0 else GGMLQuantizationType.F16


def _rope_type(spec: GeneratedModelSpec) -> str | None:
    scaling = spec.rope_scaling or {}
    return scaling.get("rope_type") or scaling.get("type")


def write_gguf(spec: GeneratedModelSpec, path: Path) -> Path:
    """Write the model to `path` (a .gguf file), one block of rows at a time; return it."""
    import gguf

    check_spec(spec)
    tensors = planned_tensors(spec)
    writer = gguf.GGUFWriter(str(path), GGUF_ARCHITECTURES[spec.architecture])
    _add_metadata(writer, spec)
    for tensor in tensors:
        writer.add_tensor_info(tensor.name, tensor.stored_shape(), tensor.stored_dtype(), tensor.nbytes(),
                               raw_dtype=tensor.qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    assert writer.fout is not None
    out = writer.fout[0]
    for tensor in tensors:
        writer.write_padding(out, out.tell())  # each tensor's data starts aligned, as write_tensor_data does
        for block in stored_blocks(spec, tensor):
            block.tofile(out)
        writer.write_padding(out, tensor.nbytes())
    writer.close()
    return path


def _add_metadata(writer: GGUFWriter, spec: GeneratedModelSpec) -> None:
    import gguf

    shape = spec.shape()
    writer.add_name(f"servebench {spec.generate} random weights seed {spec.seed}")
    writer.add_context_length(shape.max_position)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(shape.layers)
    writer.add_feed_forward_length(shape.intermediate)
    writer.add_head_count(shape.heads)
    if shape.is_mla:
        _add_latent_attention(writer, spec)
    else:
        writer.add_head_count_kv(shape.kv_heads)
        if shape.head_size * shape.heads != shape.hidden:
            writer.add_key_length(shape.head_size)
            writer.add_value_length(shape.head_size)
        writer.add_rope_dimension_count(shape.head_size)
    if shape.is_moe:
        _add_experts(writer, spec)
    writer.add_rope_freq_base(shape.rope_theta)
    _add_rope_scaling(writer, spec)
    writer.add_layer_norm_rms_eps(shape.rms_norm_eps)
    writer.add_vocab_size(shape.vocab_size)
    writer.add_file_type(FILE_TYPES[spec.gguf_type()])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokens, types, scores = vocabulary(shape.vocab_size)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_add_space_prefix(False)


def _add_latent_attention(writer: GGUFWriter, spec: GeneratedModelSpec) -> None:
    """DEEPSEEK2's MLA keys as the converter writes them: one KV head of the latent (key: latent + RoPE key,
    value: latent) and both `*_mla` lengths, which switch llama.cpp to its MLA path."""
    shape = spec.shape()
    rank, rope = shape.kv_lora_rank or 0, shape.qk_rope_head_dim or 0
    writer.add_head_count_kv(1)
    writer.add_key_length(rank + rope)
    writer.add_value_length(rank)
    writer.add_key_length_mla((shape.qk_nope_head_dim or 0) + rope)
    writer.add_value_length_mla(shape.v_head_dim or 0)
    writer.add_rope_dimension_count(rope)
    if shape.q_lora_rank:
        writer.add_q_lora_rank(shape.q_lora_rank)
    writer.add_kv_lora_rank(rank)


def _add_experts(writer: GGUFWriter, spec: GeneratedModelSpec) -> None:
    """The experts' keys; DEEPSEEK2's dense lead, shared experts, groups, weights' scale and norm and its
    sigmoid gating (llama.cpp's default is softmax)."""
    import gguf

    shape = spec.shape()
    writer.add_expert_count(shape.experts)
    writer.add_expert_used_count(shape.experts_per_token)
    writer.add_expert_feed_forward_length(shape.expert_intermediate)
    if shape.architecture != "deepseek_v3":
        return
    writer.add_leading_dense_block_count(shape.dense_layers)
    writer.add_expert_shared_count(shape.shared_experts)
    writer.add_expert_weights_scale(shape.routed_scaling_factor)
    writer.add_expert_weights_norm(shape.norm_topk_prob)
    writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    if shape.expert_groups > 1:
        writer.add_expert_group_count(shape.expert_groups)
        writer.add_expert_group_used_count(shape.expert_groups_used)


# general.file_type: what llama.cpp reports as the model's type (the matrices' type; 1-d tensors stay F32)
FILE_TYPES = {"f32": 0, "f16": 1, "q8_0": 7, "q4_0": 2}  # gguf.LlamaFileType ALL_F32, MOSTLY_F16, ...


def _add_rope_scaling(writer: GGUFWriter, spec: GeneratedModelSpec) -> None:
    """yarn and linear as keys; llama3 is the `rope_freqs.weight` tensor instead (no key)."""
    from gguf import RopeScalingType

    scaling, kind = spec.rope_scaling or {}, _rope_type(spec)
    if kind in ("yarn", "linear"):
        writer.add_rope_scaling_type(RopeScalingType(kind))
        writer.add_rope_scaling_factor(float(scaling["factor"]))
    if kind == "yarn" and "original_max_position_embeddings" in scaling:
        writer.add_rope_scaling_orig_ctx_len(int(scaling["original_max_position_embeddings"]))
    if kind == "yarn" and spec.architecture == "deepseek_v3" and "mscale_all_dim" in scaling:
        # the converter's 0.1 x mscale_all_dim, which llama.cpp's deepseek2 divides by 0.1 again
        writer.add_rope_scaling_yarn_log_mul(0.1 * float(scaling["mscale_all_dim"]))


def stored_blocks(spec: GeneratedModelSpec, tensor: PlannedTensor) -> Iterator[np.ndarray]:
    """The tensor's stored bytes in blocks of whole rows, from a generator seeded by (seed, name)."""
    from gguf.quants import quantize

    if tensor.fill == "ones":
        yield np.ones(tensor.shape, np.float32)
        return
    if tensor.fill == "rope_freqs":
        yield llama3_rope_factors(spec)
        return
    rng = np.random.default_rng(tensor_seed(spec.seed, tensor.name))
    rows_per_block = max(1, BLOCK_WEIGHTS // tensor.columns)
    for start in range(0, tensor.rows, rows_per_block):
        rows = min(rows_per_block, tensor.rows - start)
        values = rng.standard_normal((rows, tensor.columns), dtype=np.float32)
        values *= WEIGHT_SCALE
        yield quantize(values if len(tensor.shape) > 1 else values[0], tensor.qtype)


def tensor_seed(seed: int, name: str) -> int:
    """A 128-bit seed of its own for each tensor: its values do not depend on which tensors precede it."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{name}".encode()).digest()[:16], "little")


def llama3_rope_factors(spec: GeneratedModelSpec) -> np.ndarray:
    """Llama 3's per-frequency RoPE divisors, as llama.cpp's converter computes them for `rope_freqs`."""
    scaling, shape = spec.rope_scaling or {}, spec.shape()
    dim = shape.head_size
    freqs = 1.0 / (shape.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    factor = float(scaling.get("factor", 8.0))
    low, high = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
    old_context = float(scaling.get("original_max_position_embeddings", 8192))
    wavelengths = 2 * math.pi / freqs
    smooth = (old_context / wavelengths - low) / (high - low)
    factors = np.where(wavelengths < old_context / high, 1.0,
                       np.where(wavelengths > old_context / low, factor, 1 / ((1 - smooth) / factor + smooth)))
    return factors.astype(np.float32)


def gguf_vocab_size(path: Path) -> int:
    """The number of tokens in a GGUF file's vocabulary (what token-id prompts draw from)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    field = reader.fields.get("tokenizer.ggml.tokens")
    if field is None:
        raise ValueError(f"{path}: no tokenizer.ggml.tokens in this GGUF file")
    return len(field.data)


def measure_quantizers(weights: int = 1 << 24) -> dict[str, float]:
    """Seconds per billion weights to generate and store a matrix in each type (the docstring's numbers)."""
    from gguf.quants import quantize

    rows = weights // 4096
    seconds = {}
    for name in ("f32", "f16", "q8_0", "q4_0"):
        started = time.perf_counter()
        rng = np.random.default_rng(0)
        values = rng.standard_normal((rows, 4096), dtype=np.float32)
        values *= WEIGHT_SCALE
        quantize(values, gguf_quant_type(name))
        seconds[name] = round((time.perf_counter() - started) * 1e9 / weights, 1)
    return seconds


if __name__ == "__main__":
    print("seconds per billion weights:", measure_quantizers())
