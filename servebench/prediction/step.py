"""The time of one engine step: the tokens it processes, against the node's bandwidth, its matmul peak and the
links the mode's collectives cross (pure).

A step reads the weights of each rank once, whatever its batch, and the KV cache of every token in the
context of every sequence it decodes or prefills; it multiplies every token of the batch through the rank's
parameters (2 FLOPs each) and through attention over its context; a rank's stage computes `max(memory,
compute)` (the kernels stream and multiply at once). The collectives it adds do not overlap the compute:
tensor parallelism all-reduces the hidden state twice a layer (after attention, after the MLP) and once for
the embedding, and gathers the logits; pipeline parallelism sends the hidden state and the residual across
each of the pp - 1 stage boundaries, the stages of one batch in turn. Ranks that share a node's cores
(`node_share`) share its bandwidth and peak; ranks on more threads than cores (`oversubscribed`) hand the
core over at every collective, each a scheduler time slice. Every step costs the engine's fixed overhead
(the scheduler, the sampler, the API process: `Efficiency.step_overhead_s`).
"""

from __future__ import annotations

from dataclasses import dataclass

BOUNDS = ("bandwidth", "compute", "network", "engine")
# Ranks on one core hand it over at each collective: the one that arrived first spins until the scheduler
# preempts it, after its slice (Linux's EEVDF: a base slice of 0.75 ms x (1 + log2 of the CPUs, at most 8)) and
# then at the next tick (4 ms at CONFIG_HZ=250, the usual distribution kernel's), half a tick on average
BASE_SLICE_S = 0.75e-3
TICK_S = 4e-3


def handoff_s(cpus: int) -> float:
    """The expected wait for a peer rank that shares the core: the running rank's slice, then half a tick."""
    factor = 1 + (min(max(cpus, 1), 8).bit_length() - 1)
    return BASE_SLICE_S * factor + TICK_S / 2


@dataclass(frozen=True)
class Efficiency:
    """What the hardware figures are scaled by and what a step and a request cost beyond them: the share of the
    bandwidth and of the matmul peak the engine's kernels reach, its fixed cost per step and per request (the
    API process's tokenizing, streaming and HTTP before the first token). Defaults until a run's TP=1 cells
    are fitted (servebench/prediction/calibrate.py); `source` says which."""

    bandwidth: float = 0.8
    compute: float = 0.5
    step_overhead_s: float = 0.004
    request_overhead_s: float = 0.003
    source: str = "defaults"


@dataclass(frozen=True)
class Link:
    """What a collective crosses: its one-way latency and bandwidth, and the time a rank waits for a peer that
    shares its core (0 unless oversubscribed)."""

    latency_s: float
    bandwidth_bytes_s: float
    handoff_s: float = 0.0
    label: str = ""


@dataclass(frozen=True)
class RankWork:
    """One rank's share of a step, from the model's shape and the rank's place in the mode: the weight bytes a
    step reads, the KV bytes a context token takes in its layers, the parameters a token goes through, the
    attention FLOPs a query token spends on each context token (4 x its heads x head_dim x its layers), the
    hidden size and activation bytes its collectives carry, the matmul dtype, its mode's tp and pp, the share
    of the node's bandwidth and peak it gets, whether it shares cores with another rank and the share of the
    node's bandwidth one NUMA node has."""

    weight_bytes: float
    kv_bytes_per_token: float
    parameters: float
    attention_flops_per_pair: float
    layers: int
    hidden: int
    activation_bytes: int
    dtype: str
    tp: int = 1
    pp: int = 1
    node_share: float = 1.0
    oversubscribed: bool = False
    numa_share: float = 1.0

    @property
    def memory_share(self) -> float:
        """The share of the node's bandwidth the rank reads at: its share of the node, at most one NUMA node's
        (a rank's memory lives in one NUMA node, whatever its cores span)."""
        return min(self.node_share, self.numa_share)


@dataclass(frozen=True)
class StepBatch:
    """What one step processes: sequences decoding a token each, prompt tokens prefilled, the context tokens
    whose KV is read, and the (query token, context token) pairs attention multiplies."""

    decode_seqs: int
    prefill_tokens: int
    kv_read_tokens: int
    attention_pairs: int

    @property
    def tokens(self) -> int:
        return self.decode_seqs + self.prefill_tokens


@dataclass(frozen=True)
class StepTime:
    memory_s: float      # all stages' reads at the bandwidth
    compute_s: float     # all stages' FLOPs at the peak
    network_s: float     # the collectives and sends
    overhead_s: float    # the engine's fixed cost
    total_s: float

    @property
    def bound(self) -> str:
        """What the step waits on most: bandwidth, compute, network or the engine's fixed cost."""
        terms = (self.memory_s, self.compute_s, self.network_s, self.overhead_s)
        return BOUNDS[max(range(len(terms)), key=lambda i: terms[i])]


def collective_s(link: Link, size_bytes: float, ranks: int) -> float:
    """A ring all-reduce of `size_bytes` over `ranks`: 2 (ranks - 1) messages in turn, each a latency, and
    2 (ranks - 1) / ranks of the bytes through each link; where the ranks share a core, each of the other
    ranks' turn on it instead of the messages' latencies."""
    if ranks < 2:
        return 0.0
    hops = 2 * (ranks - 1)
    waits = (ranks - 1) * link.handoff_s if link.handoff_s > 0 else hops * link.latency_s
    return waits + hops / ranks * size_bytes / link.bandwidth_bytes_s


def send_s(link: Link, size_bytes: float) -> float:
    """One point-to-point send of a stage's output to the next stage."""
    return (link.handoff_s if link.handoff_s > 0 else link.latency_s) + size_bytes / link.bandwidth_bytes_s


def network_time_s(work: RankWork, batch: StepBatch, tp_link: Link, pp_link: Link) -> float:
    """The collectives of a step: per stage 2 all-reduces a layer, one for the embedding and a gather of the
    logits (tensor parallel), and pp - 1 sends of the hidden state and the residual (pipeline parallel)."""
    activations = batch.tokens * work.hidden * work.activation_bytes
    per_stage = (2 * work.layers + 2) * collective_s(tp_link, activations, work.tp)
    sends = (work.pp - 1) * send_s(pp_link, 2 * activations)
    return work.pp * per_stage + sends


def step_time(work: RankWork, batch: StepBatch, bandwidth_gbps: float, peak_gflops: float,
              links: tuple[Link, Link], efficiency: Efficiency) -> StepTime:
    """One step of `batch` on ranks doing `work` on a node of `bandwidth_gbps` and `peak_gflops` (0: no compute
    bound known), with `links` = (TP's link, PP's link); each stage's pass is max(memory, compute), the pp
    stages in turn, then the collectives and the engine's overhead."""
    read = work.weight_bytes + work.kv_bytes_per_token * (batch.kv_read_tokens + batch.tokens)
    memory = read / (bandwidth_gbps * 1e9 * efficiency.bandwidth * work.memory_share)
    flops = 2 * work.parameters * batch.tokens + work.attention_flops_per_pair * batch.attention_pairs
    compute = flops / (peak_gflops * 1e9 * efficiency.compute * work.node_share) if peak_gflops > 0 else 0.0
    network = network_time_s(work, batch, *links)
    total = efficiency.step_overhead_s + work.pp * max(memory, compute) + network
    return StepTime(work.pp * memory, work.pp * compute, network, efficiency.step_overhead_s, total)
