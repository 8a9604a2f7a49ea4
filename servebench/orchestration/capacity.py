"""A mode's capacity search inside a campaign (`search:`): the searching itself is
`servebench.analysis.capacity`; here every probe is a cell of the mode, measured and landed like
the others, against the mode's server (restarted if a probe left it unhealthy).

A probe cell the load generator alone made invalid is measured again by the cell's own retries
(`validity.retries`, orchestration/cells.py: same key, every attempt kept), so the search does not measure
it again itself (`client_retries=0`: a second call would find the cell landed); still invalid, the
search stops there. A probe never lasts longer than MAX_PROBE_S: the search's lowest rate is
`probe_floor` of the campaign's requests."""

from __future__ import annotations

from servebench.analysis.capacity import Probe as CapacityProbe
from servebench.analysis.capacity import SearchSettings, judge, observed_from_summary, probe_floor, search_capacity
from servebench.config.campaign import ModeSpec
from servebench.config.sweep import Cell, search_cell
from servebench.orchestration.cells import land_result_file, result_file, run_one_cell
from servebench.orchestration.context import RunContext
from servebench.orchestration.servers import restart_server, server_problem
from servebench.progress import reporter
from servebench.serving.correctness import GateResult
from servebench.serving.server import Server
from servebench.serving.telemetry import Telemetry


def search_mode_capacity(ctx: RunContext, mode: ModeSpec, server: Server, telemetry: Telemetry,
                         gate: GateResult) -> tuple[Server, Telemetry]:
    """The mode's capacity under the campaign's SLO (servebench/analysis/capacity.py): every probe
    a cell (`<mode>.cap.<point>.r0`), landed like the others; the result in `capacity`. A server
    found unhealthy between probes is restarted; the probe it failed counts as a miss."""
    spec, slo = ctx.campaign.search, ctx.campaign.slo
    assert spec is not None  # only a campaign with a search searches a mode's capacity
    current_server, current_telemetry = server, telemetry
    probe_cells: list[str] = []

    def probe_once(value: float, repeat: int) -> CapacityProbe:
        nonlocal current_server, current_telemetry
        cell = search_cell(ctx.campaign, mode, value, repeat)
        land_result_file(ctx, cell, search_probe=True)  # measured, not landed, before a resume
        if cell.key in ctx.statuses:  # measured by the run's earlier attempt (a resume): its verdict stands
            probe_cells.append(cell.key)
            return landed_probe(ctx, cell, value)
        if (problem := server_problem(current_server)) is not None:
            current_server, current_telemetry = restart_server(ctx, mode, current_server, current_telemetry, gate,
                                                               problem)
        reporter().cell_started(cell.key, mode.name, len(ctx.statuses), ctx.planned_cells)
        probe_cells.append(cell.key)
        summary = run_one_cell(ctx, cell, current_server, gate.status, search_probe=True)
        if summary is None:  # failed without a measurement
            return judge(value, {key: None for key in slo}, slo, valid=False)
        completed = ctx.statuses[cell.key] == "completed"  # a failed cell is the server's, whatever the client said
        return judge(value, observed_from_summary(summary, slo), slo,
                     valid=completed and bool(summary.get("valid", True)),
                     reasons=summary.get("invalid_reasons", []) if completed else [],
                     attempts=measurements(ctx, cell), client_lag_ms=(summary.get("schedule_lag_ms") or {}).get("p99"))

    def probe(value: float) -> CapacityProbe:
        """The point meets the SLO only if every repeat does (the first miss ends the repeats)."""
        verdict = probe_once(value, 0)
        for repeat in range(1, spec.repeats):
            if not verdict.met:
                break
            verdict = probe_once(value, repeat)
        return verdict

    reporter().stage(f"mode {mode.name}: capacity search over {spec.over} for SLO {slo}")
    result = search_capacity(probe, search_settings(ctx))
    ctx.results.capacity(mode, spec.over, slo, result, probe_cells)
    unit = "clients" if spec.over == "clients" else "req/s"
    reporter().stage(f"mode {mode.name}: capacity {result.capacity if result.capacity is not None else 'none'} "
                     f"{unit} (missed at {result.upper}), {len(result.probes)} probes: {result.why}")
    return current_server, current_telemetry


def search_settings(ctx: RunContext) -> SearchSettings:
    """The campaign's `search:` as the pure search's settings: no rate below where a probe of the
    campaign's requests would outlast MAX_PROBE_S; a client-limited probe not measured again by
    the search (the cell's own `validity.retries` did)."""
    spec, load = ctx.campaign.search, ctx.campaign.load
    assert spec is not None  # only a campaign with a search has its settings
    floor = {} if spec.over == "clients" else {"min_value": probe_floor(load.requests, load.duration)}
    return SearchSettings(start=spec.start, precision=spec.precision, max_probes=spec.max_probes,
                          max_value=spec.max_value, integer=spec.over == "clients", client_retries=0, **floor)


def measurements(ctx: RunContext, cell: Cell) -> int:
    """How many times the cell was measured: its result, and each attempt superseded as invalid
    (`<key>.attempt<N>.json`, `supersede_attempt` in orchestration/cells.py)."""
    output = result_file(ctx, cell)
    return 1 + sum(1 for _ in output.parent.glob(f"{cell.key}.attempt*.json"))


def landed_probe(ctx: RunContext, cell: Cell, value: float) -> CapacityProbe:
    """A probe cell already in the warehouse, as the search's verdict: what it measured and
    whether it met the SLO, as landed (nothing is measured twice)."""
    slo = ctx.campaign.slo
    row = ctx.results.landed_cell(cell.key)
    completed = row["status"] == "completed"
    verdict = judge(value, {key: row.get(key) for key in slo}, slo, valid=completed and bool(row["valid"]),
                    reasons=(row["invalid_reasons"] or []) if completed else [],
                    attempts=measurements(ctx, cell), client_lag_ms=row.get("schedule_lag_p99_ms"))
    # cells keep p50 and p99 only
    return verdict.model_copy(update={"met": bool(row["slo_met"])})
