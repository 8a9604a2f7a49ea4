"""Where a mode's workers go and which cores each may use (pure arithmetic, no I/O).

- mp: every worker on the first node large enough;
- ray: workers spread evenly over all nodes (the plugin's placement group is SPREAD and
  orders ranks by node), so TP groups stay inside a node and PP stages cross nodes;
- mp-multinode: one worker on each of the first tp x pp nodes (vLLM's native launcher).
"""

from __future__ import annotations

import math

from servebench.cpus import omp_threads_bind


def workers_per_node(executor: str, world_size: int, node_cpus: list[list[int]]) -> list[int]:
    """How many of the mode's workers each node runs, in node order."""
    n = len(node_cpus)
    if executor == "mp":
        first = next(i for i, cpus in enumerate(node_cpus) if len(cpus) >= world_size)
        return [world_size if i == first else 0 for i in range(n)]
    if executor == "mp-multinode":
        if world_size > n:
            raise ValueError(f"mp-multinode runs one worker per node: {world_size} workers need {world_size} nodes")
        return [1 if i < world_size else 0 for i in range(n)]
    if executor == "ray":
        base, extra = divmod(world_size, n)
        return [base + (1 if i < extra else 0) for i in range(n)]
    raise ValueError(f"unknown executor {executor!r}")


def ray_slots_per_node(ray_world_sizes: list[int], nodes: int) -> int:
    """Ray --num-cpus for every node: the most workers any ray mode puts on one node."""
    return max([math.ceil(size / nodes) for size in ray_world_sizes] or [1])


def node_bindings(executor: str, world_size: int, node_names: list[str], node_cpus: list[list[int]]) -> dict[str, str]:
    """VLLM_CPU_OMP_THREADS_BIND per node for this mode (nodes without workers left out)."""
    counts = workers_per_node(executor, world_size, node_cpus)
    return {name: omp_threads_bind(cpus, count)
            for name, cpus, count in zip(node_names, node_cpus, counts) if count}
