"""What a vLLM mode's processes hold: each worker its pipeline stage's layers split TP ways, on the nodes
`placement.workers_per_node` puts it, and a KV cache of its own of `VLLM_CPU_KVCACHE_SPACE` GiB
(what the launch sets: the engine block's or mode's env, the `kv_cache_gib` knob last) or, with the
`kv_cache_blocks` knob, that many blocks of 128 tokens of its layers. With `dp: N` there are N engines of
tp x pp workers each, every engine with the whole model (its own embedding, layers and head) and its own
KV pools. What a token of the pool takes is the model's (servebench/planning/memory.py): with multi-head
latent attention (DeepSeek) the latent and the RoPE key, 576 values a layer on every TP rank, which
CPU_MLA keeps in blocks of 16 tokens (vLLM forces it): the `kv_cache_blocks` count is then 16 tokens a
block, which this layout cannot see (the request carries no model), so it still says 128.

Each process's working set beyond its weights and KV pool (`working_sets`, docs/memory.md) follows from
the shape and the settings, measured per process on a 2-core x86 host at the Qwen2-1.5B shape and the
tiny one: the runtime (what a node measured for the build, where a run probed it: `process_runtime`) of
every process that imports torch and vLLM (the API server, the DP coordinator,
each engine core, each worker), and in each worker the second copy of its vocabulary matrices (vLLM's
CPU backend packs the embedding and the head for oneDNN and keeps the originals: the embedding needs
them for its lookup), one step's activations at `max_num_batched_tokens` and the sampler's float32
logits of `max_num_seqs` sequences over the whole vocabulary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from servebench.engines.base import MemoryRequest, RankShare, ServerMemory, stage_layers
from servebench.engines.vllm.knobs import knob_env
from servebench.engines.vllm.placement import workers_per_node
from servebench.models.shapes import ModelShape

DEFAULT_KVCACHE_GIB = "1"   # VLLM_CPU_KVCACHE_SPACE the launch sets when nothing else does
GIB = 1024 ** 3
MIB = 1024 ** 2
BLOCK_TOKENS = 128  # a KV block on CPU (the kv_cache_blocks knob)
# vLLM 0.32's defaults on CPU for the OpenAI server (engine/arg_utils.py get_batch_defaults), per engine of
# world size tp x pp: tokens a scheduler step may hold and sequences it may batch
DEFAULT_BATCHED_TOKENS_PER_WORKER = 2048
DEFAULT_SEQS_PER_WORKER = 128
# Measured (docs/memory.md: smaps_rollup Pss of every process of served vLLM 0.32 servers, 2-core x86, torch
# 2.13): a python process with torch and vLLM imported holds 0.41-0.47 GiB whatever the model (the tiny
# model's API server, DP coordinator, engine cores and workers less their KV pool); rounded up
PROCESS_RUNTIME_BYTES = 512 * MIB
# ... and grows with the vocabulary where the tokenizer lives: at the Qwen2-1.5B shape (151,936 tokens) the API
# server held 0.48 GiB more than at the tiny model's 1,024 and the engine core 0.15 GiB more (3.4 and 1.1 KiB a
# token); rounded up
API_SERVER_BYTES_PER_TOKEN = 4 * 1024
ENGINE_CORE_BYTES_PER_TOKEN = 1536
LOGITS_COPIES = 4                   # float32 logits, their softmax / log-softmax and the sampler's copies
# the working set a process when the shape is not known (a local model without a readable config.json)
PROCESS_OVERHEAD_BYTES = 2 * GIB
# What the plan says of the figures above: they are not this build's on this host, but the ones it falls back on
WORKING_SET_NOTE = ("memory: each process's working set from the per-process figures measured for vLLM 0.32 "
                    "(torch 2.13) on a 2-core x86 host (a process's runtime 512 MiB, 4 KiB per vocabulary token "
                    "in the API server, 1.5 KiB in the engine core; 2 GiB a process for a model of unknown shape; "
                    "docs/memory.md): the fallback, not measured for this build on these nodes (a run measures "
                    "the runtime on each node and the next plan uses it)")


def kv_cache_gib(request: MemoryRequest) -> float:
    """The KV cache GiB each rank reserves, in the launch's order of precedence."""
    env = {"VLLM_CPU_KVCACHE_SPACE": DEFAULT_KVCACHE_GIB, **request.spec.env, **request.mode.env,
           **knob_env(request.mode.knobs)}
    return float(env["VLLM_CPU_KVCACHE_SPACE"])


def rank_shares(request: MemoryRequest) -> list[RankShare]:
    """Every worker of the mode, in rank order (DP engine, then stage, then TP rank, as vLLM numbers
    them), on its node: each data-parallel engine holds the whole model over its own tp x pp workers."""
    mode = request.mode
    counts = workers_per_node(mode.executor, mode.world_size, request.node_cpus, mode.engine_size)
    blocks = mode.knobs.get("kv_cache_blocks")
    pool_tokens = int(blocks) * BLOCK_TOKENS if blocks is not None else None
    pool_bytes = None if pool_tokens is not None else int(kv_cache_gib(request) * GIB)
    nodes = [name for name, count in zip(request.node_names, counts) for _ in range(count)]
    shares = []
    for rank, node in enumerate(nodes):
        engine, local = divmod(rank, mode.engine_size)
        stage = local // mode.tp
        label = f"rank{rank}" if mode.dp == 1 else f"dp{engine}.rank{local}"
        shares.append(RankShare(node=node, label=label, tp=mode.tp,
                                layers=stage_layers(request.layers, mode.pp, stage),
                                embedding=stage == 0, head=stage == mode.pp - 1,
                                kv_pool_bytes=pool_bytes, kv_pool_tokens=pool_tokens))
    return shares


def batch_limits(request: MemoryRequest) -> tuple[int, int]:
    """(tokens a step holds, sequences a step batches): the knobs, else vLLM's CPU defaults for an engine."""
    knobs, engine = request.mode.knobs, request.mode.engine_size
    tokens = knobs.get("max_num_batched_tokens") or DEFAULT_BATCHED_TOKENS_PER_WORKER * engine
    seqs = knobs.get("max_num_seqs") or DEFAULT_SEQS_PER_WORKER * engine
    return int(tokens), int(seqs)


def activation_values_per_token(shape: ModelShape, tp: int) -> int:
    """Values one token keeps alive in a decoder layer's forward pass on one TP rank: the residual, the
    hidden state and its norm, q/k/v and the attention's output, the MLP's gate and up projections and
    their product (a MoE layer's experts run one after another: one expert's width at a time)."""
    inner = 3 * (shape.expert_intermediate if shape.is_moe else shape.intermediate) // tp
    attention = (2 * shape.heads + 2 * shape.kv_heads) * shape.head_size // tp
    return 3 * shape.hidden + attention + inner


def worker_working_set(share: RankShare, request: MemoryRequest, shape: ModelShape, element_bytes: float) -> int:
    """One worker's bytes beyond its weights and KV pool: the runtime, the packed second copy of the
    vocabulary matrices it holds, one step's activations and, on a rank with the head, the logits
    (`element_bytes`: the served dtype's, which a quantized model's vocabulary and activations keep)."""
    tokens, seqs = batch_limits(request)
    vocab_matrix = shape.vocab_size * shape.hidden / share.tp * element_bytes
    copies = (1 if share.embedding else 0) + (1 if share.head else 0)
    if shape.tie_embeddings and share.embedding and share.head:
        copies = 1
    activations = tokens * activation_values_per_token(shape, share.tp) * element_bytes if share.layers else 0
    logits = seqs * shape.vocab_size * 4 * LOGITS_COPIES if share.head else 0
    return round(process_runtime(request, share.node) + copies * vocab_matrix + activations + logits)


def process_runtime(request: MemoryRequest, node: str) -> int:
    """What a process holds of its own with torch and vLLM imported: measured on the node for the build, else the
    figure above (a served process's Pss, its share of the libraries in it)."""
    return request.runtime_bytes.get(node, PROCESS_RUNTIME_BYTES)


def working_sets(request: MemoryRequest, shares: list[RankShare], shape: ModelShape, element_bytes: float
                 ) -> list[int]:
    """Each worker's working set, with the mode's other processes counted on the rank beside them: the
    API server (and with dp > 1 the DP coordinator) on rank 0, each engine's core process on the
    engine's first worker (servebench launches with a distributed executor, so even TP=1 has its worker
    in a process of its own beside the engine core), and with `mp-multinode` the `--headless` launcher
    on every other node's first worker."""
    mode = request.mode
    sets, nodes_seen = [], set()
    for rank, share in enumerate(shares):
        runtime = process_runtime(request, share.node)
        others = 0
        if rank == 0:   # the API server, and the DP coordinator
            others += runtime + shape.vocab_size * API_SERVER_BYTES_PER_TOKEN + (runtime if mode.dp > 1 else 0)
        elif mode.executor == "mp-multinode" and share.node not in nodes_seen:
            others += runtime                                                        # a headless node's launcher
        if rank % mode.engine_size == 0:
            others += runtime + shape.vocab_size * ENGINE_CORE_BYTES_PER_TOKEN
        if share.node not in nodes_seen:   # the libraries the node's processes share, once (where measured)
            others += request.shared_bytes.get(share.node, 0)
        nodes_seen.add(share.node)
        sets.append(worker_working_set(share, request, shape, element_bytes) + others)
    return sets


@dataclass(frozen=True)
class SizedServerMemory(ServerMemory):
    """`ServerMemory` whose working set follows from the shape and the settings (`working_sets`); the
    constant `process_overhead_bytes` stays for a model whose shape is not known."""

    working_sets: Callable[[MemoryRequest, list[RankShare], ModelShape, float], list[int]] | None = None


# vLLM's block pool keeps its first block as the null block (v1 `BlockPool.null_block`): 16 blocks hold 15
# blocks of tokens, and the engine refuses to start when they cannot hold one sequence of the model's
# context ("To serve at least one request with the model's max seq len (2048), (0.25 GiB KV cache is needed,
# which is larger than the available KV cache memory (0.23 GiB) ... maximum model length is 1920", measured)
def served_context(request: MemoryRequest) -> int:
    """The context vLLM serves: the mode's `--max-model-len` when its args give one, else the model's."""
    args = request.mode.args
    for index, arg in enumerate(args):
        if arg == "--max-model-len" and index + 1 < len(args):
            return int(args[index + 1])
        if arg.startswith("--max-model-len="):
            return int(arg.split("=", 1)[1])
    return request.max_position


SERVER_MEMORY = SizedServerMemory(process_overhead_bytes=PROCESS_OVERHEAD_BYTES, ranks=rank_shares,
                                  kv_reserved_tokens=BLOCK_TOKENS, served_context=served_context,
                                  working_sets=working_sets, fallback_note=WORKING_SET_NOTE)
