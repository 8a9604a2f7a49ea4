"""Model shapes by name: the dimensions of the models users serve, and what they cost.

A model's cost on a CPU is its shape, its dtype and its tokens, not the values of its weights: these
presets let a campaign generate a random-weight model of the real shape (nothing is downloaded) and
let `servebench plan` say, before anything starts, how many parameters it has, how many bytes each
rank holds under TP/PP and how many bytes of KV cache a token takes. The numbers are the published
configs' (`config.json` of each model on its hub page); `parameters()` reproduces the published
parameter counts exactly for the dense decoder layout (tests/test_model_shapes.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

Architecture = Literal["llama", "qwen2"]

# bytes per element of each served dtype (the KV cache is kept in the served dtype unless an engine says
# otherwise)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelShape:
    """A dense decoder-only transformer (Llama layout; Qwen2 adds q/k/v biases)."""

    architecture: Architecture
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab_size: int
    max_position: int
    tie_embeddings: bool = False
    attention_bias: bool = False
    rope_theta: float = 10000.0
    rope_scaling: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    rms_norm_eps: float = 1e-5
    head_dim: int | None = None      # None: hidden / heads

    @property
    def head_size(self) -> int:
        return self.head_dim or self.hidden // self.heads

    def layer_parameters(self) -> int:
        """One decoder layer: attention (q, k, v, o and the biases), the gated MLP and two norms."""
        q = self.hidden * self.heads * self.head_size
        kv = 2 * self.hidden * self.kv_heads * self.head_size
        o = self.heads * self.head_size * self.hidden
        bias = (self.heads + 2 * self.kv_heads) * self.head_size if self.attention_bias else 0
        if self.attention_bias and self.architecture == "llama":
            bias += self.hidden  # Llama's attention_bias biases o_proj too (Qwen2 biases q, k and v only)
        mlp = 3 * self.hidden * self.intermediate
        return q + kv + o + bias + mlp + 2 * self.hidden

    def embedding_parameters(self) -> int:
        """The token embedding and the output head (one matrix when they are tied) and the final norm."""
        return self.vocab_size * self.hidden * (1 if self.tie_embeddings else 2) + self.hidden

    def parameters(self) -> int:
        return self.layers * self.layer_parameters() + self.embedding_parameters()

    def weight_bytes(self, dtype: str) -> int:
        return self.parameters() * DTYPE_BYTES[dtype]

    def kv_bytes_per_token(self, dtype: str) -> int:
        """Keys and values of every layer: 2 x layers x kv_heads x head_dim x dtype bytes."""
        return 2 * self.layers * self.kv_heads * self.head_size * DTYPE_BYTES[dtype]

    def rank_weight_bytes(self, dtype: str, tp: int = 1, pp: int = 1) -> int:
        """The weights one rank holds: its PP stage's layers (the first stage has the embedding, the last
        the head; the largest stage is returned), each matrix split TP ways. Norms are replicated."""
        per_stage = -(-self.layers // pp)
        norms = 2 * self.hidden
        layer = (self.layer_parameters() - norms) // tp + norms
        embed = self.vocab_size * self.hidden // tp
        head = 0 if self.tie_embeddings and pp == 1 else self.vocab_size * self.hidden // tp
        ends = embed + head + self.hidden if pp == 1 else max(embed, head + self.hidden)
        return (per_stage * layer + ends) * DTYPE_BYTES[dtype]

    def rank_kv_bytes_per_token(self, dtype: str, tp: int = 1, pp: int = 1) -> int:
        """One rank's share of a token's KV cache: its stage's layers, its share of the KV heads (a KV
        head is replicated when TP exceeds the KV heads, as vLLM does)."""
        per_stage = -(-self.layers // pp)
        heads = max(1, self.kv_heads // tp)
        return 2 * per_stage * heads * self.head_size * DTYPE_BYTES[dtype]

    def with_overrides(self, **overrides: Any) -> ModelShape:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


_LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}

PRESETS: dict[str, ModelShape] = {
    # today's tiny test model: under a million parameters, all overhead
    "tiny-llama": ModelShape("llama", layers=4, hidden=128, heads=4, kv_heads=2, intermediate=256,
                             vocab_size=1024, max_position=2048),
    "llama-3.1-8b": ModelShape("llama", layers=32, hidden=4096, heads=32, kv_heads=8, intermediate=14336,
                               vocab_size=128256, max_position=131072, rope_theta=500000.0,
                               rope_scaling={**_LLAMA3_ROPE, "factor": 8.0}),
    "llama-2-7b": ModelShape("llama", layers=32, hidden=4096, heads=32, kv_heads=32, intermediate=11008,
                             vocab_size=32000, max_position=4096, rms_norm_eps=1e-5),
    "llama-3.2-1b": ModelShape("llama", layers=16, hidden=2048, heads=32, kv_heads=8, intermediate=8192,
                               vocab_size=128256, max_position=131072, tie_embeddings=True, rope_theta=500000.0,
                               rope_scaling={**_LLAMA3_ROPE, "factor": 32.0}, head_dim=64),
    # DeepSeek-R1-Distill-Qwen-1.5B's shape (untied, unlike Qwen2-1.5B itself)
    "qwen2-1.5b": ModelShape("qwen2", layers=28, hidden=1536, heads=12, kv_heads=2, intermediate=8960,
                             vocab_size=151936, max_position=131072, attention_bias=True, rope_theta=10000.0,
                             rms_norm_eps=1e-6),
}

# the published parameter counts the presets are checked against (tests/test_model_shapes.py)
PUBLISHED_PARAMETERS = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-2-7b": 6_738_415_616,
    "llama-3.2-1b": 1_235_814_400,
    "qwen2-1.5b": 1_777_088_000,
}


def preset(name: str) -> ModelShape:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"no model preset {name!r}: one of {', '.join(PRESETS)}") from None
