"""What a vLLM mode's ranks hold: each worker its pipeline stage's layers split TP ways, on the nodes
`placement.workers_per_node` puts it, and a KV cache of its own of `VLLM_CPU_KVCACHE_SPACE` GiB
(what the launch sets: the engine block's or mode's env, the `kv_cache_gib` knob last) or, with the
`kv_cache_blocks` knob, that many blocks of 128 tokens of its layers. What a token of the pool takes is the
model's (servebench/serving/memory.py): with multi-head latent attention (DeepSeek) the latent and the RoPE
key, 576 values a layer on every TP rank, which CPU_MLA keeps in blocks of 16 tokens (vLLM forces it): the
`kv_cache_blocks` count is then 16 tokens a block, which this layout cannot see (the request carries no
model), so it still says 128."""

from __future__ import annotations

from servebench.engines.base import MemoryRequest, RankShare, ServerMemory, stage_layers
from servebench.engines.vllm.knobs import knob_env
from servebench.engines.vllm.launch import DEFAULT_KVCACHE_GIB
from servebench.engines.vllm.placement import workers_per_node

GIB = 1024 ** 3
BLOCK_TOKENS = 128  # a KV block on CPU (the kv_cache_blocks knob)
# Measured (facts file, 2-core x86, vLLM 0.32): ~1.8 GB RSS per worker with 1 GiB of KV cache for the
# tiny model, so ~0.73 GB beyond KV and weights; rounded up to 1 GiB to cover the API server's and the
# engine core's processes, which the measurement does not separate. Under qemu-user (aarch64) the same
# server was ~4.4 GB: an emulated node needs more than this says.
PROCESS_OVERHEAD_BYTES = GIB


def kv_cache_gib(request: MemoryRequest) -> float:
    """The KV cache GiB each rank reserves, in the launch's order of precedence."""
    env = {"VLLM_CPU_KVCACHE_SPACE": DEFAULT_KVCACHE_GIB, **request.spec.env, **request.mode.env,
           **knob_env(request.mode.knobs)}
    return float(env["VLLM_CPU_KVCACHE_SPACE"])


def rank_shares(request: MemoryRequest) -> list[RankShare]:
    """Every worker of the mode, in rank order (stage-major, as vLLM numbers them), on its node."""
    mode = request.mode
    counts = workers_per_node(mode.executor, mode.world_size, request.node_cpus)
    blocks = mode.knobs.get("kv_cache_blocks")
    pool_tokens = int(blocks) * BLOCK_TOKENS if blocks is not None else None
    pool_bytes = None if pool_tokens is not None else int(kv_cache_gib(request) * GIB)
    nodes = [name for name, count in zip(request.node_names, counts) for _ in range(count)]
    shares = []
    for rank, node in enumerate(nodes):
        stage = rank // mode.tp
        shares.append(RankShare(node=node, label=f"rank{rank}", tp=mode.tp,
                                layers=stage_layers(request.layers, mode.pp, stage),
                                embedding=stage == 0, head=stage == mode.pp - 1,
                                kv_pool_bytes=pool_bytes, kv_pool_tokens=pool_tokens))
    return shares


SERVER_MEMORY = ServerMemory(process_overhead_bytes=PROCESS_OVERHEAD_BYTES, ranks=rank_shares)
