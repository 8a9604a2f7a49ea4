"""Where a vLLM mode's workers go and which cores each rank's OpenMP threads use (pure
arithmetic, no I/O).

- mp: every worker on the first node large enough;
- ray: workers spread evenly over all nodes (the plugin's placement group is SPREAD and
  orders ranks by node), so TP groups stay inside a node and PP stages cross nodes;
- mp-multinode: one worker on each of the first tp x pp nodes (vLLM's native launcher);
- data parallel (dp > 1): dp engines of tp x pp workers. With mp every engine is on the one
  node; with mp-multinode and ray the engines spread over the nodes, each engine's workers on
  one node (vLLM's `--data-parallel-size-local` per node, its Ray placement groups
  STRICT_PACK), the first nodes taking one more when dp does not divide.

vLLM on CPU must be told which cores each rank's OpenMP threads use
(`VLLM_CPU_OMP_THREADS_BIND`, one list per local rank separated by '|'); `auto` fails when
ranks outnumber NUMA nodes.
"""

from __future__ import annotations

import math

from servebench.config.campaign import ModeSpec
from servebench.cpus import format_cpu_list
from servebench.platform.numa import Layout, describe, rank_cores

EXECUTORS = ("mp", "ray", "mp-multinode")  # the first is a mode's default


def workers_per_node(executor: str, world_size: int, node_cpus: list[list[int]], engine_size: int | None = None
                     ) -> list[int]:
    """How many of the mode's workers each node runs, in node order. `engine_size`: the workers of one
    data-parallel engine (tp x pp) when the mode has dp > 1 engines (`world_size` = dp x engine_size);
    None: one engine of `world_size` workers."""
    n = len(node_cpus)
    engine = engine_size or world_size
    if executor == "mp":
        first = mp_node_index(world_size, node_cpus)
        return [world_size if i == first else 0 for i in range(n)]
    if executor in ("mp-multinode", "ray") and world_size > engine:  # dp engines, each on one node
        return [count * engine for count in engines_per_node(world_size // engine, n)]
    if executor == "mp-multinode":
        # one worker per node (a mode needing more nodes is refused at plan time: mode_problem); more workers
        # than nodes only comes from a data-parallel mode described without its engine size, whose engines
        # this spreads as evenly as the workers allow
        return engines_per_node(world_size, n) if world_size > n else [1 if i < world_size else 0 for i in range(n)]
    if executor == "ray":
        base, extra = divmod(world_size, n)
        return [base + (1 if i < extra else 0) for i in range(n)]
    raise ValueError(f"unknown executor {executor!r}")


def engines_per_node(engines: int, nodes: int) -> list[int]:
    """`engines` spread evenly over `nodes`, the first nodes taking one more: [2, 1] for 3 engines on 2
    nodes, [1, 1, 0] for 2 on 3."""
    base, extra = divmod(engines, nodes)
    return [base + (1 if i < extra else 0) for i in range(nodes)]


def dp_ranks_per_node(mode: ModeSpec, node_cpus: list[list[int]]) -> list[int]:
    """The data-parallel engines each node runs (vLLM's --data-parallel-size-local), in node order."""
    counts = workers_per_node(mode.executor, mode.world_size, node_cpus, mode.engine_size)
    return [count // mode.engine_size for count in counts]


def mp_node_index(world_size: int, node_cpus: list[list[int]]) -> int:
    """The node an 'mp' mode runs on: the first with a CPU per worker (else the first: oversubscribed)."""
    return next((i for i, cpus in enumerate(node_cpus) if len(cpus) >= world_size), 0)


def ray_slots_per_node(ray_world_sizes: list[int], nodes: int, dp_modes: tuple[ModeSpec, ...] = ()) -> int:
    """Ray --num-cpus for every node: the most workers any ray mode puts on one node. A data-parallel
    mode's engines (`--data-parallel-backend ray`) each take a placement group of their tp x pp workers
    plus one CPU for the engine core, packed on one node."""
    dp_slots = [max(engines_per_node(mode.dp, nodes)) * (mode.engine_size + 1) for mode in dp_modes]
    return max([math.ceil(size / nodes) for size in ray_world_sizes] + dp_slots or [1])


def node_bindings(executor: str, world_size: int, node_names: list[str], node_cpus: list[list[int]],
                  engine_size: int | None = None, node_numa: list[Layout] | None = None) -> dict[str, str]:
    """VLLM_CPU_OMP_THREADS_BIND per node for this mode (nodes without workers left out): one core list
    per local worker, ordered [DP, PP, TP] as vLLM slices it (each local DP engine takes the next tp x pp),
    each inside one NUMA node of the node's layout where the ranks can be (servebench/platform/numa.py)."""
    counts = workers_per_node(executor, world_size, node_cpus, engine_size)
    layouts = node_numa or [[] for _ in node_names]
    return {name: omp_threads_bind(cpus, count, layout)
            for name, cpus, count, layout in zip(node_names, node_cpus, counts, layouts) if count}


def numa_notes(executor: str, world_size: int, node_names: list[str], node_cpus: list[list[int]],
               engine_size: int | None, node_numa: list[Layout]) -> list[str]:
    """What the plan says of each node with more than one NUMA node: each rank's cores and NUMA node, and
    the NUMA nodes a rank spans where it must."""
    counts = workers_per_node(executor, world_size, node_cpus, engine_size)
    return [f"node {name}: {text}" for name, cpus, count, layout in zip(node_names, node_cpus, counts, node_numa)
            if count and (text := describe(rank_cores(cpus, count, layout), layout))]


def omp_threads_bind(cpus: list[int], ranks: int, layout: Layout | None = None) -> str:
    """The VLLM_CPU_OMP_THREADS_BIND value for `ranks` local ranks on these cores: '0|1', '0-1|2-3'."""
    return "|".join(format_cpu_list(rank.cpus) for rank in rank_cores(cpus, ranks, layout or []))


def size_text(mode: ModeSpec) -> str:
    """'tp x pp = 4', or with data parallelism 'dp x tp x pp = 2 x 2 x 1 = 4': the mode's workers, named."""
    if mode.dp == 1:
        return f"tp x pp = {mode.world_size}"
    return f"dp x tp x pp = {mode.dp} x {mode.tp} x {mode.pp} = {mode.world_size}"


# a `replicas` mode is N servers each on nodes of its own (servebench/serving/balancer.py); executor 'ray' runs on
# the campaign's one Ray cluster over every node, whose placement groups put a server's workers on any of them
RAY_REPLICAS = ("replicas: executor 'ray' places a server's workers anywhere on the campaign's one Ray cluster "
                "(every node), so the replicas would not each run on nodes of their own; use executor 'mp' "
                "(or 'mp-multinode') for replicas")


def mode_problem(mode: ModeSpec, nodes: list[list[int]], names: list[str]) -> str | None:
    """A mode the nodes' server CPUs cannot hold (CPU counts are waived for oversubscribed modes), or whose
    data or expert parallelism vLLM 0.32 on CPU cannot serve."""
    if mode.replicas > 1 and mode.executor == "ray":
        return RAY_REPLICAS
    problem = _parallel_problem(mode, len(nodes))
    if problem:
        return problem
    total = sum(len(cpus) for cpus in nodes)
    if mode.executor == "mp-multinode" and mode.dp == 1 and mode.world_size > len(nodes):
        return (f"executor 'mp-multinode' runs exactly one worker per node (vLLM's native multi-node launcher "
                f"counts local ranks by GPU count, which is 1 on CPU), so tp x pp = {mode.world_size} needs "
                f"{mode.world_size} nodes and the campaign has {len(nodes)}; use executor 'ray' for several "
                "workers per node")
    if mode.executor == "mp-multinode" and mode.world_size < 2:
        return "executor 'mp-multinode' needs tp x pp >= 2 (one worker per node on two or more nodes)"
    if mode.oversubscribe:
        return None
    hint = " (or set oversubscribe: true on the mode to let ranks share cores)"
    if mode.world_size > total:
        return (f"{size_text(mode)} workers but the nodes give {total} CPUs in all to servers "
                f"(one worker needs at least one CPU){hint}")
    if mode.executor == "mp" and mode.world_size > max(len(cpus) for cpus in nodes):
        return (f"executor 'mp' runs on one node, but {size_text(mode)} exceeds the largest node's "
                f"{max(len(cpus) for cpus in nodes)} CPUs for servers{hint}")
    if mode.executor in ("ray", "mp-multinode"):
        counts = workers_per_node(mode.executor, mode.world_size, nodes, mode.engine_size)
        how = "spreads" if mode.dp == 1 else f"puts {mode.dp} engines of {mode.engine_size} workers,"
        for index, (count, cpus) in enumerate(zip(counts, nodes)):
            if count > len(cpus):
                return (f"executor '{mode.executor}' {how} {mode.world_size} workers over {len(nodes)} nodes, "
                        f"{count} on node {names[index]}, which has {len(cpus)} CPUs for servers{hint}")
    return None


def _parallel_problem(mode: ModeSpec, nodes: int) -> str | None:
    """Data and expert parallelism vLLM 0.32's CPU backend cannot serve, named with the reason."""
    if mode.ep and mode.dp * mode.tp < 2:
        return ("ep: true splits the routed experts over the dp x tp ranks, and this mode has one "
                "(vLLM ignores --enable-expert-parallel when dp x tp = 1): give it tp >= 2 or dp >= 2")
    if mode.pp > 1 and mode.knobs.get("enforce_eager") is True:
        return PP_EAGER
    if mode.dp == 1:
        return None
    if mode.executor == "ray":
        return RAY_DP
    if mode.executor == "mp-multinode" and nodes < 2:
        return ("dp with executor 'mp-multinode' spreads the data-parallel engines over the nodes (the first "
                "node's API server, --headless engines on the others) and the mode has one node: use executor "
                "'mp' for data parallelism on one node")
    return None


# Pipeline parallelism with enforce_eager, measured over Ray across two testbed hosts on a dense Llama-3.2 shape
# and a DeepSeek-R1 shape, bf16 (runs 20261128T063116Z-6f4382 and 20261128T061733Z-f01dac): the server starts and
# the gate's first request kills the second stage's worker (`assert self.intermediate_tensors is not None` in
# GPUModelRunner.sync_and_gather_intermediate_tensors), then EngineDeadError. CPUModelRunner.warming_up_model
# returns at once when compilation is off (enforce_eager), and only that warm-up's dummy run allocates a later
# stage's intermediate-tensor buffer; compiled (the default), the same layout serves (campaigns/ssh-testbed.yaml).
PP_EAGER = ("pp > 1 with enforce_eager: true does not serve on vLLM 0.32's CPU backend: without compilation the "
            "CPU runner skips its warm-up, which is what allocates a later stage's intermediate tensors, and the "
            "first request kills that stage's worker (AssertionError in "
            "GPUModelRunner.sync_and_gather_intermediate_tensors; measured, docs/parallel-modes.md); drop "
            "enforce_eager from this mode's knobs")


# vLLM's Ray DP backend (--data-parallel-backend ray) on the campaign's Ray cluster, measured on two local Ray
# nodes with the tiny Llama (docs/parallel-modes.md): vLLM placed one EngineCoreActor with its worker on each
# node and the workers loaded the weights, then every engine and its worker waited on each other at the
# executor's start barrier until the server's start timeout. The launch (launch.py) stays for a vLLM or
# plugin that gets past it.
RAY_DP = ("dp > 1 with executor 'ray' (vLLM's --data-parallel-backend ray) does not start on vLLM 0.32's CPU "
          "backend with servebench's CPU-Ray plugin: the engines (EngineCoreActor, one per node) and their "
          "workers load the weights, then hang at the executor's start barrier (RayExecutorV2._init_executor: "
          "the engine in MessageQueue.wait_until_ready for its worker's subscription, shm_broadcast.py:687; the "
          "worker for the engine's READY, shm_broadcast.py:703; measured, docs/parallel-modes.md); use executor "
          "mp (one node) or mp-multinode (across nodes) for data parallelism")
