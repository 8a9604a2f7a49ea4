"""A mode's capacity search inside a campaign (`search:`), and the tuner's verdict over every
configuration (`search: tune`): the searching itself is `servebench.analysis.capacity`, the
verdict `servebench.analysis.tuning`; here they are composed with the cells and the warehouse."""

from __future__ import annotations

import warehouse
from flows import modes  # modes calls this module's search in turn: its names are looked up at call time
from flows.context import RunContext
from servebench.analysis.capacity import Probe as CapacityProbe
from servebench.analysis.capacity import SearchSettings, judge, observed_from_summary, search_capacity
from servebench.campaign.schema import ModeSpec
from servebench.campaign.sweep import Cell, configuration_space, configurations, search_cell
from servebench.analysis.capacity_report import times
from servebench.progress import reporter
from servebench.serving.correctness import GateResult
from servebench.serving.server import Server
from servebench.analysis.tuning import AGAIN, point_key, propose_configuration
from tasks.land import land_capacity, land_tuning, session
from tasks.telemetry import Telemetry


def search_mode_capacity(ctx: RunContext, mode: ModeSpec, server: Server, telemetry: Telemetry,
                         gate: GateResult) -> tuple[Server, Telemetry]:
    """The mode's capacity under the campaign's SLO (servebench/analysis/capacity.py): every probe
    a cell (`<mode>.cap.<point>.r0`), landed like the others; the result in `capacity`. A server
    found unhealthy between probes is restarted; the probe it failed counts as a miss."""
    spec, slo = ctx.campaign.search, ctx.campaign.slo
    current = {"server": server, "telemetry": telemetry}
    probe_cells: list[str] = []

    def probe_once(value: float, repeat: int) -> CapacityProbe:
        cell = search_cell(ctx.campaign, mode, value, repeat)
        modes.land_result_file(ctx, cell, search_probe=True)  # measured, not landed, before a resume
        if cell.key in ctx.statuses:  # measured by the run's earlier attempt (a resume): its verdict stands
            probe_cells.append(cell.key)
            return landed_probe(ctx, cell, value)
        if (problem := modes.server_problem(current["server"])) is not None:
            current["server"], current["telemetry"] = modes.restart_server(ctx, mode, current["server"],
                                                                     current["telemetry"], gate, problem)
        reporter().cell_started(cell.key, mode.name, len(ctx.statuses), ctx.planned_cells)
        probe_cells.append(cell.key)
        summary = modes.run_one_cell(ctx, cell, current["server"], gate.status, search_probe=True)
        if summary is None:  # failed without a measurement
            return judge(value, {key: None for key in slo}, slo, valid=False)
        return judge(value, observed_from_summary(summary, slo), slo,
                     valid=ctx.statuses[cell.key] == "completed" and bool(summary.get("valid", True)))

    def probe(value: float) -> CapacityProbe:
        """The point meets the SLO only if every repeat does (the first miss ends the repeats)."""
        verdict = probe_once(value, 0)
        for repeat in range(1, spec.repeats):
            if not verdict.met:
                break
            verdict = probe_once(value, repeat)
        return verdict

    reporter().stage(f"mode {mode.name}: capacity search over {spec.over} for SLO {slo}")
    result = search_capacity(probe, SearchSettings(start=spec.start, precision=spec.precision,
                                                   max_probes=spec.max_probes, max_value=spec.max_value,
                                                   integer=spec.over == "clients"))
    land_capacity(ctx.warehouse, ctx.run_id, mode, spec.over, slo, result, probe_cells)
    unit = "clients" if spec.over == "clients" else "req/s"
    reporter().stage(f"mode {mode.name}: capacity {result.capacity if result.capacity is not None else 'none'} "
                     f"{unit} (missed at {result.upper}), {len(result.probes)} probes: {result.why}")
    return current["server"], current["telemetry"]


def landed_probe(ctx: RunContext, cell: Cell, value: float) -> CapacityProbe:
    """A probe cell already in the warehouse, as the search's verdict: what it measured and
    whether it met the SLO, as landed (nothing is measured twice)."""
    slo = ctx.campaign.slo
    with session(ctx.warehouse) as con:
        row = warehouse.rows(con, "select * from cells where run_id = ? and cell_key = ?", [ctx.run_id, cell.key])[0]
    valid = row["status"] == "completed" and bool(row["valid"])
    verdict = judge(value, {key: row.get(key) for key in slo}, slo, valid=valid)  # cells keep p50 and p99 only
    return verdict.model_copy(update={"met": bool(row["slo_met"])})


def remeasure_default(ctx: RunContext) -> None:
    """`search: tune`: the default configuration once more, after all the others, as
    `<default>-again` (its own server and capacity search): what order alone changes
    (`servebench.analysis.tuning.tune_verdict`). Skipped when already measured (a resume) or when
    the default itself has no capacity (its server failed, or it met the SLO nowhere)."""
    default = configurations(ctx.campaign)[0]
    again = default.model_copy(update={"name": default.name + AGAIN})
    landed = _landed_capacities(ctx)
    if landed.get(default.name) is None or again.name in landed:
        return
    if ctx.searches is not None:
        ctx.searches.add(again.name)
    reporter().stage(f"tuning: the default {default.name} measured again, after the others")
    modes.run_mode(ctx, again, [])


def judge_tuning(ctx: RunContext) -> None:
    """`search: tune`: the best configuration against the default, from every capacity the run
    landed (also those of an earlier attempt, after a resume), into `tuning`."""
    spec = ctx.campaign.search
    default = configurations(ctx.campaign)[0].name
    verdict = land_tuning(ctx.warehouse, ctx.run_id, default, spec.over, ctx.campaign.slo)
    bounds = (f" (the probes' brackets allow {times(verdict.ratio_low, 'unknown')} to "
              f"{times(verdict.ratio_high)})" if verdict.ratio is not None else "")
    reporter().stage(f"tuning: best {verdict.best_mode} at {verdict.best_capacity}, default {default} at "
                     f"{verdict.default_first} first, {verdict.default_again} again: {verdict.why}{bounds}; "
                     f"{verdict.probes} probes")


def tune_with_optuna(ctx: RunContext, cells: list[Cell]) -> None:
    """`search: {kind: tune, strategy: optuna, trials: N}`: launch N configurations, the default
    first, each next one proposed by Optuna from the capacities found so far
    (`servebench.analysis.tuning.propose_configuration`); every trial is a whole mode (its cells,
    then its capacity search), landed like any other. A resumed run finishes the configuration the
    killed one had started, then goes on proposing from every capacity landed."""
    spec = ctx.campaign.search
    space = configuration_space(ctx.campaign)
    points = [point for point, _ in space]
    by_key = {point_key(point): mode for point, mode in space}
    capacities = _landed_capacities(ctx)
    tried = [(point, capacities[mode.name] or 0.0) for point, mode in space if mode.name in capacities]
    started = [mode for point, mode in space if mode.name not in capacities and any(
        cell.key in ctx.statuses for cell in ctx.plan.cells if cell.mode.name == mode.name)]
    while len(tried) < spec.trials:
        if started:
            mode = started.pop(0)
        else:
            point = propose_configuration(points, tried, spec.seed)
            if point is None:
                break
            mode = by_key[point_key(point)]
        reporter().stage(f"tuning: trial {len(tried) + 1} of {spec.trials}: {mode.name}")
        modes.run_mode(ctx, mode, [cell for cell in cells if cell.mode.name == mode.name])
        capacity = _landed_capacities(ctx).get(mode.name)
        tried.append((next(point for point, m in space if m.name == mode.name), capacity or 0.0))


def optuna_first_mode(ctx: RunContext) -> ModeSpec | None:
    """The configuration an optuna tuning launches first: the default, unless a resumed run had
    already searched it (then the next is not known before it is proposed)."""
    default = configurations(ctx.campaign)[0]
    return None if default.name in _landed_capacities(ctx) else default


def _landed_capacities(ctx: RunContext) -> dict[str, float | None]:
    """Each configuration done: its capacity (None: met the SLO nowhere), and None too for one
    whose server failed to start or was stopped without a search (a blocking gate): a resume does
    not launch those again."""
    return {**dict.fromkeys(finished_modes(ctx.warehouse, ctx.run_id)), **dict(_capacity_rows(ctx))}


def _capacity_rows(ctx: RunContext) -> list[tuple[str, float | None]]:
    with session(ctx.warehouse) as con:
        return con.execute("select mode, capacity from capacity where run_id = ?", [ctx.run_id]).fetchall()


def finished_modes(warehouse_path: str, run_id: str) -> set[str]:
    """Modes whose server failed to start or was stopped (their part of the run is over)."""
    with session(warehouse_path) as con:
        return {mode for (mode,) in con.execute("select mode from servers where run_id = ? and "
                                                "(stopped_at is not null or status = 'failed')", [run_id]).fetchall()}
