"""Where a mode's workers and the load generator go, and which cores each may use (pure
arithmetic, no I/O).

- the load generator gets CPUs of its own (the campaign's `load.client.cpus`, or the
  host's CPUs no node uses), and every server process stays off them: a generator that
  shares cores with the server starves exactly when the server is busiest;
- mp: every worker on the first node large enough;
- ray: workers spread evenly over all nodes (the plugin's placement group is SPREAD and
  orders ranks by node), so TP groups stay inside a node and PP stages cross nodes;
- mp-multinode: one worker on each of the first tp x pp nodes (vLLM's native launcher).
"""

from __future__ import annotations

import math
from typing import Literal, NamedTuple

from servebench.cpus import format_cpu_list, omp_threads_bind


class ClientPlacement(NamedTuple):
    """The load generator's CPUs: `cpus` None means not pinned (it shares the servers' cores)."""

    cpus: list[int] | None
    why: str

    @property
    def dedicated(self) -> bool:
        return self.cpus is not None

    def describe(self) -> str:
        where = f"CPUs {format_cpu_list(self.cpus)} of its own" if self.cpus else "no CPU of its own (shared)"
        return f"load generator: {where} ({self.why})"


def place_client(requested: list[int] | Literal["auto", "shared"], node_cpus: list[list[int]],
                 host_cpus: set[int]) -> ClientPlacement:
    """Which CPUs the load generator gets on the orchestrator's host."""
    if requested == "shared":
        return ClientPlacement(None, "load.client.cpus: shared")
    if requested == "auto":
        free = sorted(host_cpus - {cpu for cpus in node_cpus for cpu in cpus})
        if free:
            return ClientPlacement(free, "auto: the host's CPUs that no node uses")
        return ClientPlacement(None, "auto: every CPU of this host belongs to a node; set load.client.cpus to "
                                     "reserve one")
    return ClientPlacement(sorted(requested), "load.client.cpus")


def server_cpus(node_cpus: list[int], client: ClientPlacement) -> list[int]:
    """A node's CPUs less the generator's (nodes on the generator's host)."""
    reserved = set(client.cpus or ())
    return [cpu for cpu in node_cpus if cpu not in reserved]


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
