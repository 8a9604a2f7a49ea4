"""A mode's part of a campaign: start its server, gate it, run its cells one by one (landing each
before the next starts), restart the server after a fault, stop it whatever happens. A failed
cell is recorded with its cause and the campaign goes on."""

from __future__ import annotations

import re

from datetime import datetime
from pathlib import Path

from flows.context import EngineRun, RunContext, first_line, log_text
from flows.search import search_mode_capacity
from servebench import landing
from servebench.analysis.capacity import judge, observed_from_summary
from servebench.campaign.schema import ModeSpec
from servebench.campaign.sweep import Cell, reference_knobs
from servebench.load.runner import load_result
from servebench.progress import reporter
from servebench.serving.correctness import GateResult, blocks_cells
from servebench.serving.faults import FaultTimer
from servebench.serving.server import Server, exit_codes, is_healthy, node_argv
from tasks.faults import land_faults, start_cell_faults
from tasks.land import land_cell, land_server, session
from tasks.load import cell_load_config, progress_path, requests_csv_path, run_cell_load
from tasks.network import set_links
from tasks.serve import correctness_gate, start_mode_server, stop_mode_server
from tasks.telemetry import Telemetry, stop_telemetry


def reference_answers(ctx: RunContext, run: EngineRun, modes: list[ModeSpec]) -> None:
    """No single-worker mode of this engine in the campaign: a TP=1 server of it answers the gate
    prompts once, with the knobs that change arithmetic which all of `modes` (those it judges) share.

    If it cannot, none of the engine's modes is compared with anything: each is marked `unchecked`,
    never silently judged against another distributed mode (nor against another engine)."""
    numerics = {name for name, knob in run.engine.knobs.items() if knob.numerics}
    mode = run.engine.reference_mode(run.reference_name)
    mode = mode.model_copy(update={"knobs": {**mode.knobs, **reference_knobs(numerics, modes)}})
    who = "" if run is ctx.primary else f" of {run.engine.kind}"
    reporter().stage(f"correctness reference: starting a TP=1 server{who}")
    try:
        server, telemetry = start_mode_server.with_options(task_run_name=f"start-server {mode.name}")(
            run.deployment, mode)
    except Exception as exc:
        run.reference_problem = f"the TP=1 reference server{who} did not start: {first_line(exc)}"
        land_server(ctx.warehouse, ctx.run_id, mode=mode.name, pid=None, port=None, command=[], env={},
                    log_path=None, started_at=None, ready_seconds=None, stopped_at=None, status="failed",
                    error=str(exc))
        reporter().stage(run.reference_problem + f"; every mode{who} runs unchecked")
        return
    gate = None
    try:
        gate, run.reference = correctness_gate(run.engine, server, ctx.served_name, run.vocab, None, None)
    except Exception as exc:
        run.reference_problem = f"the TP=1 reference server{who} did not answer the gate prompts: {first_line(exc)}"
        reporter().stage(run.reference_problem + f"; every mode{who} runs unchecked")
    finally:
        stop_server_and_telemetry(ctx, server, telemetry, gate)


def run_mode(ctx: RunContext, mode: ModeSpec, cells: list[Cell]) -> None:
    """Start the mode's server once, gate it, run its cells in order, stop it whatever happens.

    The first single-worker mode of each engine gives that engine's reference answers."""
    run = ctx.engine_run(mode)
    reporter().stage(f"mode {mode.name}: starting the server")
    try:
        server, telemetry = start_mode_server.with_options(task_run_name=f"start-server {mode.name}")(
            run.deployment_for(mode), mode)
    except Exception as exc:
        land_server(ctx.warehouse, ctx.run_id, mode=mode.name, engine=run.engine.kind,
                    build_key=run.deployment_for(mode).build.key, pid=None, port=None, command=[], env={},
                    log_path=None, started_at=None, ready_seconds=None, stopped_at=None, status="failed",
                    error=str(exc))
        if run.reference is None and run.reference_problem is None and ctx.gives_reference(mode):
            run.reference_problem = f"the reference mode {mode.name} did not start: {first_line(exc)}"
        for cell in cells:
            land_failed_cell(ctx, cell, f"server did not start: {exc}")
        return
    gate = None
    try:
        reporter().stage(f"mode {mode.name}: correctness gate")
        gate, answer = correctness_gate(run.engine, server, ctx.served_name, run.vocab, run.reference,
                                         run.reference_problem)
        if gate.status == "reference":
            run.reference = answer
        land_mode_server(ctx, server, "ready", gate)
        reporter().stage(f"mode {mode.name}: gate {gate.status}: {gate.detail}")
        for index, cell in enumerate(cells):
            reporter().cell_started(cell.key, cell.mode.name, len(ctx.statuses), ctx.planned_cells)
            if index and (problem := server_problem(server) or signalled_problem(ctx, cells[index - 1])):
                server, telemetry = restart_server(ctx, mode, server, telemetry, gate, problem)
            if blocks_cells(gate, ctx.campaign.correctness.accept):
                land_failed_cell(ctx, cell, blocked_reason(gate, ctx.campaign.correctness.accept),
                                 correctness=gate.status)
            elif (problem := apply_link(ctx, cell)) is not None:
                land_failed_cell(ctx, cell, problem, correctness=gate.status)
            else:
                run_one_cell(ctx, cell, server, gate.status)
        searched = ctx.campaign.search is not None and (ctx.searches is None or mode.name in ctx.searches)
        if searched and not blocks_cells(gate, ctx.campaign.correctness.accept):
            server, telemetry = search_mode_capacity(ctx, mode, server, telemetry, gate)
    except Exception as exc:
        for cell in cells:
            if cell.key not in ctx.statuses:
                land_failed_cell(ctx, cell, f"{type(exc).__name__}: {exc}")
    finally:
        stop_server_and_telemetry(ctx, server, telemetry, gate)


def signalled_problem(ctx: RunContext, previous: Cell) -> str | None:
    """A kill or stop fault hit the server's processes in the cell before: even if its health path
    still answers (vLLM's API server outlives a Ray rank for a while), it is not trusted with the
    next cell."""
    if previous.key in ctx.signalled:
        return f"a fault signalled processes of the server in cell {previous.key}"
    return None


def restart_server(ctx: RunContext, mode: ModeSpec, server: Server, telemetry: Telemetry,
                   gate: GateResult | None, problem: str) -> tuple[Server, Telemetry]:
    """The mode's server is no longer healthy (the cell before failed with that cause): stop what
    is left of it, start it again for the mode's next cells (its gate stands: the same build and
    settings). If it does not start, that raises and the mode's remaining cells fail with it."""
    reporter().stage(f"mode {mode.name}: {problem.splitlines()[0][:160]}; restarting its server")
    stop_server_and_telemetry(ctx, server, telemetry, gate)
    restarted, fresh = start_mode_server.with_options(task_run_name=f"restart-server {mode.name}")(
        ctx.engine_run(mode).deployment_for(mode), mode)
    # the mode's samples land as one set (land_samples replaces the mode's rows): the earlier servers' too
    fresh.node_files[:0], fresh.server_files[:0] = telemetry.node_files, telemetry.server_files
    land_mode_server(ctx, restarted, "ready", gate)
    return restarted, fresh


def apply_link(ctx: RunContext, cell: Cell) -> str | None:
    """Give the testbed's links the cell's network setting (when it changes); why not, or None."""
    if cell.link is None or cell.link.label == ctx.link:
        return None
    reporter().stage(f"network: links set to {cell.link.label}")
    try:
        set_links(ctx.campaign.network.testbed, cell.link, [node.name for node in ctx.deployment.nodes])
    except Exception as exc:
        ctx.link = None
        return f"the network setting {cell.link.label} could not be applied: {first_line(exc)}"
    ctx.link = cell.link.label
    return None


def blocked_reason(gate: GateResult, accept: str) -> str:
    if gate.status == "close":
        return f"correctness gate close but the campaign demands equal tokens (correctness.accept: {accept}): " \
               f"{gate.detail}"
    return f"correctness gate failed: {gate.detail}"


def stop_server_and_telemetry(ctx: RunContext, server: Server, telemetry: Telemetry, gate: GateResult | None) -> None:
    """Plain calls, not task runs: this must also work while a Ctrl-C unwinds. A stop that fails
    (its host unreachable, its allocation gone) is reported and the rest still happens: the
    server's row and samples land, and the campaign goes on to the next mode."""
    for what, stop in (("telemetry", lambda: stop_telemetry.fn(ctx.provider, telemetry)),
                       ("server", lambda: stop_mode_server.fn(ctx.provider, server))):
        try:
            stop()
        except Exception as exc:
            reporter().stage(f"mode {server.mode}: stopping its {what} failed: {first_line(exc)}")
    land_mode_server(ctx, server, "ready", gate)
    with session(ctx.warehouse) as con:
        landing.land_samples(con, ctx.run_id, server.mode, telemetry.node_files, telemetry.server_files)


def server_problem(server: Server) -> str | None:
    """Why the mode's server cannot serve (a process ended, its node or allocation is gone), or None."""
    try:
        if is_healthy(server):
            return None
        return (f"server of mode {server.mode} is no longer healthy (exit codes: {exit_codes(server)}); "
                f"see {server.log_path}")
    except Exception as exc:  # the provider could not even ask: that is the cause
        return f"{type(exc).__name__}: {exc}"


def run_one_cell(ctx: RunContext, cell: Cell, server: Server, correctness: str | None,
                 search_probe: bool = False) -> dict | None:
    """Measure one cell and land it; return its load summary (None: nothing was measured)."""
    problem = server_problem(server)
    if problem is not None:
        land_failed_cell(ctx, cell, problem, search_probe=search_probe)
        return None
    run = ctx.engine_run(cell.mode)
    config = cell_load_config(ctx.campaign, cell, server.url, ctx.served_name, run.vocab, ctx.plan.client,
                              run.engine, server.launch.health_path)
    output = ctx.run_dir / "cells" / f"{cell.key}.json"
    started = landing.now()
    log_from = log_size(server.log_path)
    timers = start_faults(ctx, cell, server)
    try:
        result = run_cell_load.with_options(task_run_name=f"load {cell.key}")(
            config, str(output), run.deployment.client, mark=f"{ctx.provider.run_id}.load")
    except BaseException as exc:
        if not isinstance(exc, Exception):  # Ctrl-C, SIGTERM: undo the faults (a cut host, a full /dev/shm)
            for timer in timers:
                timer.finish()
            raise
        land_failed_cell(ctx, cell, str(exc) + finish_faults(ctx, cell, timers)[0], started, correctness,
                         search_probe=search_probe)
        return None
    injected, faulted = finish_faults(ctx, cell, timers)
    summary = result["summary"]
    overloaded = ctx.campaign.validity.errors_are_measurements and summary["failed"] > 0
    status = "completed" if summary["completed"] > 0 or overloaded else "failed"
    error = None if status == "completed" else f"every request failed: {summary['errors']}"
    hung = (summary.get("hung") or {}).get("reason")
    if (problem := server_problem(server)) is not None or hung:
        # a process of the server ended, it hung, or its node went away during the cell: what it
        # measured lands, but the cell failed, with the cause
        cause = "; ".join(filter(None, [hung, problem]))
        status, error = "failed", f"{cause} (during the cell: {summary['completed']} requests answered, " \
                                  f"{summary['failed']} failed){injected}"
    elif status == "failed":
        error += injected
    elif faulted:  # the server survived it, but these numbers measure the fault: never a night's result
        status, error = "failed", f"a fault was injected into the cell (what it measured lands with it){injected}"
    land_cell.fn(  # a plain call: a measured cell lands even when the orchestration API falters
        ctx.warehouse, ctx.run_id, cell, input_len=ctx.campaign.load.input_len,
        output_len=ctx.campaign.load.output_len, status=status, error=error, started_at=started,
        ended_at=landing.now(), result=result, result_path=str(output), correctness=correctness,
        requests_csv=Path(requests_csv_path(str(output))), search_probe=search_probe,
        slo_met=slo_verdict(ctx.campaign.slo, cell, summary, status),
        kv_failures=count_in_log(server.log_path, log_from, run.engine.kv_failure_pattern))
    ctx.statuses[cell.key] = status
    if status == "completed" and not summary.get("valid", True):
        ctx.invalid[cell.key] = list(summary["invalid_reasons"])
    throughput = summary.get("output_throughput") or 0.0
    busy = (summary.get("client") or {}).get("core_fraction")
    verdict = "" if summary.get("valid", True) else "  INVALID: " + "; ".join(summary["invalid_reasons"])
    reporter().cell_finished(cell.key, status, f"{summary['completed']} ok, {summary['failed']} failed, "
                             f"{throughput:.1f} tok/s, gate {correctness}"
                             + (f", client CPU {busy:.0%}" if busy is not None else "") + verdict)
    return summary


def log_size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def count_in_log(path: Path | None, start: int, pattern: str | None) -> int | None:
    """Lines matching the engine's pattern written to the server log since byte `start` (the
    cell's KV failures); None when the engine has no such line."""
    if pattern is None or path is None:
        return None
    try:
        with open(path, "rb") as log:
            log.seek(start)
            text = log.read().decode(errors="replace")
    except OSError:
        return None
    return len(re.findall(pattern, text))


def land_result_file(ctx: RunContext, cell: Cell, search_probe: bool = False) -> bool:
    """Land a cell measured but not landed before the run was cut (its complete JSON in the run
    directory; the load generator writes it last and atomically). Whether it did."""
    output = ctx.run_dir / "cells" / f"{cell.key}.json"
    if cell.key in ctx.statuses or not output.exists():
        return False
    result = load_result(output)
    summary = result["summary"]
    status = "completed" if summary["completed"] > 0 else "failed"
    error = None if status == "completed" else f"every request failed: {summary['errors']}"
    faulted = any(fault.cell == cell.key for fault in ctx.campaign.faults)
    if (hung := (summary.get("hung") or {}).get("reason")) or faulted:  # as run_one_cell would have judged it
        status, error = "failed", hung or "a fault was planned for the cell (landed from its result file after " \
                                          "an interrupt: whether it hit is not known)"
    with session(ctx.warehouse) as con:
        landing.land_cell(con, ctx.run_id, cell, input_len=ctx.campaign.load.input_len,
                          output_len=ctx.campaign.load.output_len, status=status, error=error, started_at=None,
                          ended_at=landing.now(), result=result, result_path=str(output),
                          requests_csv=Path(requests_csv_path(str(output))), search_probe=search_probe,
                          slo_met=slo_verdict(ctx.campaign.slo, cell, summary, status))
    ctx.statuses[cell.key] = status
    return True


def slo_verdict(slo: dict[str, float], cell: Cell, summary: dict, status: str) -> bool | None:
    """Whether the cell met the campaign's SLO (valid, every limit held); None without an SLO."""
    if not slo:
        return None
    point = cell.point.rate if cell.point.kind == "open" else cell.point.clients
    return judge(point, observed_from_summary(summary, slo), slo,
                 valid=status == "completed" and bool(summary.get("valid", True))).met


def start_faults(ctx: RunContext, cell: Cell, server: Server) -> list[FaultTimer]:
    """The campaign's faults for this cell, each on its node (default: the API server's)."""
    local_load = ctx.engine_run(cell.mode).deployment_for(cell.mode).client is None
    output = ctx.run_dir / "cells" / f"{cell.key}.json"
    return start_cell_faults(ctx.campaign.faults, cell.key, server.api.node, ctx.deployment.sampled_nodes,
                             ctx.provider, progress_path(str(output)) if local_load else None)


def finish_faults(ctx: RunContext, cell: Cell, timers: list[FaultTimer]) -> tuple[str, bool]:
    """Land what the cell's faults did; return it as a clause for the cell's error ('' if none), and
    whether any of them hit something."""
    if not timers:
        return "", False
    injected = [timer.finish() for timer in timers]
    land_faults(ctx.warehouse, ctx.run_id, cell.key, cell.mode.name, injected)
    for fault in injected:
        reporter().stage(fault.describe())
    if any(fault.hit and fault.spec.action in ("kill", "stop") for fault in injected):
        ctx.signalled.add(cell.key)
    return "; injected: " + "; ".join(fault.describe() for fault in injected), any(f.hit for f in injected)


def land_failed_cell(ctx: RunContext, cell: Cell, error: str, started: datetime | None = None,
                     correctness: str | None = None, search_probe: bool = False) -> None:
    land_cell.fn(  # a plain call: a measured cell lands even when the orchestration API falters
        ctx.warehouse, ctx.run_id, cell, input_len=ctx.campaign.load.input_len,
        output_len=ctx.campaign.load.output_len, status="failed", error=error, started_at=started,
        ended_at=landing.now(), result=None, result_path=None, correctness=correctness, search_probe=search_probe,
        slo_met=False if ctx.campaign.slo else None)
    ctx.statuses[cell.key] = "failed"
    reporter().cell_finished(cell.key, "failed", error.splitlines()[0][:160])


def land_mode_server(ctx: RunContext, server: Server, status: str, gate: GateResult | None = None) -> None:
    api = server.api
    run = ctx.engine_serving(server.mode)
    engine = run.engine
    land_server.fn(ctx.warehouse, ctx.run_id, mode=server.mode, engine=engine.kind,
                   build_key=server_build_key(ctx, run, server.mode), pid=api.process.pid, port=server.port,
                   command=node_argv(api.node, api.launch.argv), env=api.launch.env, log_path=str(server.log_path),
                   started_at=server.started_at, ready_seconds=server.ready_seconds, stopped_at=server.stopped_at,
                   status=status, error=None, correctness=gate.status if gate else None,
                   correctness_detail=gate.detail if gate else None,
                   correctness_divergences=[d.model_dump() for d in gate.first_divergence] if gate else None,
                   kv_capacity_tokens=engine.kv_capacity_tokens(log_text(server.log_path)))


def server_build_key(ctx: RunContext, run: EngineRun, server_mode: str) -> str | None:
    """The build a server ran: its mode's own (`build:`), else its engine's."""
    from servebench.campaign.sweep import configurations

    mode = next((m for m in configurations(ctx.campaign) if m.name == server_mode), None)
    deployment = run.deployment_for(mode) if mode is not None else run.deployment
    return deployment.build.key if deployment is not None else None
