"""Every cell of a campaign's plan predicted: each mode's ranks as the step model sees them, each cell's arrivals
through the simulation (docs/performance-model.md).

A mode's work is its largest rank's (what `servebench plan` and the roofline put it against: the engine's rank
layout over the mode's nodes, servebench/roofline/figures.py), on the figures of that rank's node. Ranks of one
stage on one node share its bandwidth and peak; stages of one batch run in turn, so ranks of other stages do
not. Collectives inside a node go through shared memory at the node's bandwidth; a mode over several nodes
crosses the declared network (tensor parallel across nodes when pp is 1, else tensor parallel inside a node
and pipeline stages across, the layout vLLM places), each cell's link setting added: its delay once a way for
each of the two hosts it is set on, its rate cap the link's bandwidth. DP engines and replicas each take an
equal share of the cell's requests. The batch limits are the mode's knobs, else the engine's defaults.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from servebench.config.campaign import Campaign, LinkSetting, ModeSpec
from servebench.config.sweep import Cell
from servebench.engines import get_engine
from servebench.engines.base import Engine, RankShare
from servebench.load.schedule import arrival_offsets
from servebench.models.shapes import DTYPE_BYTES
from servebench.planning.memory import ModelWeights, model_weights, ranks_of, resolved_model_path, share_weight_bytes
from servebench.prediction.calibrate import CalibrationCell
from servebench.prediction.hardware import NodeFigures
from servebench.prediction.simulate import Arrivals, BatchLimits, SimulatedCell, StepModel, simulate
from servebench.prediction.step import Efficiency, Link, RankWork, StepBatch, StepTime, handoff_s, step_time
from servebench.roofline.figures import rank_roofline_figures

# vLLM's CPU defaults for its OpenAI server (vllm/engine/arg_utils.py, 0.32): per worker of the engine's world
# size; llama.cpp's server: 4 slots (`-np` auto) and a logical batch of 2048 (`-b`)
SEQS_PER_WORKER, TOKENS_PER_WORKER = 128, 2048
DEFAULT_SLOTS, DEFAULT_LOGICAL_BATCH = 4, 2048
# a duration-bound closed-loop cell is simulated for this many requests a client
REQUESTS_PER_CLIENT = 16


@dataclass(frozen=True)
class NetworkFigures:
    """The links between nodes, declared: one-way latency [s] (the wire and the collective library's software
    stack) and bandwidth [bytes/s] of a link, and the latency of a collective between ranks of one node
    through shared memory."""

    latency_s: float = 1e-4
    bandwidth_bytes_s: float = 1.25e9
    local_latency_s: float = 5e-6
    source: str = "declared: 0.1 ms and 10 Gbit/s between nodes, 5 us inside one (assumptions; --link-latency-ms, " \
                  "--link-gbps)"


@dataclass(frozen=True)
class ModeModel:
    """A mode as the model runs it: its largest rank's work and node figures, the links of its collectives
    (before a cell's link setting), its batch limits and the engines its requests are shared by."""

    mode: ModeSpec
    work: RankWork
    figures: NodeFigures
    tp_link: Link
    pp_link: Link
    limits: BatchLimits
    engines: int
    nodes: tuple[str, ...]
    crosses_nodes: bool
    weights: ModelWeights
    largest: RankShare


@dataclass(frozen=True)
class CellPrediction:
    cell: Cell
    simulated: SimulatedCell
    engines: int

    @property
    def output_throughput(self) -> float:
        """Output tokens a second of the whole mode: each engine's, times the engines."""
        return self.simulated.output_throughput * self.engines


def schedule_seed(cell_seed: int) -> int:
    """The seed of a cell's arrival times, as the load generator derives it (`LoadConfig.effective_schedule_seed`)."""
    return (cell_seed * 7919 + 104729) % (2**31)


def batch_limits(engine: Engine[Any, Any], mode: ModeSpec) -> BatchLimits:
    """The mode's knobs, else the engine's defaults: sequences a step and tokens a step."""
    knobs = mode.knobs
    if "max_num_seqs" in engine.knobs:
        seqs = knobs.get("max_num_seqs") or SEQS_PER_WORKER * mode.engine_size
        tokens = knobs.get("max_num_batched_tokens") or TOKENS_PER_WORKER * mode.engine_size
        return BatchLimits(int(seqs), int(tokens))
    slots = knobs.get("parallel") or DEFAULT_SLOTS
    return BatchLimits(int(slots), int(knobs.get("batch_size") or DEFAULT_LOGICAL_BATCH))


def concurrent_ranks(held: list[RankShare], node: str, pp: int) -> int:
    """Ranks of the node that compute at once: all of them when each stage has nodes of its own, else the
    ranks of one stage (the stages of a batch run in turn)."""
    on_node = sum(1 for share in held if share.node == node)
    stages_apart = len({share.node for share in held}) >= pp
    return max(1, on_node if stages_apart or pp == 1 else on_node // pp)


def rank_work(weights: ModelWeights, held: list[RankShare], mode: ModeSpec, cpus: int,
              numa_nodes: int = 1) -> tuple[RankWork, RankShare]:
    """The largest rank's work (weights read a step, KV a token, parameters a token, attention FLOPs a pair),
    sharing its node with the ranks that compute beside it, oversubscribed when they outnumber its cores, its
    memory in one of the node's `numa_nodes`."""
    assert weights.shape is not None
    shape = weights.shape
    figures = rank_roofline_figures(weights, held)
    largest = max(held, key=lambda s: share_weight_bytes(weights, s))
    together = concurrent_ranks(held, largest.node, mode.pp)
    dtype = str(figures["served_dtype"])
    heads = max(1, shape.heads // largest.tp)
    return RankWork(
        weight_bytes=float(figures["rank_weight_bytes"]), kv_bytes_per_token=float(figures["rank_kv_bytes_per_token"]),
        parameters=float(figures["rank_parameters"]),
        attention_flops_per_pair=4.0 * heads * shape.head_size * largest.layers, layers=largest.layers,
        hidden=shape.hidden, activation_bytes=DTYPE_BYTES.get(dtype, 2), dtype=dtype, tp=mode.tp, pp=mode.pp,
        node_share=1.0 / together, oversubscribed=together > cpus, numa_share=1.0 / max(1, numa_nodes)), largest


def mode_links(work: RankWork, figures: NodeFigures, crosses: bool, network: NetworkFigures,
               host_cpus: int) -> tuple[Link, Link]:
    """(TP's link, PP's link): shared memory inside a node (a core's handover where ranks share cores), the
    declared network across nodes: TP's when pp is 1, else PP's."""
    local = Link(network.local_latency_s, figures.mem_bandwidth_gbps * 1e9,
                 handoff_s(host_cpus) if work.oversubscribed else 0.0, "shared memory")
    wire = Link(network.latency_s, network.bandwidth_bytes_s, 0.0, "network")
    if not crosses:
        return local, local
    return (wire, wire) if work.pp == 1 else (local, wire)


def mode_model(campaign: Campaign, mode: ModeSpec, nodes: list[tuple[str, list[int]]],
               figures_of: dict[str, NodeFigures], network: NetworkFigures, host_cpus: int,
               base_dir: Path | None = None) -> ModeModel | str:
    """The mode's model, or why there is none (an unknown shape, no rank layout, no figures for its node)."""
    engine = get_engine(campaign.engine_kind(mode))
    model = campaign.model_for(mode)
    weights = model_weights(model, engine, resolved_model_path(model, base_dir))
    if weights.shape is None:
        return f"the model's shape is unknown: {weights.why}"
    if engine.api.memory is None:
        return f"engine {engine.kind!r} declares no rank layout"
    held = [s for s in ranks_of(engine, mode, campaign.engine_spec_for(mode), nodes, weights.shape) if s.layers]
    cpus_of = dict(nodes)
    largest_node = max(held, key=lambda s: share_weight_bytes(weights, s)).node
    figures = figures_of.get(largest_node)
    if figures is None:
        return f"no figures for node {largest_node} (no cached roofline: measure it with a run, or give --hardware)"
    work, largest = rank_work(weights, held, mode, len(cpus_of.get(largest_node) or [0]), figures.numa_nodes)
    names = tuple(dict.fromkeys(s.node for s in held))
    tp_link, pp_link = mode_links(work, figures, len(names) > 1, network, host_cpus)
    return ModeModel(mode, work, figures, tp_link, pp_link, batch_limits(engine, mode), mode.dp * mode.replicas,
                     names, len(names) > 1, weights, largest)


def with_setting(link: Link, setting: LinkSetting | None, nodes: tuple[str, ...]) -> Link:
    """A network link under a cell's setting: its delay added once for each of the mode's nodes it is set on
    (every node when it names none), its rate cap the bandwidth."""
    if setting is None or link.label != "network":
        return link
    on = len(nodes) if setting.hosts is None else sum(1 for node in nodes if node in setting.hosts)
    bandwidth = link.bandwidth_bytes_s if setting.rate_mbit is None else \
        min(link.bandwidth_bytes_s, setting.rate_mbit * 1e6 / 8)
    return replace(link, latency_s=link.latency_s + min(on, 2) * setting.delay_ms / 1000.0,
                   bandwidth_bytes_s=bandwidth)


def cell_arrivals(campaign: Campaign, cell: Cell, engines: int) -> Arrivals:
    """One engine's share of the cell's requests: its clients, or every `engines`-th send time."""
    load = campaign.load
    prompt, output = load.input_len, load.output_len
    if cell.workload is not None:   # a workload's longest lengths: the prediction is then a bound
        prompt = cell.workload.upper_input() or prompt
        output = cell.workload.upper_output() or output
    if cell.point.kind == "closed":
        clients = max(1, math.ceil((cell.point.clients or 1) / engines))
        requests = load.requests or clients * REQUESTS_PER_CLIENT
        return Arrivals(max(1, math.ceil(requests / engines)), prompt, output, clients=clients,
                        warmup=load.warmup // engines)
    rate = cell.point.rate or 1.0
    offsets = arrival_offsets(rate, load.arrival, schedule_seed(cell.seed), count=load.requests,
                              duration=None if load.requests else load.duration)
    share = tuple(offsets[::engines])
    return Arrivals(len(share), prompt, output, offsets=share, warmup=load.warmup // engines)


def step_model(model: ModeModel, setting: LinkSetting | None, efficiency: Efficiency) -> StepModel:
    """The step time of this mode under a cell's link setting, as the simulation calls it."""
    links = (with_setting(model.tp_link, setting, model.nodes), with_setting(model.pp_link, setting, model.nodes))
    peak, _ = model.figures.peak_gflops(model.work.dtype)

    def timed(batch: StepBatch) -> StepTime:
        return step_time(model.work, batch, model.figures.mem_bandwidth_gbps, peak, links, efficiency)
    return timed


def predict_cell(campaign: Campaign, model: ModeModel, cell: Cell, efficiency: Efficiency) -> CellPrediction:
    arrivals = cell_arrivals(campaign, cell, model.engines)
    simulated = simulate(arrivals, model.limits, step_model(model, cell.link, efficiency),
                         efficiency.request_overhead_s)
    return CellPrediction(cell, simulated, model.engines)


def calibration_cell(campaign: Campaign, model: ModeModel, cell: Cell, measured_ttft_s: float,
                     measured_tpot_s: float) -> CalibrationCell:
    """A measured TP=1 cell beside the model's hardware-only prediction of it (efficiency 1, no overhead) and the
    steps its requests wait for a first token (the same simulation with every step the default overhead alone)."""
    bare = Efficiency(bandwidth=1.0, compute=1.0, step_overhead_s=0.0, request_overhead_s=0.0)
    hardware = predict_cell(campaign, model, cell, bare).simulated
    unit = Efficiency().step_overhead_s

    def overhead_only(batch: StepBatch) -> StepTime:
        return StepTime(0.0, 0.0, 0.0, unit, unit)
    steps = simulate(cell_arrivals(campaign, cell, model.engines), model.limits, overhead_only).ttft_p50_s / unit
    return CalibrationCell(measured_ttft_s, measured_tpot_s, hardware.ttft_p50_s, hardware.tpot_p50_s or 0.0,
                           max(1.0, steps))
