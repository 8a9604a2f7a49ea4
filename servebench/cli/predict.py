"""`servebench predict CAMPAIGN`: every cell's predicted TTFT, TPOT and throughput before a run
(docs/performance-model.md).

The figures are each server node's cached roofline (the one a run of this build measured there), or a
declared chip's (`--hardware a64fx`); the links between nodes are declared (`--link-latency-ms`,
`--link-gbps`) and each cell's network setting is added to them. With `--run RUN` the run's measured cells
are printed beside the prediction with their ratio and, for a cell far below it, the causes the model names;
`--calibrate` first fits the efficiency factors on that run's TP=1 cells. Nothing is started.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

from servebench.config.campaign import Campaign
from servebench.config.sweep import Cell
from servebench.paths import cache_dir
from servebench.planning import runtime_probe
from servebench.planning.plan import Plan
from servebench.prediction.campaign import (
    CellPrediction,
    ModeModel,
    NetworkFigures,
)
from servebench.prediction.flags import Expected, Measured, flag_cell
from servebench.prediction.hardware import DECLARED, NodeFigures, declared, figures_from_roofline
from servebench.prediction.plan import Inputs, calibrated, mode_models, placement_facts, predict_all
from servebench.prediction.step import Efficiency
from servebench.roofline import benchmark as roofline


def this_cpu_model() -> str:
    """This host's CPU model as the inventory records it (the roofline cache's key has it)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model name", "CPU part"):
                return value.strip()
    except OSError:
        pass
    return "unknown"


def cached_roofline(names: list[str], cpus: list[int], build_key: str, emulated: bool) -> tuple[dict, str] | None:
    """A node's cached roofline: under its own key (hostname, CPU model, CPUs, build) for each hostname it may
    have, else the newest cached figures measured on the same CPU list with a matmul peak, said as such."""
    model = this_cpu_model()
    for hostname in names:
        found = roofline.cached(cache_dir(), roofline.cache_key(hostname, model, cpus, build_key, emulated))
        if found is not None:
            return found, f"cached roofline of {hostname} with build {build_key}"
    folder = cache_dir() / "roofline"
    candidates = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            figures = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(figures, dict) and sorted(figures.get("cpus") or []) == sorted(cpus) \
                and figures.get("matmul_peak_gflops_fp32") and bool(figures.get("emulated")) == emulated:
            candidates.append((figures.get("measured_at") or path.stat().st_mtime, figures))
    if not candidates:
        return None
    return max(candidates, key=lambda c: c[0])[1], f"newest cached roofline of CPUs {cpus} (not this node's own key)"


def build_key(campaign: Campaign) -> str:
    """The campaign's engine build key (the roofline cache's key has it), or '' when it has none yet."""
    from servebench.engines import get_engine

    kind, spec = next(iter(campaign.engine_specs().items()))
    return runtime_probe.build_key(get_engine(kind), spec) or ""


def server_nodes(plan: Plan) -> list[Any]:
    """The campaign's server nodes as its provider lists them for a plan (nothing allocated)."""
    from servebench.planning.placement import split_client_node
    from servebench.providers import get_provider

    campaign = plan.campaign
    provider = get_provider(campaign, plan.client.reserved_on_nodes)
    nodes, _ = split_client_node(provider.nodes(), [n.name for n in campaign.provider.node_specs()],
                                 plan.client.node)
    return nodes


def node_figures(plan: Plan, nodes: list[Any], hardware: str | None) -> tuple[dict[str, NodeFigures], list[str]]:
    """Each server node's figures: the declared chip's for all of them, else its cached roofline."""
    if hardware:
        chip = declared(hardware)
        return {node.name: chip for node in nodes}, [figures_note("every node", chip, chip.source)]
    key = build_key(plan.campaign)
    local = plan.campaign.provider.nodes_on_this_host
    found: dict[str, NodeFigures] = {}
    notes = []
    for node in nodes:
        names = ([socket.gethostname()] if local else []) + [node.name, node.address]
        cached = cached_roofline(names, node.cpus, key, node.emulate is not None)
        figures = figures_from_roofline(node.name, cached[0]) if cached else None
        if cached is None or figures is None:
            notes.append(f"figures  {node.name}: no cached roofline (a run measures it; or give --hardware "
                         f"{'|'.join(DECLARED)})")
            continue
        found[node.name] = replace_source(figures, cached[1])
        notes.append(figures_note(node.name, figures, cached[1]))
    return found, notes


def figures_note(name: str, figures: NodeFigures, where: str) -> str:
    """The figures line: a node's bandwidth and peaks, and where they come from."""
    peaks = ", ".join(f"{dtype} {peak:g} GFLOP/s" for dtype, peak in figures.matmul_gflops.items())
    return f"figures  {name}: {figures.mem_bandwidth_gbps:g} GB/s, {peaks} ({where})"


def replace_source(figures: NodeFigures, where: str) -> NodeFigures:
    from dataclasses import replace

    return replace(figures, source=f"{where}; {figures.source}")


def run_figures(warehouse_file: Path, run_id: str) -> tuple[dict[str, NodeFigures], list[str]]:
    """The server nodes' rooflines a run measured and landed (what its cells are predicted from with --run)."""
    from servebench import warehouse
    from servebench.warehouse import reads

    con = warehouse.connect(warehouse_file, read_only=True)
    try:
        rows = [row for row in reads.server_hardware(con, run_id) if row["role"] != "client"]
    finally:
        con.close()
    found, notes = {}, []
    for row in rows:
        figures = figures_from_roofline(row["node"], {**row, "cpus": row["cpus"], "method": f"landed by run {run_id}"})
        if figures is not None:
            found[row["node"]] = figures
            notes.append(figures_note(row["node"], figures, f"the roofline run {run_id} landed"))
    return found, notes


def prediction_inputs(plan: Plan, file: Path, hardware: str | None = None,
                      network: NetworkFigures = NetworkFigures(), efficiency: Efficiency = Efficiency(),
                      landed: tuple[dict[str, NodeFigures], list[str]] | None = None) -> Inputs:
    """The nodes and their figures: a declared chip's, a run's landed rooflines, else each node's cached one."""
    nodes = server_nodes(plan)
    figures, notes = landed if landed and landed[0] and not hardware else node_figures(plan, nodes, hardware)
    host_cpus = os.cpu_count() or 1
    if hardware:   # every node that chip, all its cores for servers
        cores = declared(hardware).cores
        return Inputs([(n.name, list(range(cores))) for n in nodes], figures, network, efficiency, cores,
                      file.parent, notes)
    return Inputs([(n.name, n.cpus) for n in nodes], figures, network, efficiency, host_cpus, file.parent, notes)


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:.1f}"


def load_label(cell: Cell) -> str:
    return " ".join(part for part in (cell.link.label if cell.link else "",
                                      cell.workload.label if cell.workload else "", cell.point.label) if part)


def measured_cells(warehouse_file: Path, run_id: str) -> dict[str, dict]:
    """The run's completed cells by key, as the report reads them."""
    from servebench import warehouse
    from servebench.warehouse import reads

    con = warehouse.connect(warehouse_file, read_only=True)
    try:
        return {row["cell_key"]: row for row in reads.report_cells(con, run_id) if row["status"] == "completed"}
    finally:
        con.close()


def prediction_lines(plan: Plan, inputs: Inputs, models: dict[str, ModeModel | str],
                     measured: dict[str, dict] | None) -> list[str]:
    """The table: a row a cell, with the measurement beside it when given."""
    header = f"{'mode':<14} {'load point':<22} {'TTFT p50':>9} {'p99':>8} {'TPOT p50':>9} {'p99':>8} " \
             f"{'tok/s':>9} {'bound':<9}"
    if measured is not None:
        header += f" {'meas TTFT':>9} {'meas TPOT':>9} {'meas tok/s':>10} {'tok/s ratio':>11}"
    lines = [header + "   (ms; output tokens/s)"]
    for cell, predicted in predict_all(plan, inputs, models):
        if isinstance(predicted, str):
            lines.append(f"{cell.mode.name:<14} {load_label(cell):<22} not predicted: {predicted}")
            continue
        sim = predicted.simulated
        row = f"{cell.mode.name:<14} {load_label(cell):<22} {ms(sim.ttft_p50_s):>9} {ms(sim.ttft_p99_s):>8} " \
              f"{ms(sim.tpot_p50_s):>9} {ms(sim.tpot_p99_s):>8} {predicted.output_throughput:>9.1f} {sim.bound:<9}"
        got = (measured or {}).get(cell.key)
        if measured is not None and got is not None:
            row += measured_text(predicted, got)
        lines.append(row)
        if got is not None and isinstance(model := models[cell.mode.name], ModeModel):
            expected = Expected(sim.tpot_p50_s, predicted.output_throughput, sim.bound)
            seen = Measured((got.get("tpot_p50_ms") or 0) / 1000 or None, got.get("output_throughput"))
            lines += [f"  flag: {flag}" for flag in flag_cell(expected, seen, placement_facts(model, inputs.nodes,
                                                                                              cell))]
    return lines


def measured_text(predicted: CellPrediction, got: dict) -> str:
    throughput = got.get("output_throughput")
    ratio = f"{throughput / predicted.output_throughput:.2f}" if throughput and predicted.output_throughput else "-"
    return (f" {got.get('ttft_p50_ms') or 0:>9.1f} {got.get('tpot_p50_ms') or 0:>9.1f} {throughput or 0:>10.1f} "
            f"{ratio:>11}")


def describe_prediction(plan: Plan, inputs: Inputs, measured: dict[str, dict] | None = None,
                        calibrate: bool = False) -> str:
    models = mode_models(plan, inputs)
    if calibrate and measured:
        inputs = Inputs(**{**inputs.__dict__, "efficiency": calibrated(plan, inputs, models, measured)})
    eff = inputs.efficiency
    lines = [f"campaign {plan.campaign.name}: {len(plan.cells)} cells predicted, nothing run",
             *inputs.notes,
             f"links    {inputs.network.source}",
             f"model    efficiency ({eff.source}): bandwidth {eff.bandwidth:.2f}, compute {eff.compute:.2f}, "
             f"step overhead {eff.step_overhead_s * 1000:.2f} ms, request overhead "
             f"{eff.request_overhead_s * 1000:.2f} ms", ""]
    for name, model in models.items():
        if isinstance(model, ModeModel):
            warning = model.figures.slow_dtype_warning(model.work.dtype)
            lines += [f"warning  mode {name}: {warning}"] if warning else []
    return "\n".join(lines + prediction_lines(plan, inputs, models, measured))


def add_predict_parser(sub: argparse._SubParsersAction) -> None:
    from servebench.cli.common import campaign_arg, warehouse_arg

    predict = sub.add_parser("predict", help="predict every cell's TTFT, TPOT and throughput before a run")
    campaign_arg(predict)
    predict.add_argument("--hardware", choices=sorted(DECLARED), help="a declared chip's published figures for "
                         "every server node instead of their cached rooflines")
    predict.add_argument("--link-latency-ms", type=float, default=NetworkFigures().latency_s * 1000,
                         help="one-way latency between nodes before a cell's setting (default %(default)s)")
    predict.add_argument("--link-gbps", type=float, default=NetworkFigures().bandwidth_bytes_s * 8 / 1e9,
                         help="bandwidth between nodes in Gbit/s (default %(default)s)")
    predict.add_argument("--run", metavar="RUN_ID", help="print this run's measured cells beside the prediction")
    predict.add_argument("--calibrate", action="store_true", help="fit the efficiency factors on --run's TP=1 "
                         "cells first")
    warehouse_arg(predict)
    predict.set_defaults(func=cmd_predict)


def cmd_predict(args: argparse.Namespace) -> int:
    from servebench.campaign.loading import load_campaign
    from servebench.cli.common import EXIT_OK, EXIT_USAGE, warehouse_path
    from servebench.planning.plan import make_plan
    from servebench.providers import get_provider_class

    if args.calibrate and not args.run:
        print("servebench predict: --calibrate needs --run RUN_ID", file=sys.stderr)
        return EXIT_USAGE
    campaign = load_campaign(args.file)
    plan = make_plan(campaign, get_provider_class(campaign.provider.kind).host_cpus())
    network = NetworkFigures(latency_s=args.link_latency_ms / 1000, bandwidth_bytes_s=args.link_gbps * 1e9 / 8,
                             source=f"declared: {args.link_latency_ms:g} ms and {args.link_gbps:g} Gbit/s between "
                                    "nodes, 5 us inside one (--link-latency-ms, --link-gbps)")
    landed = run_figures(warehouse_path(args), args.run) if args.run else None
    inputs = prediction_inputs(plan, Path(args.file), args.hardware, network, landed=landed)
    measured = measured_cells(warehouse_path(args), args.run) if args.run else None
    print(describe_prediction(plan, inputs, measured, args.calibrate))
    return EXIT_OK
