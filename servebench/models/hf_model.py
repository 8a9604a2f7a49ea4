"""A Hugging Face model directory of any preset's shape with random weights, by servebench's own python.

numpy and `tokenizers` only: no torch, no transformers, so any shape (an 8B Llama is 16 GB in bf16) is
written without an engine venv and without ever holding the model in memory. What is written:

- `config.json` in the architecture's own format (`LlamaForCausalLM`, `Qwen2ForCausalLM`,
  `Qwen3MoeForCausalLM`, `DeepseekV3ForCausalLM`) and a `generation_config.json` with only the special ids
  (no sampling defaults that vLLM would apply);
- a mixture-of-experts layer as the real checkpoints have it, one tensor per expert
  (`mlp.experts.{e}.{gate,up,down}_proj.weight`, the router `mlp.gate.weight`; DeepSeek-V3's
  `mlp.shared_experts.*` and its float32 `mlp.gate.e_score_correction_bias`), and DeepSeek's multi-head
  latent attention by its own names (`q_a_proj`, `q_a_layernorm`, `q_b_proj`, `kv_a_proj_with_mqa`,
  `kv_a_layernorm`, `kv_b_proj`, `o_proj`): what vLLM's loader maps onto its fused parameters;
- the weights as safetensors, written by hand tensor by tensor in chunks: each tensor is drawn from a
  generator seeded by (seed, tensor name), normal * 0.02 (Hugging Face's init), norms ones, so the same
  spec gives the same bytes and a TP rank's shard is the slice of the same full tensor (the correctness
  gate compares TP=2 with TP=1: vLLM's dummy weights cannot pass it). One `model.safetensors` up to
  5 GB, else 5 GB shards with `model.safetensors.index.json`: the layout the real checkpoints ship, so
  vLLM loads it by the same path, and no file is larger than tools and file systems are used to;
- a byte-level BPE tokenizer of exactly `vocab_size` entries, made without training (see
  `byte_level_tokenizer`), with `tokenizer_config.json` and `special_tokens_map.json`;
- `servebench-model.json` last: the marker the cache looks for.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

import numpy as np

from servebench.config.campaign import GeneratedModelSpec

GENERATOR_NAME = "servebench-hf"
MARKER_NAME = "servebench-model.json"
INIT_STD = 0.02                  # transformers' initializer_range for Llama and Qwen2
MAX_SHARD_BYTES = 5 * 10**9      # transformers' default max_shard_size
CHUNK_VALUES = 1 << 22           # values drawn at a time: 16 MB of float32
SPECIAL_TOKENS = ("<s>", "</s>", "<unk>")  # ids 0, 1, 2: the load generator never draws ids below 3
BOS_ID, EOS_ID = 0, 1
WORD_LETTERS = "abcdefghijklmnopqrstuvwxyz"
# Qwen2's pre-tokenizer split (its tokenizer.json; transformers' Qwen2Tokenizer)
QWEN2_SPLIT_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
                       r"""\s*[\r\n]+|\s+(?!\S)|\s+""")

# the chat endpoint can be benchmarked too: role, content, one message a line
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

# the transformers release whose config layout config.json has (rope_scaling, torch_dtype): transformers 5
# reads it for its legacy handling, and without it warns that the tokenizer may be a Mistral one
CONFIG_LAYOUT_VERSION = "4.46.0"

SAFETENSORS_DTYPES = {"bfloat16": "BF16", "float32": "F32"}
DTYPE_BYTES = {"BF16": 2, "F32": 4}
# the transformers model classes and model types of each architecture
HF_ARCHITECTURES = {"llama": ("LlamaForCausalLM", "llama"), "qwen2": ("Qwen2ForCausalLM", "qwen2"),
                    "qwen3_moe": ("Qwen3MoeForCausalLM", "qwen3_moe"),
                    "deepseek_v3": ("DeepseekV3ForCausalLM", "deepseek_v3")}

# the MLA latent and RoPE key sizes the CPU MLA attention backends take (CPU_MLA, AMX_MLA: head size 576)
CPU_MLA_LATENT = (512, 64)

Fill = Literal["normal", "ones"]


@dataclass(frozen=True)
class TensorPlan:
    """One tensor of the checkpoint: its name as transformers and vLLM expect it, its shape, its values,
    and its own dtype when it is not the model's (DeepSeek's routing bias is float32 in any checkpoint)."""

    name: str
    shape: tuple[int, ...]
    fill: Fill = "normal"
    dtype: str | None = None

    @property
    def values(self) -> int:
        return math.prod(self.shape)

    def file_dtype(self, model_dtype: str) -> str:
        return self.dtype or model_dtype

    def nbytes(self, model_dtype: str) -> int:
        return self.values * DTYPE_BYTES[self.file_dtype(model_dtype)]


def check_spec(spec: GeneratedModelSpec) -> None:
    """Refuse what the architecture's own model class would not read as the shape says."""
    if spec.architecture == "qwen2" and not spec.attention_bias:
        raise ValueError("qwen2 always has q/k/v biases: attention_bias must be true")
    if spec.architecture == "qwen2" and spec.head_dim not in (None, spec.hidden // spec.heads):
        raise ValueError(f"qwen2: head_dim must be hidden / heads ({spec.hidden // spec.heads}): "
                         "Qwen2's model class ignores head_dim")
    if spec.architecture in ("qwen3_moe", "deepseek_v3") and spec.attention_bias:
        raise ValueError(f"{spec.architecture}: attention_bias must be false (its checkpoints have no biases)")
    latent = (spec.kv_lora_rank, spec.qk_rope_head_dim)
    if spec.kv_lora_rank is not None and latent != CPU_MLA_LATENT:
        # the CPU MLA decode kernel (mla_decode_kvcache) is compiled for 512 + 64 only; another size starts,
        # then fails its first decode step with "RuntimeError: Unsupported block size: 16"
        raise ValueError(f"kv_lora_rank ({spec.kv_lora_rank}) and qk_rope_head_dim ({spec.qk_rope_head_dim}): "
                         f"the CPU MLA kernels take only {CPU_MLA_LATENT[0]} and {CPU_MLA_LATENT[1]} (a cache "
                         f"head of {sum(CPU_MLA_LATENT)}); a GGUF model takes any")


def tensor_plans(spec: GeneratedModelSpec) -> list[TensorPlan]:
    """Every tensor, in the order written: the embedding, the layers, the final norm, the head."""
    shape = spec.shape()
    hidden, q_out, kv_out = shape.hidden, shape.heads * shape.head_size, shape.kv_heads * shape.head_size
    plans = [TensorPlan("model.embed_tokens.weight", (shape.vocab_size, hidden))]
    for layer in range(shape.layers):
        plans += _layer_plans(f"model.layers.{layer}", spec, q_out, kv_out, layer)
    plans.append(TensorPlan("model.norm.weight", (hidden,), "ones"))
    if not shape.tie_embeddings:
        plans.append(TensorPlan("lm_head.weight", (shape.vocab_size, hidden)))
    return plans


def _layer_plans(prefix: str, spec: GeneratedModelSpec, q_out: int, kv_out: int,
                 layer: int = 0) -> list[TensorPlan]:
    """A decoder layer. Biases: Qwen2's on q, k and v; Llama's `attention_bias` also puts one on o.
    Qwen3-MoE adds per-head q/k norms; DeepSeek-V3's attention is MLA. The MLP is dense, or the router and
    the experts in a MoE layer."""
    hidden = spec.hidden
    attn = f"{prefix}.self_attn"
    plans = [TensorPlan(f"{prefix}.input_layernorm.weight", (hidden,), "ones")]
    if spec.architecture == "deepseek_v3":
        plans += _latent_attention_plans(attn, spec)
    else:
        for proj, out in (("q_proj", q_out), ("k_proj", kv_out), ("v_proj", kv_out)):
            plans.append(TensorPlan(f"{attn}.{proj}.weight", (out, hidden)))
            if spec.attention_bias:
                plans.append(TensorPlan(f"{attn}.{proj}.bias", (out,)))
        plans.append(TensorPlan(f"{attn}.o_proj.weight", (hidden, q_out)))
        if spec.attention_bias and spec.architecture == "llama":
            plans.append(TensorPlan(f"{attn}.o_proj.bias", (hidden,)))
        if spec.architecture == "qwen3_moe":
            head = spec.shape().head_size
            plans += [TensorPlan(f"{attn}.q_norm.weight", (head,), "ones"),
                      TensorPlan(f"{attn}.k_norm.weight", (head,), "ones")]
    plans.append(TensorPlan(f"{prefix}.post_attention_layernorm.weight", (hidden,), "ones"))
    if spec.shape().is_moe_layer(layer):
        return plans + _moe_plans(f"{prefix}.mlp", spec)
    return plans + _mlp_plans(f"{prefix}.mlp", hidden, spec.intermediate)


def _mlp_plans(prefix: str, hidden: int, intermediate: int) -> list[TensorPlan]:
    return [TensorPlan(f"{prefix}.gate_proj.weight", (intermediate, hidden)),
            TensorPlan(f"{prefix}.up_proj.weight", (intermediate, hidden)),
            TensorPlan(f"{prefix}.down_proj.weight", (hidden, intermediate))]


def _latent_attention_plans(attn: str, spec: GeneratedModelSpec) -> list[TensorPlan]:
    """DeepSeek's MLA: the query through its low-rank bottleneck (or one q_proj), the KV latent and the
    shared RoPE key from one projection, the latent's expansion to every head's key (no RoPE) and value."""
    shape = spec.shape()
    heads, hidden, rank = shape.heads, shape.hidden, shape.kv_lora_rank or 0
    rope, nope, v_head = shape.qk_rope_head_dim or 0, shape.qk_nope_head_dim or 0, shape.v_head_dim or 0
    q_out = heads * (nope + rope)
    if shape.q_lora_rank:
        plans = [TensorPlan(f"{attn}.q_a_proj.weight", (shape.q_lora_rank, hidden)),
                 TensorPlan(f"{attn}.q_a_layernorm.weight", (shape.q_lora_rank,), "ones"),
                 TensorPlan(f"{attn}.q_b_proj.weight", (q_out, shape.q_lora_rank))]
    else:
        plans = [TensorPlan(f"{attn}.q_proj.weight", (q_out, hidden))]
    return plans + [TensorPlan(f"{attn}.kv_a_proj_with_mqa.weight", (rank + rope, hidden)),
                    TensorPlan(f"{attn}.kv_a_layernorm.weight", (rank,), "ones"),
                    TensorPlan(f"{attn}.kv_b_proj.weight", (heads * (nope + v_head), rank)),
                    TensorPlan(f"{attn}.o_proj.weight", (hidden, heads * v_head))]


def _moe_plans(mlp: str, spec: GeneratedModelSpec) -> list[TensorPlan]:
    """The router, DeepSeek's routing bias (float32, `noaux_tc`), every routed expert, the shared experts
    (one MLP of shared_experts x moe_intermediate, as DeepSeek's checkpoints have it)."""
    shape = spec.shape()
    hidden, inner = shape.hidden, shape.expert_intermediate
    plans = [TensorPlan(f"{mlp}.gate.weight", (shape.experts, hidden))]
    if spec.architecture == "deepseek_v3":
        plans.append(TensorPlan(f"{mlp}.gate.e_score_correction_bias", (shape.experts,), dtype="F32"))
    for expert in range(shape.experts):
        plans += _mlp_plans(f"{mlp}.experts.{expert}", hidden, inner)
    if shape.shared_experts:
        plans += _mlp_plans(f"{mlp}.shared_experts", hidden, inner * shape.shared_experts)
    return plans


# --- values ---------------------------------------------------------------------------------------------

def tensor_rng(seed: int, name: str) -> np.random.Generator:
    """The tensor's own stream: the same (seed, name) always draws the same values, whatever else changes."""
    name_words = np.frombuffer(hashlib.sha256(name.encode()).digest()[:16], dtype="<u4").tolist()
    return np.random.default_rng(np.random.SeedSequence([seed % 2**64, *name_words]))


def tensor_chunks(seed: int, plan: TensorPlan, chunk_values: int = CHUNK_VALUES) -> Iterator[np.ndarray]:
    """The tensor's float32 values in row-major order, at most `chunk_values` at a time. The chunks
    concatenate to one draw of the whole tensor, so the bytes do not depend on the chunk size."""
    rng = tensor_rng(seed, plan.name) if plan.fill == "normal" else None
    left = plan.values
    while left:
        count = min(left, chunk_values)
        if rng is None:
            yield np.ones(count, dtype=np.float32)
        else:
            values = rng.standard_normal(count, dtype=np.float32)
            values *= np.float32(INIT_STD)
            yield values
        left -= count


def bfloat16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (uint16), rounded to nearest even as torch does: add 0x7FFF plus
    the lowest kept bit to the uint32 pattern, keep the upper 16 bits. Overwrites `values` (finite only)."""
    bits = values.view(np.uint32)
    lowest_kept = bits >> 16
    lowest_kept &= 1
    bits += 0x7FFF
    bits += lowest_kept
    bits >>= 16
    return bits.astype("<u2")


def encoded(values: np.ndarray, dtype: str) -> np.ndarray:
    """A chunk of float32 values in the file's dtype, little-endian."""
    return bfloat16_bits(values) if dtype == "BF16" else values.astype("<f4", copy=False)


# --- safetensors ----------------------------------------------------------------------------------------

def safetensors_header(plans: list[TensorPlan], dtype: str) -> bytes:
    """The 8-byte little-endian length, then the JSON header (dtype, shape, data offsets per tensor),
    padded with spaces to 8 bytes so the data that follows is aligned."""
    entries: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for plan in plans:
        size = plan.nbytes(dtype)
        entries[plan.name] = {"dtype": plan.file_dtype(dtype), "shape": list(plan.shape),
                              "data_offsets": [offset, offset + size]}
        offset += size
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header


def read_safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (what a loader reads first)."""
    with path.open("rb") as file:
        (length,) = struct.unpack("<Q", file.read(8))
        header: dict[str, Any] = json.loads(file.read(length))
    return header


def write_safetensors(path: Path, plans: list[TensorPlan], seed: int, dtype: str,
                      chunk_values: int = CHUNK_VALUES) -> None:
    """Streams the tensors into one file, a chunk at a time."""
    with path.open("wb") as file:
        file.write(safetensors_header(plans, dtype))
        for plan in plans:
            _write_tensor(file, plan, seed, dtype, chunk_values)


def _write_tensor(file: BinaryIO, plan: TensorPlan, seed: int, dtype: str, chunk_values: int) -> None:
    for chunk in tensor_chunks(seed, plan, chunk_values):
        file.write(encoded(chunk, plan.file_dtype(dtype)).data)


def shards(plans: list[TensorPlan], dtype: str, max_bytes: int = MAX_SHARD_BYTES) -> list[list[TensorPlan]]:
    """The tensors in order, cut into files of at most `max_bytes` (a larger tensor alone in its file)."""
    groups: list[list[TensorPlan]] = [[]]
    size = 0
    for plan in plans:
        tensor_bytes = plan.nbytes(dtype)
        if groups[-1] and size + tensor_bytes > max_bytes:
            groups.append([])
            size = 0
        groups[-1].append(plan)
        size += tensor_bytes
    return groups


def write_weights(into: Path, spec: GeneratedModelSpec, max_shard_bytes: int = MAX_SHARD_BYTES,
                  chunk_values: int = CHUNK_VALUES) -> list[str]:
    """The safetensors file(s), and the index when there are several; returns the file names."""
    dtype = SAFETENSORS_DTYPES[spec.served_dtype()]
    plans = tensor_plans(spec)
    groups = shards(plans, dtype, max_shard_bytes)
    if len(groups) == 1:
        write_safetensors(into / "model.safetensors", plans, spec.seed, dtype, chunk_values)
        return ["model.safetensors"]
    names = [f"model-{i:05d}-of-{len(groups):05d}.safetensors" for i in range(1, len(groups) + 1)]
    for name, group in zip(names, groups):
        write_safetensors(into / name, group, spec.seed, dtype, chunk_values)
    index = {"metadata": {"total_size": sum(p.nbytes(dtype) for p in plans)},
             "weight_map": {plan.name: name for name, group in zip(names, groups) for plan in group}}
    _write_json(into / "model.safetensors.index.json", index)
    return [*names, "model.safetensors.index.json"]


# --- config ---------------------------------------------------------------------------------------------

def hf_config(spec: GeneratedModelSpec) -> dict[str, Any]:
    """config.json as the architecture's own model card has it."""
    common = {
        "attention_dropout": 0.0, "bos_token_id": BOS_ID, "eos_token_id": EOS_ID, "hidden_act": "silu",
        "hidden_size": spec.hidden, "initializer_range": INIT_STD, "intermediate_size": spec.intermediate,
        "max_position_embeddings": spec.max_position, "num_attention_heads": spec.heads,
        "num_hidden_layers": spec.layers, "num_key_value_heads": spec.kv_heads, "rms_norm_eps": spec.rms_norm_eps,
        "rope_scaling": spec.rope_scaling, "rope_theta": spec.rope_theta,
        "tie_word_embeddings": spec.tie_embeddings, "torch_dtype": spec.served_dtype(), "use_cache": True,
        "vocab_size": spec.vocab_size, "transformers_version": CONFIG_LAYOUT_VERSION,
    }
    if spec.head_dim is not None:
        common["head_dim"] = spec.head_dim
    architecture, model_type = HF_ARCHITECTURES[spec.architecture]
    named = {"architectures": [architecture], "model_type": model_type}
    if spec.architecture == "qwen2":  # q/k/v biases are part of Qwen2 itself; no sliding window
        return {**named, **common, "max_window_layers": spec.layers, "sliding_window": None,
                "use_sliding_window": False}
    if spec.architecture == "qwen3_moe":  # experts in every layer (Qwen3-30B-A3B's config.json)
        return {**named, **common, "attention_bias": False, "decoder_sparse_step": 1, "mlp_only_layers": [],
                "moe_intermediate_size": spec.shape().expert_intermediate, "norm_topk_prob": spec.norm_topk_prob,
                "num_experts": spec.experts, "num_experts_per_tok": spec.experts_per_token,
                "output_router_logits": False, "router_aux_loss_coef": 0.001, "max_window_layers": spec.layers,
                "sliding_window": None, "use_sliding_window": False}
    if spec.architecture == "deepseek_v3":  # DeepSeek-V3's config.json, without auto_map or fp8 quantization
        return {**named, **common, "attention_bias": False, "first_k_dense_replace": spec.dense_layers,
                "kv_lora_rank": spec.kv_lora_rank, "moe_intermediate_size": spec.shape().expert_intermediate,
                "moe_layer_freq": 1, "n_group": spec.expert_groups, "n_routed_experts": spec.experts,
                "n_shared_experts": spec.shared_experts, "norm_topk_prob": spec.norm_topk_prob,
                "num_experts_per_tok": spec.experts_per_token, "num_nextn_predict_layers": 0,
                "q_lora_rank": spec.q_lora_rank, "qk_nope_head_dim": spec.qk_nope_head_dim,
                "qk_rope_head_dim": spec.qk_rope_head_dim, "routed_scaling_factor": spec.routed_scaling_factor,
                "scoring_func": "sigmoid", "topk_group": spec.expert_groups_used, "topk_method": "noaux_tc",
                "v_head_dim": spec.v_head_dim}
    return {**named, **common, "attention_bias": spec.attention_bias, "mlp_bias": False, "pretraining_tp": 1}


def tokenizer_family(architecture: str) -> str:
    """Whose text pipeline the tokenizer has: Qwen2's for every Qwen (transformers loads qwen3_moe's as
    `Qwen2Tokenizer` too), GPT-2's byte-level one otherwise (DeepSeek-V3's is read from tokenizer.json)."""
    return "qwen2" if architecture in ("qwen2", "qwen3_moe") else "llama"


def generation_config() -> dict[str, Any]:
    """Only the special ids: sampling defaults here would become the server's defaults."""
    return {"bos_token_id": BOS_ID, "eos_token_id": EOS_ID}


# --- tokenizer ------------------------------------------------------------------------------------------

def byte_level_symbols() -> list[str]:
    """GPT-2's byte-to-symbol map, in byte order: printable bytes stand for themselves, the others are
    shifted above 255 (a space is 'Ġ')."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    symbols, shifted = {}, 0
    for byte in range(256):
        if byte in printable:
            symbols[byte] = chr(byte)
        else:
            symbols[byte] = chr(256 + shifted)
            shifted += 1
    return [symbols[byte] for byte in range(256)]


def word_merges(count: int) -> list[tuple[str, str]]:
    """`count` merges, each joining a word's prefix token with its next letter: 'Ġ'+'a', ..., 'Ġa'+'a', ...
    breadth first over lower-case words (every 1-letter word, then every 2-letter, ...). Every left side
    starts with 'Ġ', which the byte-level pre-tokenizer only puts at a word's start, so merges never
    compete inside a word: each word token encodes back to itself (what the load generator's exact-length
    prompts are made of) and a longer word is its longest known prefix plus single letters."""
    merges: list[tuple[str, str]] = []
    level = ["Ġ"]
    while len(merges) < count:
        next_level = []
        for prefix in level:
            for letter in WORD_LETTERS:
                merges.append((prefix, letter))
                next_level.append(prefix + letter)
                if len(merges) == count:
                    return merges
        level = next_level
    return merges


def byte_level_tokenizer(vocab_size: int, architecture: str = "llama") -> Any:
    """A byte-level BPE tokenizer of exactly `vocab_size` tokens, made without training (a trainer stops
    short of large vocabularies on small text): the specials (ids 0-2), the 256 byte symbols, then word
    merges until the vocabulary is full. It encodes any text, and decodes what it encodes."""
    from tokenizers import AddedToken, Tokenizer, decoders, models

    base = [*SPECIAL_TOKENS, *byte_level_symbols()]
    if vocab_size < len(base):
        raise ValueError(f"vocab_size {vocab_size}: a byte-level tokenizer needs at least {len(base)}")
    merges = word_merges(vocab_size - len(base))
    vocab = {token: token_id for token_id, token in enumerate([*base, *(left + right for left, right in merges)])}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    _set_pipeline(tokenizer, architecture)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in SPECIAL_TOKENS])
    return tokenizer


def _set_pipeline(tokenizer: Any, architecture: str) -> None:
    """How text is cut into words before the merges. Qwen2's own (NFC, its split pattern): transformers 5
    loads a qwen2 model's tokenizer as `Qwen2Tokenizer`, which imposes it whatever tokenizer.json says, so
    tokenizer.json says the same and every loader (vLLM's, the load generator's `tokenizers`) agrees.
    GPT-2's byte-level split for Llama (read from tokenizer.json as written)."""
    from tokenizers import Regex, normalizers, pre_tokenizers

    if architecture == "qwen2":
        tokenizer.normalizer = normalizers.NFC()
        tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    else:
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)


def write_tokenizer(into: Path, vocab_size: int, architecture: str = "llama") -> None:
    """tokenizer.json and what transformers reads beside it. No pad token: Qwen2's class would otherwise
    add its own '<|endoftext|>' past the model's vocabulary."""
    byte_level_tokenizer(vocab_size, architecture).save(str(into / "tokenizer.json"))
    bos, eos, unk = SPECIAL_TOKENS
    tokenizer_class = "Qwen2Tokenizer" if architecture == "qwen2" else "PreTrainedTokenizerFast"
    _write_json(into / "tokenizer_config.json", {
        "tokenizer_class": tokenizer_class, "bos_token": bos, "eos_token": eos, "unk_token": unk,
        "pad_token": None, "model_max_length": 1_000_000, "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    })
    _write_json(into / "special_tokens_map.json", {"bos_token": bos, "eos_token": eos, "unk_token": unk})


# --- the directory --------------------------------------------------------------------------------------

def write_hf_model(spec: GeneratedModelSpec, into: Path, max_shard_bytes: int = MAX_SHARD_BYTES,
                   chunk_values: int = CHUNK_VALUES) -> None:
    """The whole directory, created here; the marker last, so a directory with it is complete."""
    check_spec(spec)
    into.mkdir(parents=True)
    _write_json(into / "config.json", hf_config(spec))
    _write_json(into / "generation_config.json", generation_config())
    write_tokenizer(into, spec.vocab_size, tokenizer_family(spec.architecture))
    files = write_weights(into, spec, max_shard_bytes, chunk_values)
    _write_json(into / MARKER_NAME, {"generator": GENERATOR_NAME, "spec": spec.model_dump(mode="json"),
                                     "parameters": sum(plan.values for plan in tensor_plans(spec)), "weights": files})


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")
