"""NUMA layouts and the cores each rank of a node gets within them (pure; docs/parallel-modes.md, "Ranks and NUMA").

A rank bound across NUMA nodes reads half its weights from another node's memory: on Fujitsu's A64FX each
of the four core-memory groups (CMGs) has its own HBM2, on a two-socket x86 node each socket its own
DRAM. vLLM's CPU worker binds a rank's memory to the NUMA node of the first core of its
`VLLM_CPU_OMP_THREADS_BIND` list (and moves its pages there: csrc/cpu/utils.cpp, `init_cpu_threads_env`),
so the cores a rank is given decide where its memory lives. The rule here:

- as many ranks as NUMA nodes, or more: each NUMA node holds whole ranks (in proportion to its cores),
  so no rank spans two: A64FX's TP=4 is one rank per CMG, TP=8 two per CMG;
- fewer ranks than NUMA nodes: each rank takes consecutive whole NUMA nodes, so no core is left idle,
  and the plan names the NUMA nodes a rank spans (its memory is bound to the first of them).

A node's layout is what the campaign declares (`numa:` on a node), else a target profile's published
one (`PUBLISHED`), else, for the orchestrator's own host, what /sys says; unknown, the node is one group.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servebench.cpus import format_cpu_list, parse_cpu_list, split_cpus

Layout = list[list[int]]   # each NUMA node's CPU ids, in NUMA node order


def _blocks(count: int, size: int) -> Layout:
    return [list(range(index * size, (index + 1) * size)) for index in range(count)]


# Published layouts (the vendors' documents): Fujitsu A64FX, 48 compute cores in 4 CMGs of 12, each with 8 GiB of
# HBM2; AWS Graviton3, 64 Neoverse V1 cores, one NUMA node; Graviton4, 96 Neoverse V2 cores, one NUMA node (a
# single-socket instance); NVIDIA Grace, 72 Neoverse V2 cores with its LPDDR5X, one NUMA node per CPU.
PUBLISHED: dict[str, Layout] = {
    "a64fx": _blocks(4, 12),
    "graviton3": _blocks(1, 64),
    "graviton4": _blocks(1, 96),
    "grace": _blocks(1, 72),
}


@dataclass(frozen=True)
class RankCores:
    """One rank's cores and the NUMA nodes they lie in (one, unless the rank must span)."""

    cpus: list[int]
    numa_nodes: tuple[int, ...]

    @property
    def spans(self) -> bool:
        return len(self.numa_nodes) > 1


def this_host_layout(sys_node: Path = Path("/sys/devices/system/node")) -> Layout:
    """The orchestrator's own NUMA nodes from /sys (empty where the kernel has no NUMA information)."""
    nodes = sorted(sys_node.glob("node[0-9]*"), key=lambda path: int(path.name[4:]))
    layout = [parse_cpu_list((path / "cpulist").read_text().strip()) for path in nodes if (path / "cpulist").exists()]
    return [cpus for cpus in layout if cpus]


def rank_cores(cpus: list[int], ranks: int, layout: Layout) -> list[RankCores]:
    """The cores of each of a node's `ranks` local ranks, in rank order, following the rule above."""
    groups = [(index, [cpu for cpu in cpus if cpu in set(numa)]) for index, numa in enumerate(layout)]
    groups = [(index, found) for index, found in groups if found]
    outside = [cpu for cpu in cpus if not any(cpu in found for _, found in groups)]
    if len(groups) <= 1 or outside or ranks > len(cpus):   # one group, an unknown core, or oversubscribed
        node = (groups[0][0],) if len(groups) == 1 and not outside else ()
        return [RankCores(group, node) for group in split_cpus(cpus, ranks)]
    if ranks < len(groups):
        return [RankCores(sorted(cpu for _, found in chunk for cpu in found), tuple(index for index, _ in chunk))
                for chunk in _chunks(groups, ranks)]
    found = []
    for (index, group), count in zip(groups, _shares(ranks, [len(group) for _, group in groups])):
        found += [RankCores(part, (index,)) for part in split_cpus(group, count)]
    return found


def _chunks(groups: list, parts: int) -> list[list]:
    """`groups` cut into `parts` consecutive runs of near-equal length, the first runs one longer (as a node's
    cores are split among ranks)."""
    return [[groups[index] for index in run] for run in split_cpus(list(range(len(groups))), parts)]


def _shares(ranks: int, sizes: list[int]) -> list[int]:
    """`ranks` over groups of these core counts: at least one each, the rest by largest remainder, never more
    ranks than a group has cores."""
    total = sum(sizes)
    shares = [max(1, ranks * size // total) for size in sizes]
    while sum(shares) > ranks:
        largest = max(range(len(shares)), key=lambda i: (shares[i], -i))
        shares[largest] -= 1
    remainders = sorted(range(len(sizes)), key=lambda i: (-(ranks * sizes[i] / total - shares[i]), i))
    for index in remainders:
        if sum(shares) == ranks:
            break
        if shares[index] < sizes[index]:
            shares[index] += 1
    return shares


def describe(ranks: list[RankCores], layout: Layout) -> str:
    """One line for the plan: each rank's cores and NUMA node, and what spans or stays idle."""
    if len(layout) <= 1:
        return ""
    parts = []
    for number, rank in enumerate(ranks):
        where = (f"NUMA {rank.numa_nodes[0]}" if len(rank.numa_nodes) == 1 else
                 f"spans NUMA {'+'.join(map(str, rank.numa_nodes))}, memory bound to NUMA {rank.numa_nodes[0]}"
                 if rank.numa_nodes else "NUMA unknown")
        parts.append(f"rank {number} cores {format_cpu_list(rank.cpus)} ({where})")
    return f"{len(layout)} NUMA nodes: " + "; ".join(parts)
