"""Memory a mode's server needs on each node, known before anything starts (docs/memory.md).

A server's memory is its model's weights, its KV cache and each process's working set. The first two
follow from the model's shape (servebench/models/shapes.py) and what each process of the mode
holds of it, which the engine declares (`EngineAPI.memory`: its ranks on the nodes, each one's layers,
TP share and KV pool); the working set is the engine's, from the shape and its settings (vLLM) or a
measured constant per process (llama.cpp). `servebench plan` prints it, the campaign check refuses a
mode a node cannot hold, the server's start-up timeout grows with the bytes a rank loads, and the
saturation study compares the KV capacity the shape gives with the one the engine logged. The bytes
a decode step reads and the parameters a prompt token goes through (`share_step_bytes`,
`share_token_parameters`) put each cell against its node's roofline (servebench/roofline/figures.py).
Pure but for reading a local model's config.json and the orchestrator's /proc/meminfo.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from servebench.config.campaign import Campaign, GeneratedModelSpec, ModelSpec, ModeSpec, NodeSpec
from servebench.config.sweep import configuration_space
from servebench.engines.base import Engine, MemoryRequest, RankShare, ServerMemory
from servebench.models.hf_quantized import FORMATS as HF_QUANTIZED_FORMATS
from servebench.models.hf_quantized import QuantizedFormat
from servebench.models.shapes import DTYPE_BYTES, Architecture, ModelShape
from servebench.planning.runtime_probe import measured_runtimes

GIB = 1024 ** 3
GGUF_BYTES_PER_WEIGHT = {"f32": 4.0, "f16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32}  # blocks of 32 with a scale
GGUF_SMALL_BYTES = 4  # norms and biases stay f32 in a GGUF file
# A conservative rate at which a rank reads (or, for random weights, writes) its weights; qemu-user
# emulation is several times slower (an emulated vLLM started in 307-321 s against 45 s natively).
LOAD_BYTES_PER_S = 100e6
EMULATED_LOAD_BYTES_PER_S = 20e6
UNKNOWN_REMOTE = "unknown until provision (the node's inventory records its MemTotal); set memory_gib to check it now"


@dataclass(frozen=True)
class ModelWeights:
    """The model as memory sees it: its shape (None: unknown, `why`) and how many bytes its layers'
    matrices, its norms and biases and its KV cache take per element. A Hugging Face quantized model
    (`computes_in`: the dtype its activations are in) keeps its embedding and head in that dtype (the
    quantizers leave them alone); any other keeps them as its layers' matrices."""

    shape: ModelShape | None
    stored_as: str                  # 'bfloat16', 'q4_0', 'w8a8': what the layers' matrices are stored in
    matrix_bytes: float = 2.0
    small_bytes: int = 2
    kv_dtype: str = "bfloat16"
    why: str | None = None
    computes_in: str | None = None  # a quantized model's activation dtype (None: `stored_as`)

    @property
    def vocab_matrix_bytes(self) -> float:
        """Bytes an element of the embedding and the head takes (and, for a quantized model, the dtype its
        activations and the packed second copy of the vocabulary are in)."""
        return self.matrix_bytes if self.computes_in is None else DTYPE_BYTES[self.computes_in]

    def kv_bytes_per_token(self, layers: int, tp: int = 1) -> int:
        """KV bytes a token takes in `layers` layers of one rank: its share of the KV heads (a head is
        replicated when TP exceeds them), or with multi-head latent attention the latent and the RoPE key
        (kv_lora_rank + qk_rope_head_dim values a layer, on every TP rank: vLLM's MLA cache and llama.cpp's
        K-only MLA cache alike)."""
        if self.shape is None:
            return 0
        return layers * self.shape.kv_values_per_token_layer(tp) * DTYPE_BYTES[self.kv_dtype]


def model_weights(model: ModelSpec, engine: Engine, model_path: Path | None) -> ModelWeights:
    """A generated model's shape in the format the engine serves (GGUF type or served dtype); a local
    directory's from its config.json, when readable; a GGUF file's is not read (unknown)."""
    kv_override = engine.api.memory.kv_cache_dtype if engine.api.memory else None
    if isinstance(model, GeneratedModelSpec):
        dtype = model.served_dtype()
        if engine.default_model.format == "gguf":
            return ModelWeights(model.shape(), model.gguf_type(), GGUF_BYTES_PER_WEIGHT[model.gguf_type()],
                                GGUF_SMALL_BYTES, kv_override or dtype)
        if model.quantization in HF_QUANTIZED_FORMATS:
            return quantized_weights(model.shape(), HF_QUANTIZED_FORMATS[model.quantization], dtype,
                                     kv_override or dtype)
        return ModelWeights(model.shape(), dtype, DTYPE_BYTES[dtype], DTYPE_BYTES[dtype], kv_override or dtype)
    if model_path is None or model_path.suffix.lower() == ".gguf":
        size = f" ({model_path.stat().st_size / GIB:.2f} GiB file)" if model_path and model_path.is_file() else ""
        return ModelWeights(None, "gguf", why=f"a GGUF file's shape is not read at plan time{size}")
    try:
        config = json.loads((model_path / "config.json").read_text())
        shape = shape_from_config(config)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return ModelWeights(None, "?", why=f"no readable config.json in {model_path}: {exc}")
    dtype = model.dtype if model.dtype != "auto" else str(config.get("torch_dtype") or config.get("dtype"))
    if dtype not in DTYPE_BYTES:
        return ModelWeights(shape, dtype, why=f"config.json's dtype {dtype!r} is not one of {', '.join(DTYPE_BYTES)}")
    if (fmt := config_quantization(config)) is not None:
        return quantized_weights(shape, fmt, dtype, kv_override or dtype)
    return ModelWeights(shape, dtype, DTYPE_BYTES[dtype], DTYPE_BYTES[dtype], kv_override or dtype)


def quantized_bytes_per_weight(fmt: QuantizedFormat, dtype: str, in_features: int) -> float:
    """Bytes a quantized linear's weight takes an element: its bits, its scale (in the served dtype, one a
    group along the input, or one an output channel: then one per `in_features` weights) and, for GPTQ and
    AWQ, the zero point packed at the same bits (GPTQ stores it even when symmetric)."""
    group = fmt.group_size or in_features
    zero = fmt.bits / 8 if fmt.quant_method in ("gptq", "awq") else 0.0
    return fmt.bits / 8 + (DTYPE_BYTES[dtype] + zero) / group


def quantized_weights(shape: ModelShape, fmt: QuantizedFormat, dtype: str, kv_dtype: str) -> ModelWeights:
    """A Hugging Face quantized model: the layers' projections at the format's bytes (what vLLM's CPU
    kernels keep: oneDNN's int8 and `CPUWNA16`'s packed int4 are as large as the checkpoint's tensors),
    the embedding, head, norms and biases in the served dtype."""
    return ModelWeights(shape, fmt.name, quantized_bytes_per_weight(fmt, dtype, shape.hidden), DTYPE_BYTES[dtype],
                        kv_dtype, computes_in=dtype)


def config_quantization(config: dict) -> QuantizedFormat | None:
    """The quantized format a checkpoint's config.json declares, among those vLLM's CPU backend serves: GPTQ
    and AWQ by `quant_method` and `bits`, compressed-tensors by its weights' `num_bits` (8: W8A8's int8,
    4: W4A16's packed int4) and group size. None when it declares none (or one not listed: counted at the
    dtype's bytes, an overestimate)."""
    quant = config.get("text_config", config).get("quantization_config") or config.get("quantization_config")
    if not isinstance(quant, dict):
        return None
    method = quant.get("quant_method")
    if method in ("gptq", "awq"):
        bits, group = quant.get("bits"), quant.get("group_size")
        return QuantizedFormat(method, method, int(bits), int(group) if group and group > 0 else None,
                               zero_point=method == "awq") if bits in (4, 8) else None
    if method == "compressed-tensors":
        for scheme in (quant.get("config_groups") or {}).values():
            weights = (scheme or {}).get("weights") or {}
            bits, group = weights.get("num_bits"), weights.get("group_size")
            if bits in (4, 8):
                return QuantizedFormat("w8a8" if bits == 8 else "w4a16", method, int(bits),
                                       int(group) if group else None)
    return None


# a config.json's model_type -> the layout its parameters are counted by (any other: Llama's)
CONFIG_ARCHITECTURES: dict[str, Architecture] = {"qwen2": "qwen2", "qwen3_moe": "qwen3_moe",
                                                 "deepseek_v3": "deepseek_v3", "deepseek_v2": "deepseek_v3"}


def shape_from_config(config: dict) -> ModelShape:
    """A Hugging Face config.json's decoder dimensions: Llama and Qwen2 names, and the experts and latent
    attention of Qwen3-MoE (`num_experts`) and DeepSeek-V2/V3 (`n_routed_experts`, `kv_lora_rank`)."""
    text = config.get("text_config", config)
    model_type = text.get("model_type")
    qwen2 = model_type == "qwen2"
    architecture = CONFIG_ARCHITECTURES.get(model_type, "llama")
    dense = ModelShape(
        architecture, layers=int(text["num_hidden_layers"]), hidden=int(text["hidden_size"]),
        heads=int(text["num_attention_heads"]),
        kv_heads=int(text.get("num_key_value_heads") or text["num_attention_heads"]),
        intermediate=int(text["intermediate_size"]), vocab_size=int(text["vocab_size"]),
        max_position=int(text.get("max_position_embeddings") or 2048),
        tie_embeddings=bool(text.get("tie_word_embeddings", False)),
        attention_bias=bool(text.get("attention_bias", qwen2)) and architecture in ("llama", "qwen2"),
        head_dim=text.get("head_dim") if architecture != "deepseek_v3" else None)
    experts = int(text.get("num_experts") or text.get("n_routed_experts") or 0)
    if not experts or architecture == "llama":
        return dense
    moe = dense.with_overrides(
        experts=experts, experts_per_token=int(text.get("num_experts_per_tok") or 0),
        moe_intermediate=text.get("moe_intermediate_size"), shared_experts=int(text.get("n_shared_experts") or 0),
        dense_layers=int(text.get("first_k_dense_replace") or 0))
    if architecture != "deepseek_v3":
        return moe
    return moe.with_overrides(q_lora_rank=text.get("q_lora_rank"), kv_lora_rank=text.get("kv_lora_rank"),
                              qk_nope_head_dim=text.get("qk_nope_head_dim"),
                              qk_rope_head_dim=text.get("qk_rope_head_dim"), v_head_dim=text.get("v_head_dim"))


def share_weight_bytes(weights: ModelWeights, share: RankShare) -> int:
    """The bytes of the weights one process holds: its layers' matrices split TP ways (norms, MoE routers
    and MLA's q_a/kv_a projections replicated; every expert split TP ways, as vLLM does without expert
    parallelism), and the embedding and output head (one matrix when tied and held together). A share
    of fewer than all layers of a MoE model is counted with its largest layers (those with experts)
    first: the share does not say which layers it has, so a pipeline stage is never underestimated."""
    shape = weights.shape
    assert shape is not None
    layers = 0.0
    held = min(share.layers, shape.layers)
    moe = min(held, shape.moe_layers)
    for count, is_moe in ((moe, True), (held - moe, False)):
        parts = shape.layer_breakdown(is_moe)
        bias = (shape.heads + 2 * shape.kv_heads) * shape.head_size if shape.attention_bias else 0
        small = parts.small - bias
        layers += count * ((parts.split / share.tp + parts.replicated) * weights.matrix_bytes
                           + (small + bias / share.tp) * weights.small_bytes)
    vocab = shape.vocab_size * shape.hidden / share.tp * weights.vocab_matrix_bytes
    head = 0.0
    if share.head:
        shared = shape.tie_embeddings and share.embedding
        head = (0.0 if shared else vocab) + shape.hidden * weights.small_bytes
    return round(layers + (vocab if share.embedding else 0.0) + head)


def share_step_bytes(weights: ModelWeights, share: RankShare) -> int:
    """The weight bytes one decode step of this process reads: all it holds but an untied token
    embedding, of which a step reads one row a sequence (a tied one is read whole, as the head)."""
    shape = weights.shape
    assert shape is not None
    lookup_only = share.embedding and not (shape.tie_embeddings and share.head)
    embedding = shape.vocab_size * shape.hidden / share.tp * weights.vocab_matrix_bytes if lookup_only else 0.0
    return round(share_weight_bytes(weights, share) - embedding)


def share_token_parameters(weights: ModelWeights, share: RankShare) -> int:
    """The parameters a prompt token is multiplied through in this process (2 FLOPs each): its layers'
    matrices, a MoE layer's routed experts only `experts_per_token` of them; not the embedding (a
    lookup) nor the head (vLLM and llama.cpp compute logits for a sequence's last prompt token only, so
    over a prompt the head adds 1/prompt tokens of itself: left out, the prefill rate a lower bound)."""
    shape = weights.shape
    assert shape is not None
    held = min(share.layers, shape.layers)
    moe = min(held, shape.moe_layers)
    idle = (shape.experts - shape.experts_per_token) * 3 * shape.hidden * shape.expert_intermediate
    total = 0.0
    for count, is_moe in ((moe, True), (held - moe, False)):
        parts = shape.layer_breakdown(is_moe)
        split = parts.split - (idle if is_moe else 0)
        total += count * (split / share.tp + parts.replicated)
    return round(total)


def share_kv_bytes(weights: ModelWeights, share: RankShare) -> int:
    if share.kv_pool_bytes is not None:
        return share.kv_pool_bytes
    return (share.kv_pool_tokens or 0) * weights.kv_bytes_per_token(share.layers, share.tp)


def share_kv_tokens(weights: ModelWeights, share: RankShare) -> int | None:
    """The tokens a process's KV pool holds (None: it keeps none)."""
    if share.kv_pool_tokens is not None:
        return share.kv_pool_tokens if share.layers else None
    per_token = weights.kv_bytes_per_token(share.layers, share.tp)
    return share.kv_pool_bytes // per_token if share.kv_pool_bytes and per_token else None


@dataclass(frozen=True)
class RankMemory:
    share: RankShare
    weights: int | None      # None: the model's shape is unknown
    kv: int | None
    working_set: int

    @property
    def total(self) -> int | None:
        return None if self.weights is None or self.kv is None else self.weights + self.kv + self.working_set


@dataclass(frozen=True)
class NodeMemory:
    node: str
    ranks: list[RankMemory]
    available: int | None    # bytes the node's servers may use (None: unknown now)
    available_from: str      # where that number comes from

    def part(self, name: str) -> int | None:
        values = [getattr(rank, name) for rank in self.ranks]
        return None if None in values else sum(values)

    @property
    def need(self) -> int | None:
        return self.part("total")


@dataclass(frozen=True)
class ModeMemory:
    mode: ModeSpec
    campaign_index: int      # the campaign's mode this configuration is of (its field path)
    nodes: list[NodeMemory]
    kv_capacity_tokens: int | None   # the fewest tokens any rank's KV pool holds
    why_unknown: str | None
    shared_host: int | None  # this host's MemAvailable when several of the mode's nodes (or replicas) share it
    context_tokens: int | None = None  # the served context a pool must hold whole (engines that refuse less)
    reserved_tokens: int = 0           # of each pool, what the engine keeps for itself
    runtime_note: str | None = None    # where the per-process figures come from (measured on its nodes or not)


def memory_request(mode: ModeSpec, spec, nodes: list[tuple[str, list[int]]], shape: ModelShape,
                   runtimes: Mapping[str, dict] | None = None) -> MemoryRequest:
    """What the engine's layout is computed from: the mode on its nodes (its `nodes:` in their order, else all),
    with what a server process was measured to hold on those of them a run probed (`runtime_probe`)."""
    by_name = dict(nodes)
    chosen = [(name, by_name[name]) for name in mode.nodes if name in by_name] if mode.nodes else nodes
    measured = {name: runtimes[name] for name, _ in chosen if runtimes and name in runtimes}
    return MemoryRequest(mode=mode, spec=spec, node_names=[n for n, _ in chosen], node_cpus=[c for _, c in chosen],
                         layers=shape.layers, max_position=shape.max_position,
                         runtime_bytes={name: int(figures["private_bytes"]) for name, figures in measured.items()},
                         shared_bytes={name: int(figures["shared_bytes"]) for name, figures in measured.items()})


def runtime_note(memory: ServerMemory, request: MemoryRequest, runtimes: Mapping[str, dict] | None) -> str | None:
    """What the plan says of the per-process figures: measured on each of the mode's nodes for its build (when,
    and how much), else the engine's fallback, naming the nodes never measured."""
    if memory.fallback_note is None:
        return None
    missing = [name for name in request.node_names if name not in request.runtime_bytes]
    if not missing:
        found = [runtimes[name] for name in request.node_names] if runtimes else []
        held = ", ".join(f"{name} {int(figures['private_bytes']) / 2 ** 20:.0f} MiB a process and "
                         f"{int(figures['shared_bytes']) / 2 ** 20:.0f} MiB shared"
                         for name, figures in zip(request.node_names, found))
        when = max((int(figures.get("measured_at") or 0) for figures in found), default=0)
        stamp = datetime.fromtimestamp(when, timezone.utc).strftime("%Y-%m-%d %H:%M UTC") if when else "?"
        return (f"memory: a server process's runtime as measured on its nodes for this build ({held}, with the "
                f"engine's server modules imported; measured by {stamp}), the other per-process figures the "
                "engine's own")
    if len(missing) == len(request.node_names):
        return memory.fallback_note
    return f"{memory.fallback_note}: measured on {len(request.node_names) - len(missing)} of its nodes, not " \
           f"on {', '.join(missing)}"


def rank_layout(engine: Engine, mode: ModeSpec, spec, nodes: list[tuple[str, list[int]]]) -> list[RankShare]:
    """Which process of the mode runs on which of these nodes, the model aside: placement does not depend on
    it, so the layout is asked with a nominal layer a stage (every rank holds layers; a process that holds
    none, such as a server in front of RPC workers, still holds none)."""
    assert engine.api.memory is not None
    return engine.api.memory.ranks(MemoryRequest(mode=mode, spec=spec, node_names=[n for n, _ in nodes],
                                                 node_cpus=[c for _, c in nodes], layers=mode.pp, max_position=0))


def ranks_of(engine: Engine, mode: ModeSpec, spec, nodes: list[tuple[str, list[int]]],
             shape: ModelShape) -> list[RankShare]:
    """The engine's processes of this mode on its nodes (its `nodes:` in their order, else all)."""
    assert engine.api.memory is not None
    return engine.api.memory.ranks(memory_request(mode, spec, nodes, shape))


def working_sets(memory: ServerMemory, request: MemoryRequest, shares: list[RankShare],
                 weights: ModelWeights) -> list[int]:
    """Each process's working set: from the shape and the settings where the engine computes it (vLLM:
    `SizedServerMemory.working_sets`), else the engine's constant per process."""
    sized = getattr(memory, "working_sets", None)
    if sized is None or weights.shape is None:
        return [memory.process_overhead_bytes] * len(shares)
    return sized(request, shares, weights.shape, weights.vocab_matrix_bytes)


def kv_capacity_tokens(weights: ModelWeights, shares: list[RankShare]) -> int | None:
    capacities = [t for share in shares if (t := share_kv_tokens(weights, share)) is not None]
    return min(capacities) if capacities else None


def mode_memory(engine: Engine, mode: ModeSpec, spec, nodes: list[tuple[str, list[int]]], weights: ModelWeights,
                available: dict[str, tuple[int | None, str]], shared_host: int | None = None,
                runtimes: Mapping[str, dict] | None = None) -> ModeMemory:
    """Per node of the mode: what each of its processes holds, the sum, and what the node has (`runtimes`: what a
    server process was measured to hold on a node for the build, by node name). Its `campaign_index` is 0: the
    caller that knows the campaign's mode sets it."""
    campaign_index = 0
    if engine.api.memory is None or weights.shape is None:
        why = weights.why or f"engine {engine.kind!r} declares no memory layout"
        return ModeMemory(mode, campaign_index, [], None, why, None)
    request = memory_request(mode, spec, nodes, weights.shape, runtimes)
    shares = engine.api.memory.ranks(request)
    per_node: dict[str, list[RankMemory]] = {}
    for share, working_set in zip(shares, working_sets(engine.api.memory, request, shares, weights)):
        per_node.setdefault(share.node, []).append(RankMemory(
            share, share_weight_bytes(weights, share), share_kv_bytes(weights, share), working_set))
    node_rows = [NodeMemory(name, ranks, *available.get(name, (None, UNKNOWN_REMOTE)))
                 for name, ranks in per_node.items()]
    host = shared_host if len(node_rows) > 1 or mode.replicas > 1 else None   # several servers, one host
    layout = engine.api.memory
    return ModeMemory(mode, campaign_index, node_rows, kv_capacity_tokens(weights, shares), None, host,
                      layout.served_context(request) if layout.served_context else None, layout.kv_reserved_tokens,
                      runtime_note(layout, request, runtimes))


def declared_memory(campaign: Campaign) -> dict[str, int]:
    """Each node's `memory_gib`, in bytes: from the provider's node specs, and from the entries of its
    nodes field (an ssh host is a node spec with more fields)."""
    specs: list[NodeSpec] = list(campaign.provider.node_specs())
    listed = getattr(campaign.provider, campaign.provider.nodes_field, None)
    if isinstance(listed, list):
        specs += [entry for entry in listed if isinstance(entry, NodeSpec)]
    return {spec.name: int(spec.memory_gib * GIB) for spec in specs if spec.memory_gib is not None}


def node_availability(campaign: Campaign, names: list[str], host_available: int | None
                      ) -> dict[str, tuple[int | None, str]]:
    """(bytes, where from) for each server node: its `memory_gib`, and for a node on this host at
    most this host's MemAvailable (which every local node shares)."""
    declared = declared_memory(campaign)
    result: dict[str, tuple[int | None, str]] = {}
    for name in names:
        given = declared.get(name)
        if campaign.provider.nodes_on_this_host and host_available is not None:
            if given is not None and given <= host_available:
                result[name] = (given, "memory_gib")
            else:
                result[name] = (host_available, "this host's MemAvailable")
        else:
            result[name] = (given, "memory_gib") if given is not None else (None, UNKNOWN_REMOTE)
    return result


def this_host_available_bytes() -> int | None:
    """This host's MemAvailable (/proc/meminfo), None where there is none."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def resolved_model_path(model: ModelSpec, base_dir: Path | None) -> Path | None:
    if isinstance(model, GeneratedModelSpec):
        return None
    path = Path(os.path.expanduser(model.path))
    return path if path.is_absolute() or base_dir is None else base_dir / path


def campaign_memory(campaign: Campaign, engine_of, nodes: list[tuple[str, list[int]]], base_dir: Path | None,
                    host_available: int | None) -> list[ModeMemory]:
    """Every configuration the campaign serves (its modes times the knob axes), with its memory.
    `engine_of`: an engine kind -> its Engine; `nodes`: the server nodes (name, CPUs for servers)."""
    available = node_availability(campaign, [name for name, _ in nodes], host_available)
    shared = host_available if campaign.provider.nodes_on_this_host else None
    index_of = {mode.name: index for index, mode in enumerate(campaign.modes)}
    weights_of: dict[str, ModelWeights] = {}
    runtimes_of: dict[str, dict[str, dict]] = {}
    result = []
    for point, mode in configuration_space(campaign):
        kind = campaign.engine_kind(mode)
        engine = engine_of(kind)
        if kind not in weights_of:
            weights_of[kind] = model_weights(campaign.model, engine, resolved_model_path(campaign.model, base_dir))
        spec = campaign.engine_spec_for(mode)
        spec_json = spec.model_dump_json()
        if spec_json not in runtimes_of:   # read once a build, not once a configuration
            runtimes_of[spec_json] = measured_runtimes(campaign, engine, spec, [name for name, _ in nodes])
        memory = mode_memory(engine, mode, spec, nodes, weights_of[kind], available, shared, runtimes_of[spec_json])
        result.append(replace(memory, campaign_index=index_of[str(point["mode"])]))
    return result


def gib(value: int | None) -> str:
    return "?" if value is None else f"{value / GIB:.2f}"


def context_problem(memory: ModeMemory) -> str | None:
    """A mode whose KV pools cannot hold one sequence of the served context, on an engine that then refuses
    to start (vLLM): what to change, in the campaign's words."""
    capacity, context = memory.kv_capacity_tokens, memory.context_tokens
    if capacity is None or context is None or capacity - memory.reserved_tokens >= context:
        return None
    usable = capacity - memory.reserved_tokens
    return (f"mode {memory.mode.name}: its KV cache holds {usable:,} tokens of a sequence, fewer than the model's "
            f"context of {context:,} (model.max_position, or the mode's --max-model-len), and the engine refuses to "
            f"start so; give it more KV (the kv_cache_blocks or kv_cache_gib knob, or engine env) or a shorter context")


def memory_problems(modes: list[ModeMemory]) -> list[tuple[int, str]]:
    """(campaign mode index, why) for every node a configuration needs more of than it has, and for
    local nodes that together need more than this host has free."""
    problems = []
    for memory in modes:
        if (short := context_problem(memory)) is not None:
            problems.append((memory.campaign_index, short))
        for node in memory.nodes:
            if node.need is not None and node.available is not None and node.need > node.available:
                problems.append((memory.campaign_index, f"mode {memory.mode.name} needs {gib(node.need)} GiB on node "
                                 f"{node.node} (weights {gib(node.part('weights'))}, KV {gib(node.part('kv'))}, "
                                 f"working set {gib(node.part('working_set'))}) but {gib(node.available)} GiB is "
                                 f"free there ({node.available_from})"))
        needs = [node.need for node in memory.nodes]
        if memory.shared_host is not None and None not in needs:
            # every replica is a server like the first (whose nodes these are), all of them on this host
            replicas = memory.mode.replicas
            total = sum(n for n in needs if n is not None) * replicas
            names = ", ".join(n.node for n in memory.nodes)
            where = f"nodes {names}, which share this host"
            if replicas > 1:
                where = f"{replicas} replicas of {gib(total // replicas)} (the first on {names}), all on this host"
            if total > memory.shared_host and not any(p[1].startswith(f"mode {memory.mode.name} ") for p in problems):
                problems.append((memory.campaign_index, f"mode {memory.mode.name} needs {gib(total)} GiB on {where}, "
                                 f"but {gib(memory.shared_host)} GiB is free here (MemAvailable)"))
    return problems


def largest_rank_weight_bytes(memory: ModeMemory) -> int | None:
    weights = [rank.weights for node in memory.nodes for rank in node.ranks if rank.weights is not None]
    return max(weights) if weights else None


def startup_timeout_s(configured_s: float, rank_weight_bytes: int | None, emulated: bool,
                      predicted_s: float | None = None, margin: float = 2.0) -> float:
    """The engine block's `ready_timeout_s` plus the time a rank takes to load its weights at a
    conservative rate (slower under emulation): an 8B model must not time out where the tiny one did
    not, and the tiny one's few megabytes add nothing. With a predicted start-up (servebench/prediction/
    startup.py: the engine's start, the weights at the node's bandwidth, the profile run at its matmul
    peak, the compile), at least `margin` times it: a bytes-a-second rule misses a profile run that a
    dtype without kernels on the node makes last many minutes."""
    rate = EMULATED_LOAD_BYTES_PER_S if emulated else LOAD_BYTES_PER_S
    timeout = configured_s + (float(int(rank_weight_bytes // rate)) if rank_weight_bytes else 0.0)
    if predicted_s is not None:
        timeout = max(timeout, float(int(margin * predicted_s)))
    return timeout
