"""Model shapes by name: the dimensions of the models users serve, and what they cost.

A model's cost on a CPU is its shape, its dtype and its tokens, not the values of its weights: these
presets let a campaign generate a random-weight model of the real shape (nothing is downloaded) and
let `servebench plan` say, before anything starts, how many parameters it has, how many bytes each
rank holds under TP/PP and how many bytes of KV cache a token takes. The numbers are the published
configs' (`config.json` of each model on its hub page); `parameters()` reproduces the published
parameter counts (tests/unit/test_model_shapes.py, tests/unit/test_moe_models.py).

Mixture-of-experts shapes: `experts` routed experts of `moe_intermediate` each, `experts_per_token` of them
active a token, `shared_experts` always on, the first `dense_layers` layers a plain MLP (DeepSeek's
`first_k_dense_replace`). Multi-head latent attention (DeepSeek-V2/V3, `kv_lora_rank` set): queries through a
rank-`q_lora_rank` bottleneck, keys and values from one compressed latent of `kv_lora_rank` plus a shared
RoPE key of `qk_rope_head_dim`, which is all the KV cache keeps: `kv_lora_rank + qk_rope_head_dim` values a
token a layer (576 for DeepSeek-V3), not 2 x heads x head_dim.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

Architecture = Literal["llama", "qwen2", "qwen3_moe", "deepseek_v3"]
MOE_ARCHITECTURES = ("qwen3_moe", "deepseek_v3")

# bytes per element of each served dtype (the KV cache is kept in the served dtype unless an engine says
# otherwise)
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class LayerParameters:
    """One decoder layer's parameters by how a TP rank holds them: `split` matrices (each rank a 1/TP
    slice), `replicated` matrices (every rank all of it: MLA's q_a and kv_a projections) and `small`
    ones (norms, biases, the router and its bias: replicated, and kept f32 in a GGUF file)."""

    split: int
    replicated: int
    small: int

    @property
    def total(self) -> int:
        return self.split + self.replicated + self.small


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer: dense (Llama layout; Qwen2 adds q/k/v biases) or mixture-of-experts
    (Qwen3-MoE: q/k norms and routed experts in every layer; DeepSeek-V3: multi-head latent attention,
    leading dense layers, then routed and shared experts, sigmoid routing over expert groups)."""

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
    # mixture of experts (experts 0: a dense model)
    experts: int = 0                 # routed experts a MoE layer has
    experts_per_token: int = 0       # of them active for a token (top-k)
    moe_intermediate: int | None = None  # each expert's intermediate size (None: intermediate)
    shared_experts: int = 0          # experts every token goes through (DeepSeek), of moe_intermediate each
    dense_layers: int = 0            # leading layers with a plain MLP instead (DeepSeek's first_k_dense_replace)
    expert_groups: int = 1           # routing groups (DeepSeek's n_group) and how many a token may use (topk_group)
    expert_groups_used: int = 1
    routed_scaling_factor: float = 1.0
    norm_topk_prob: bool = False     # the top-k routing weights renormalized to sum to 1
    # multi-head latent attention (kv_lora_rank None: ordinary attention)
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None

    @property
    def head_size(self) -> int:
        """The per-head size of ordinary attention (MLA's query/key head is qk_nope + qk_rope)."""
        if self.is_mla:
            return (self.qk_nope_head_dim or 0) + (self.qk_rope_head_dim or 0)
        return self.head_dim or self.hidden // self.heads

    @property
    def is_moe(self) -> bool:
        return self.experts > 0

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def expert_intermediate(self) -> int:
        return self.moe_intermediate or self.intermediate

    @property
    def moe_layers(self) -> int:
        """Layers with experts: all but the leading dense ones (none in a dense model)."""
        return max(0, self.layers - self.dense_layers) if self.is_moe else 0

    def is_moe_layer(self, index: int) -> bool:
        return self.is_moe and index >= self.dense_layers

    def attention_parameters(self) -> LayerParameters:
        """A layer's attention: q, k, v, o (their biases, Qwen3's q/k norms) or MLA's projections."""
        if self.is_mla:
            heads, rank, rope = self.heads, self.kv_lora_rank or 0, self.qk_rope_head_dim or 0
            q_head, v_head = self.head_size, self.v_head_dim or 0
            if self.q_lora_rank:  # q_a (replicated across TP) + its norm, then q_b per head
                q_split, q_replicated, q_small = self.q_lora_rank * heads * q_head, \
                    self.hidden * self.q_lora_rank, self.q_lora_rank
            else:
                q_split, q_replicated, q_small = self.hidden * heads * q_head, 0, 0
            kv_a = self.hidden * (rank + rope)               # kv_a_proj_with_mqa: the latent and the RoPE key
            kv_b = rank * heads * ((self.qk_nope_head_dim or 0) + v_head)
            o = heads * v_head * self.hidden
            return LayerParameters(q_split + kv_b + o, q_replicated + kv_a, q_small + rank)
        q = self.hidden * self.heads * self.head_size
        kv = 2 * self.hidden * self.kv_heads * self.head_size
        o = self.heads * self.head_size * self.hidden
        bias = (self.heads + 2 * self.kv_heads) * self.head_size if self.attention_bias else 0
        if self.attention_bias and self.architecture == "llama":
            bias += self.hidden  # Llama's attention_bias biases o_proj too (Qwen2 biases q, k and v only)
        qk_norms = 2 * self.head_size if self.architecture == "qwen3_moe" else 0
        return LayerParameters(q + kv + o, 0, bias + qk_norms)

    def mlp_parameters(self, moe: bool) -> LayerParameters:
        """A layer's MLP: the gated dense one, or the router, its experts and the shared experts (the
        router's weight and DeepSeek's e_score_correction_bias count as small: replicated)."""
        if not moe:
            return LayerParameters(3 * self.hidden * self.intermediate, 0, 0)
        experts = self.experts * 3 * self.hidden * self.expert_intermediate
        shared = self.shared_experts * 3 * self.hidden * self.expert_intermediate
        router = self.experts * self.hidden
        bias = self.experts if self.architecture == "deepseek_v3" else 0   # noaux_tc's correction bias
        return LayerParameters(experts + shared, 0, router + bias)

    def layer_breakdown(self, moe: bool = False) -> LayerParameters:
        """One decoder layer (a MoE one or a dense one) with its two norms."""
        attention, mlp = self.attention_parameters(), self.mlp_parameters(moe and self.is_moe)
        return LayerParameters(attention.split + mlp.split, attention.replicated + mlp.replicated,
                               attention.small + mlp.small + 2 * self.hidden)

    def layer_parameters(self, moe: bool = False) -> int:
        return self.layer_breakdown(moe).total

    def embedding_parameters(self) -> int:
        """The token embedding and the output head (one matrix when they are tied) and the final norm."""
        return self.vocab_size * self.hidden * (1 if self.tie_embeddings else 2) + self.hidden

    def parameters(self) -> int:
        dense = self.layers - self.moe_layers
        return dense * self.layer_parameters() + self.moe_layers * self.layer_parameters(True) \
            + self.embedding_parameters()

    def active_parameters(self) -> int:
        """Parameters a token goes through: every MoE layer with only `experts_per_token` of its routed
        experts (the router and the shared experts always)."""
        if not self.is_moe:
            return self.parameters()
        idle = (self.experts - self.experts_per_token) * 3 * self.hidden * self.expert_intermediate
        return self.parameters() - self.moe_layers * idle

    def weight_bytes(self, dtype: str) -> int:
        return self.parameters() * DTYPE_BYTES[dtype]

    def stage_parameters(self, layers: int, tp: int = 1) -> float:
        """The parameters one rank holds of `layers` decoder layers, its split matrices 1/tp each. Which
        layers a stage has is not known here, so a stage with fewer than all layers is counted with the
        largest ones (MoE layers first): exact for all layers, an upper bound for a PP stage."""
        layers = min(layers, self.layers)
        moe = min(layers, self.moe_layers)
        total = 0.0
        for count, is_moe in ((moe, True), (layers - moe, False)):
            parts = self.layer_breakdown(is_moe)
            total += count * (parts.split / tp + parts.replicated + parts.small)
        return total

    def kv_values_per_token_layer(self, tp: int = 1) -> int:
        """Values a token keeps in one layer of one rank's KV cache: MLA's latent and RoPE key (the same
        on every TP rank: the latent is not split by heads), else K and V of the rank's KV heads (a KV
        head is replicated when TP exceeds the KV heads, as vLLM does)."""
        if self.is_mla:
            return (self.kv_lora_rank or 0) + (self.qk_rope_head_dim or 0)
        return 2 * max(1, self.kv_heads // tp) * self.head_size

    def kv_bytes_per_token(self, dtype: str) -> int:
        """Keys and values of every layer: 2 x layers x kv_heads x head_dim x dtype bytes (with MLA:
        layers x (kv_lora_rank + qk_rope_head_dim) x dtype bytes)."""
        return self.layers * self.kv_values_per_token_layer() * DTYPE_BYTES[dtype]

    def rank_weight_bytes(self, dtype: str, tp: int = 1, pp: int = 1) -> int:
        """The weights one rank holds: its PP stage's layers (the first stage has the embedding, the last
        the head; the largest stage is returned), each matrix split TP ways. Norms are replicated."""
        per_stage = -(-self.layers // pp)
        embed = self.vocab_size * self.hidden // tp
        head = 0 if self.tie_embeddings and pp == 1 else self.vocab_size * self.hidden // tp
        ends = embed + head + self.hidden if pp == 1 else max(embed, head + self.hidden)
        return round(self.stage_parameters(per_stage, tp) + ends) * DTYPE_BYTES[dtype]

    def rank_kv_bytes_per_token(self, dtype: str, tp: int = 1, pp: int = 1) -> int:
        """One rank's share of a token's KV cache: its stage's layers, its share of the KV heads."""
        per_stage = -(-self.layers // pp)
        return per_stage * self.kv_values_per_token_layer(tp) * DTYPE_BYTES[dtype]

    def with_overrides(self, **overrides: Any) -> ModelShape:
        return replace(self, **{k: v for k, v in overrides.items() if v is not None})


_LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}

PRESETS: dict[str, ModelShape] = {
    # the tiny test model: under a million parameters, all overhead
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
    # Qwen2.5-0.5B: the family's smallest (the same layout, tied embeddings, head_dim 64): what a CPU serves
    # where 1.5B is too slow, and the tests' real shape (a 2-layer cut computes half of qwen2-1.5b's per token)
    "qwen2.5-0.5b": ModelShape("qwen2", layers=24, hidden=896, heads=14, kv_heads=2, intermediate=4864,
                               vocab_size=151936, max_position=32768, tie_embeddings=True, attention_bias=True,
                               rope_theta=1000000.0, rms_norm_eps=1e-6),
}

# DeepSeek-V3's config.json (DeepSeek-R1 has the same shape): YaRN from 4K to 160K
_DEEPSEEK_YARN = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                  "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0}

PRESETS.update({
    # DeepSeek-R1 (and V3): 61 layers, the first 3 dense, then 256 routed experts (8 a token, sigmoid over 8
    # groups of which 4 are used) and 1 shared; MLA with a 1536 query and 512 KV latent. The multi-token
    # prediction layer (num_nextn_predict_layers 1, ~11.7 B more) is not part of the shape: vLLM and llama.cpp
    # skip it unless they decode speculatively
    "deepseek-r1": ModelShape("deepseek_v3", layers=61, hidden=7168, heads=128, kv_heads=128, intermediate=18432,
                              vocab_size=129280, max_position=163840, rope_theta=10000.0,
                              rope_scaling=_DEEPSEEK_YARN, rms_norm_eps=1e-6, experts=256, experts_per_token=8,
                              moe_intermediate=2048, shared_experts=1, dense_layers=3, expert_groups=8,
                              expert_groups_used=4, routed_scaling_factor=2.5, norm_topk_prob=True,
                              q_lora_rank=1536, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                              v_head_dim=128),
    # Qwen3-30B-A3B: 48 layers, each with 128 experts of 768 (8 a token, softmax, renormalized), GQA 32 over 4
    # heads of 128, q/k norms; no shared expert, no dense layer (its intermediate_size 6144 is unused)
    "qwen3-30b-a3b": ModelShape("qwen3_moe", layers=48, hidden=2048, heads=32, kv_heads=4, intermediate=6144,
                                vocab_size=151936, max_position=40960, rope_theta=1000000.0, rms_norm_eps=1e-6,
                                head_dim=128, experts=128, experts_per_token=8, moe_intermediate=768,
                                norm_topk_prob=True),
})

# the published parameter counts the presets are checked against (tests/unit/test_model_shapes.py). DeepSeek-R1:
# "671B total, 37B activated" (its model card and the V3 report), the main model without the MTP layer (the
# card's 685B includes it); Qwen3-30B-A3B: "30.5B in total and 3.3B activated" (its model card)
PUBLISHED_PARAMETERS = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-2-7b": 6_738_415_616,
    "llama-3.2-1b": 1_235_814_400,
    "qwen2-1.5b": 1_777_088_000,
    "qwen2.5-0.5b": 490_000_000,   # "0.49B (0.36B non-embedding)", its model card
    "deepseek-r1": 671_000_000_000,
    "qwen3-30b-a3b": 30_500_000_000,
}
PUBLISHED_ACTIVE_PARAMETERS = {"deepseek-r1": 37_000_000_000, "qwen3-30b-a3b": 3_300_000_000}


def preset(name: str) -> ModelShape:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"no model preset {name!r}: one of {', '.join(PRESETS)}") from None
