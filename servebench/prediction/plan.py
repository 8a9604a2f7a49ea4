"""A campaign plan's predictions: the inputs they are made from, each mode's model, every cell's prediction,
each mode's start-up, the efficiency factors fitted on a run's TP=1 cells and each measured cell's record
beside its prediction (its ratio and flags), for `servebench predict`, `servebench plan` and the landing of a
run's predictions (docs/performance-model.md). Pure: the figures are given (the CLI reads the roofline cache
or a run's landed rooflines)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from servebench.config.campaign import Campaign, ModeSpec
from servebench.config.sweep import Cell
from servebench.engines import get_engine
from servebench.planning.plan import Plan
from servebench.prediction.calibrate import fit_efficiency
from servebench.prediction.campaign import (
    CellPrediction,
    ModeModel,
    NetworkFigures,
    calibration_cell,
    mode_model,
    predict_cell,
)
from servebench.prediction.flags import Expected, Measured, PlacementFacts, RankPlacement, flag_cell
from servebench.prediction.hardware import NodeFigures, figures_from_roofline
from servebench.prediction.startup import StartupPrediction, predict_startup
from servebench.prediction.step import Efficiency


@dataclass(frozen=True)
class Inputs:
    """What a campaign's prediction is made from: its server nodes (name, CPUs), each one's figures, the links,
    the efficiency factors, this host's CPU count (the scheduler's slice), the campaign file's folder and
    what could not be found."""

    nodes: list[tuple[str, list[int]]]
    figures: dict[str, NodeFigures]
    network: NetworkFigures
    efficiency: Efficiency
    host_cpus: int
    base_dir: Path
    notes: list[str]


def mode_models(plan: Plan, inputs: Inputs) -> dict[str, ModeModel | str]:
    """Each mode's model (or why there is none), by mode name."""
    from servebench.planning.feasibility import first_replicas

    campaign = first_replicas(plan.campaign)
    narrowed = {mode.name: mode for mode in campaign.modes}
    models: dict[str, ModeModel | str] = {}
    for mode, _ in plan.modes():
        base = narrowed.get(mode.name)
        served = mode if base is None else mode.model_copy(update={"nodes": base.nodes})
        models[mode.name] = mode_model(campaign, served, inputs.nodes, inputs.figures, inputs.network,
                                       inputs.host_cpus, inputs.base_dir)
    return models


def predict_all(plan: Plan, inputs: Inputs, models: dict[str, ModeModel | str]
                ) -> list[tuple[Cell, CellPrediction | str]]:
    return [(cell, predict_cell(plan.campaign, model, cell, inputs.efficiency) if isinstance(model, ModeModel)
             else model) for cell in plan.cells for model in [models[cell.mode.name]]]


def mode_startup(campaign: Campaign, model: ModeModel, efficiency: Efficiency, nodes: list[Any]) -> StartupPrediction:
    """The mode's predicted start-up: a profile run where the engine takes a token budget (its
    max_num_batched_tokens knob), a compile where it compiles graphs (its enforce_eager knob, unset);
    `nodes`: the server nodes (an emulated one starts slower)."""
    engine = get_engine(campaign.engine_kind(model.mode))
    compiles = "enforce_eager" in engine.knobs and not model.mode.knobs.get("enforce_eager")
    emulated = any(n.emulate for n in nodes if n.name in model.nodes)
    return predict_startup(model.work, model.figures, model.limits.max_batched_tokens, efficiency,
                           "max_num_batched_tokens" in engine.knobs, compiles, emulated)


def predicted_startup_s(campaign: Campaign, mode: ModeSpec, nodes: list[Any], rooflines: dict[str, dict[str, Any]],
                        host_cpus: int) -> float | None:
    """A mode's predicted start-up [s] on these nodes (`Node`s: name, cpus, emulate) from their measured rooflines
    (`measure_nodes`'s dicts by node name), what a server's ready timeout is derived from; None when the model
    cannot say (an unknown shape, no roofline)."""
    figures = {name: found for name, roofline in rooflines.items()
               if (found := figures_from_roofline(name, roofline)) is not None}
    model = mode_model(campaign, mode, [(n.name, n.cpus) for n in nodes], figures, NetworkFigures(), host_cpus)
    if isinstance(model, str):
        return None
    return mode_startup(campaign, model, Efficiency(), nodes).total_s


def calibrated(plan: Plan, inputs: Inputs, models: dict[str, ModeModel | str], measured: dict[str, dict[str, Any]]
               ) -> Efficiency:
    """The efficiency factors fitted on the run's TP=1 cells: those of its first single-worker mode (one rank, one
    server: the engine's reference, which the other modes are compared with), not of every TP=1 mode, so that a
    mode whose knobs cut its placement is predicted, not fitted."""
    single = [mode.name for mode, _ in plan.modes() if mode.world_size == 1 and mode.replicas == 1]
    if not single:
        return inputs.efficiency
    cells = []
    for cell in plan.cells:
        model, row = models[cell.mode.name], measured.get(cell.key)
        if not isinstance(model, ModeModel) or row is None or cell.mode.name != single[0]:
            continue
        if row.get("ttft_p50_ms") and row.get("tpot_p50_ms"):
            cells.append(calibration_cell(plan.campaign, model, cell, row["ttft_p50_ms"] / 1000,
                                          row["tpot_p50_ms"] / 1000))
    return fit_efficiency(cells, inputs.efficiency)


def placement_facts(model: ModeModel, nodes: list[tuple[str, list[int]]], cell: Cell,
                    foreign_cpu: float | None = None) -> PlacementFacts:
    """What the plan knows of the cell's placement: the ranks computing together on the largest rank's node, each
    bound to its even share of the node's cores or to the first `omp_threads` of them (the knob cuts a binding,
    threads and cores alike), the link setting; `foreign_cpu`: what the node sampler saw others take."""
    cpus = dict(nodes)
    node = model.largest.node
    cores = len(cpus.get(node, [])) or 1
    ranks = max(1, round(1 / model.work.node_share))
    share = max(1, cores // ranks)
    bound = min(share, int(model.mode.knobs.get("omp_threads") or share))
    rank = RankPlacement(model.largest.label, node, cores=bound, threads=bound, numa_nodes=1)
    link = cell.link
    return PlacementFacts((rank,) * ranks, {node: cores}, foreign_cpu, link.delay_ms if link else 0.0,
                          link.rate_mbit if link else None)


def milliseconds(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator and denominator else None


def cell_records(plan: Plan, inputs: Inputs, measured: dict[str, dict[str, Any]],
                 figures_source: str) -> list[dict[str, Any]]:
    """Each predicted cell as a `cell_predictions` row (warehouse/migrations/034_predictions.sql): the prediction
    with the efficiency factors fitted on the run's TP=1 cells among `measured` (rows of the cells table by
    key), the measurement's ratio to it and the flags of a cell far below it."""
    models = mode_models(plan, inputs)
    efficiency = calibrated(plan, inputs, models, measured) if measured else inputs.efficiency
    records = []
    for cell, predicted in predict_all(plan, Inputs(**{**inputs.__dict__, "efficiency": efficiency}), models):
        model = models[cell.mode.name]
        if isinstance(predicted, str) or not isinstance(model, ModeModel):
            continue
        sim, got = predicted.simulated, measured.get(cell.key) or {}
        tpot = (got.get("tpot_p50_ms") or 0) / 1000 or None
        flags = flag_cell(Expected(sim.tpot_p50_s, predicted.output_throughput, sim.bound),
                          Measured(tpot, got.get("output_throughput")), placement_facts(model, inputs.nodes, cell)) \
            if got else []
        records.append({
            "cell_key": cell.key, "mode": cell.mode.name, "ttft_p50_ms": sim.ttft_p50_s * 1000,
            "ttft_p99_ms": sim.ttft_p99_s * 1000, "tpot_p50_ms": milliseconds(sim.tpot_p50_s),
            "tpot_p99_ms": milliseconds(sim.tpot_p99_s),
            "output_throughput": predicted.output_throughput, "bound": sim.bound, "figures_source": figures_source,
            "efficiency_source": efficiency.source, "bandwidth_efficiency": efficiency.bandwidth,
            "compute_efficiency": efficiency.compute, "step_overhead_ms": efficiency.step_overhead_s * 1000,
            "request_overhead_ms": efficiency.request_overhead_s * 1000,
            "throughput_ratio": ratio(got.get("output_throughput"), predicted.output_throughput),
            "tpot_ratio": ratio(sim.tpot_p50_s, tpot), "flags": flags})
    return records
