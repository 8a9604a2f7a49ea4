"""A cell far below its prediction, and the causes the model can name for it (pure).

The model assumes what a good placement gives: each rank's threads on cores of its own inside one NUMA node, its
even share of the node's cores, no more threads on a node than it has cores, nobody else on the server's cores,
and links as declared. A cell measured far below its prediction is put against those assumptions one by one,
with the facts of its placement (the binding each rank was given, the node's NUMA layout, the node sampler's
foreign CPU, the link setting); every one that does not hold is a cause, said with its numbers. A rank bound
across NUMA nodes reads part of its weights from another node's memory (vLLM binds a rank's memory to its first
core's node); a rank bound to fewer cores than its share leaves the rest idle; a rank with fewer cores than
threads runs them in turns; a node with more threads than cores hands its cores over at every collective.
"""

from __future__ import annotations

from dataclasses import dataclass

FAR_BELOW = 0.6        # measured at less than this share of the prediction (throughput, or 1/TPOT) is far below
MAX_FOREIGN_CPU = 0.1  # as the campaign's validity default (`load.validity.max_foreign_cpu`)


@dataclass(frozen=True)
class RankPlacement:
    """One rank as it was placed: its node, the cores its binding gave it, the threads it runs and the NUMA
    nodes those cores lie in."""

    rank: str
    node: str
    cores: int
    threads: int
    numa_nodes: int = 1


@dataclass(frozen=True)
class PlacementFacts:
    """What is known of a cell's placement: its ranks, each node's cores for servers, the share of those cores
    other processes took (None: not sampled), and the link setting's added delay and rate cap."""

    ranks: tuple[RankPlacement, ...]
    node_cores: dict[str, int]
    foreign_cpu: float | None = None
    link_delay_ms: float = 0.0
    link_rate_mbit: float | None = None


@dataclass(frozen=True)
class Expected:
    """The prediction a cell is judged against: its TPOT p50 [s], output tokens/s and bound."""

    tpot_p50_s: float | None
    output_throughput: float
    bound: str


@dataclass(frozen=True)
class Measured:
    tpot_p50_s: float | None
    output_throughput: float | None


def shortfall(prediction: Expected, measurement: Measured) -> float | None:
    """The cell's share of its prediction: the lower of throughput measured / predicted and TPOT predicted /
    measured (None: nothing to compare)."""
    shares = []
    if measurement.output_throughput is not None and prediction.output_throughput > 0:
        shares.append(measurement.output_throughput / prediction.output_throughput)
    if measurement.tpot_p50_s and prediction.tpot_p50_s:
        shares.append(prediction.tpot_p50_s / measurement.tpot_p50_s)
    return min(shares) if shares else None


def placement_causes(facts: PlacementFacts) -> list[str]:
    """Every assumption of the model the placement breaks, with its numbers."""
    causes = []
    on_node: dict[str, int] = {}
    for rank in facts.ranks:
        on_node[rank.node] = on_node.get(rank.node, 0) + 1
    for rank in facts.ranks:
        share = facts.node_cores.get(rank.node, 0) // on_node[rank.node]
        if rank.cores < share:
            causes.append(f"{rank.rank} on {rank.node} is bound to {rank.cores} of the {share} cores its share of the "
                          "node is: the rest stay idle")
        if rank.numa_nodes > 1:
            causes.append(f"{rank.rank} on {rank.node} spans {rank.numa_nodes} NUMA nodes: part of its weights are "
                          "read from another node's memory")
        if rank.cores < rank.threads:
            causes.append(f"{rank.rank} on {rank.node} runs {rank.threads} threads on {rank.cores} "
                          f"core{'s' if rank.cores != 1 else ''}: its threads take turns")
    threads: dict[str, int] = {}
    for rank in facts.ranks:
        threads[rank.node] = threads.get(rank.node, 0) + rank.threads
    for node, count in threads.items():
        cores = facts.node_cores.get(node)
        if cores is not None and count > cores:
            causes.append(f"node {node} is oversubscribed: {count} threads on {cores} cores")
    if facts.foreign_cpu is not None and facts.foreign_cpu > MAX_FOREIGN_CPU:
        causes.append(f"other processes took {facts.foreign_cpu:.0%} of the server cores")
    return causes


def network_causes(prediction: Expected, facts: PlacementFacts) -> list[str]:
    """The network, when the cell crosses a slowed link or its prediction is bound by its links."""
    parts = ([f"{facts.link_delay_ms:g} ms added delay"] if facts.link_delay_ms else []) + \
        ([f"a {facts.link_rate_mbit:g} Mbit/s cap"] if facts.link_rate_mbit is not None else [])
    if parts:
        return [f"the network: {' and '.join(parts)} on its links"]
    if prediction.bound == "network":
        return ["the network: the prediction is bound by its links, whose latency and bandwidth are declared, "
                "not measured"]
    return []


def flag_cell(prediction: Expected, measurement: Measured, facts: PlacementFacts) -> list[str]:
    """Nothing for a cell near its prediction (or above it); for one far below, the causes the model can name,
    or that it names none."""
    share = shortfall(prediction, measurement)
    if share is None or share >= FAR_BELOW:
        return []
    causes = placement_causes(facts) + network_causes(prediction, facts)
    head = f"measured at {share:.2f} of its prediction"
    if not causes:
        return [f"{head}; none of the causes the model names (NUMA, cores, oversubscription, other processes, "
                "the network) holds"]
    return [f"{head}: {cause}" for cause in causes]
