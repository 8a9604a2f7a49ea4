"""What a llama.cpp mode's processes hold. Executor `local`: one `llama-server` with every layer and
the whole KV cache. Executor `rpc`: the layers split evenly over the `pp` `ggml-rpc-server` workers
(`--tensor-split 1,1,...`, round robin over the nodes as the launch places them), each with its
layers' KV cells (a layer's cache lives on the device of the layer) and the last with the output head
(`-ngl 999` offloads it); `llama-server` keeps the token embedding. The KV cache is `ctx_size` cells
(`-c`; unset or 0: the model's context length), rounded up to 256, per slot when the slots do not
share one pool (docs/design/llamacpp-server.md §1); kept in f16, llama.cpp's default cache type."""

from __future__ import annotations

from servebench.engines.base import MemoryRequest, RankShare, ServerMemory, stage_layers

CELL_ROUNDING = 256
AUTO_SLOTS = 4  # `-np` unset: 4 slots sharing one pool
# Measured: a tiny llama-server peaks at 20 MB RSS (63 MB under qemu-user) in the node samples of the
# test suite's runs; its compute buffers grow with vocabulary x ubatch (llama.cpp logs ~260 MiB for
# an 8B Llama 3 at ubatch 512): 512 MiB per process is a conservative bound.
PROCESS_OVERHEAD_BYTES = 512 * 1024 ** 2


def _round_up(value: int, step: int = CELL_ROUNDING) -> int:
    return -(-value // step) * step


def ctx_size(request: MemoryRequest) -> int:
    """The `-c` asked for: the knob, else the mode's own `-c`/`--ctx-size` argument, else 0."""
    value = request.mode.knobs.get("ctx_size")
    args = request.mode.args
    for flag in ("-c", "--ctx-size"):
        if value is None and flag in args[:-1]:
            value = args[args.index(flag) + 1]
    return int(value or 0)


def kv_cells(request: MemoryRequest) -> int:
    """The KV cells of all slots: one pool of -c when unified (the default with slots unset), else
    `parallel` pools of -c / parallel, each rounded up to 256."""
    cells = _round_up(ctx_size(request) or request.max_position)
    parallel = request.mode.knobs.get("parallel")
    unified = request.mode.knobs.get("kv_unified")
    if unified is None:
        unified = parallel is None
    if unified:
        return cells
    slots = int(parallel or AUTO_SLOTS)
    return _round_up(cells // slots) * slots


def rank_shares(request: MemoryRequest) -> list[RankShare]:
    mode, names, layers = request.mode, request.node_names, request.layers
    cells = kv_cells(request)
    if mode.executor != "rpc":
        return [RankShare(node=names[0], label="server", layers=layers, embedding=True, head=True,
                          kv_pool_tokens=cells)]
    workers = [RankShare(node=names[index % len(names)], label=f"rpc{index}",
                         layers=stage_layers(layers, mode.pp, index), head=index == mode.pp - 1,
                         kv_pool_tokens=cells) for index in range(mode.pp)]
    return [RankShare(node=names[0], label="server", layers=0, embedding=True), *workers]


SERVER_MEMORY = ServerMemory(process_overhead_bytes=PROCESS_OVERHEAD_BYTES, ranks=rank_shares,
                             kv_cache_dtype="float16")
