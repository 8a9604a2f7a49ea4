"""Where a vLLM mode's workers go and which cores each rank's OpenMP threads use (pure
arithmetic, no I/O).

- mp: every worker on the first node large enough;
- ray: workers spread evenly over all nodes (the plugin's placement group is SPREAD and
  orders ranks by node), so TP groups stay inside a node and PP stages cross nodes;
- mp-multinode: one worker on each of the first tp x pp nodes (vLLM's native launcher).

vLLM on CPU must be told which cores each rank's OpenMP threads use
(`VLLM_CPU_OMP_THREADS_BIND`, one list per local rank separated by '|'); `auto` fails when
ranks outnumber NUMA nodes.
"""

from __future__ import annotations

import math

from servebench.cpus import format_cpu_list, split_cpus
from servebench.spec.campaign import ModeSpec

EXECUTORS = ("mp", "ray", "mp-multinode")  # the first is a mode's default


def workers_per_node(executor: str, world_size: int, node_cpus: list[list[int]]) -> list[int]:
    """How many of the mode's workers each node runs, in node order."""
    n = len(node_cpus)
    if executor == "mp":
        first = mp_node_index(world_size, node_cpus)
        return [world_size if i == first else 0 for i in range(n)]
    if executor == "mp-multinode":
        if world_size > n:
            raise ValueError(f"mp-multinode runs one worker per node: {world_size} workers need {world_size} nodes")
        return [1 if i < world_size else 0 for i in range(n)]
    if executor == "ray":
        base, extra = divmod(world_size, n)
        return [base + (1 if i < extra else 0) for i in range(n)]
    raise ValueError(f"unknown executor {executor!r}")


def mp_node_index(world_size: int, node_cpus: list[list[int]]) -> int:
    """The node an 'mp' mode runs on: the first with a CPU per worker (else the first: oversubscribed)."""
    return next((i for i, cpus in enumerate(node_cpus) if len(cpus) >= world_size), 0)


def ray_slots_per_node(ray_world_sizes: list[int], nodes: int) -> int:
    """Ray --num-cpus for every node: the most workers any ray mode puts on one node."""
    return max([math.ceil(size / nodes) for size in ray_world_sizes] or [1])


def node_bindings(executor: str, world_size: int, node_names: list[str], node_cpus: list[list[int]]) -> dict[str, str]:
    """VLLM_CPU_OMP_THREADS_BIND per node for this mode (nodes without workers left out)."""
    counts = workers_per_node(executor, world_size, node_cpus)
    return {name: omp_threads_bind(cpus, count)
            for name, cpus, count in zip(node_names, node_cpus, counts) if count}


def omp_threads_bind(cpus: list[int], ranks: int) -> str:
    """The VLLM_CPU_OMP_THREADS_BIND value for `ranks` local ranks on these cores: '0|1', '0-1|2-3'."""
    return "|".join(format_cpu_list(group) for group in split_cpus(cpus, ranks))


def mode_problem(mode: ModeSpec, nodes: list[list[int]], names: list[str]) -> str | None:
    """A mode the nodes' server CPUs cannot hold (CPU counts are waived for oversubscribed modes)."""
    total = sum(len(cpus) for cpus in nodes)
    if mode.executor == "mp-multinode" and mode.world_size > len(nodes):
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
        return (f"tp x pp = {mode.world_size} workers but the nodes give {total} CPUs in all to servers "
                f"(one worker needs at least one CPU){hint}")
    if mode.executor == "mp" and mode.world_size > max(len(cpus) for cpus in nodes):
        return (f"executor 'mp' runs on one node, but tp x pp = {mode.world_size} exceeds the largest node's "
                f"{max(len(cpus) for cpus in nodes)} CPUs for servers{hint}")
    if mode.executor == "ray":
        for index, (count, cpus) in enumerate(zip(workers_per_node("ray", mode.world_size, nodes), nodes)):
            if count > len(cpus):
                return (f"executor 'ray' spreads {mode.world_size} workers over {len(nodes)} nodes, {count} on "
                        f"node {names[index]}, which has {len(cpus)} CPUs for servers{hint}")
    return None


