"""A mode's part of a campaign: start its server, gate it, run its cells one by one (landing each
before the next starts), restart the server after a fault, stop it whatever happens. A failed
cell is recorded with its cause and the campaign goes on."""

from __future__ import annotations

from servebench.campaign.outcome import blocked_reason
from servebench.config.campaign import ModeSpec, variant_label
from servebench.config.sweep import Cell, reference_knobs, with_model_variant
from servebench.orchestration.capacity import search_mode_capacity
from servebench.orchestration.cells import land_failed_cell, run_one_cell
from servebench.orchestration.context import EngineRun, RunContext, first_line, variant_key
from servebench.orchestration.servers import (
    land_failed_server,
    land_mode_server,
    restart_server,
    server_problem,
    stop_server_and_telemetry,
)
from servebench.progress import reporter
from servebench.serving.correctness import blocks_cells
from servebench.serving.deployment import Deployment, mode_nodes
from servebench.tasks.network import set_links
from servebench.tasks.serve import correctness_gate, start_mode_server


def reference_answers(ctx: RunContext, run: EngineRun, modes: list[ModeSpec]) -> None:
    """No single-worker mode of this engine (and of `modes`' model variant) in the campaign: a TP=1
    server of it answers the gate prompts once, with the knobs that change arithmetic which all of
    `modes` (those it judges, all of one model variant) share.

    If it cannot, none of those modes is compared with anything: each is marked `unchecked`,
    never silently judged against another distributed mode (nor another engine or model variant). An
    engine that starts no servers is judged only against the reference server its block names (none named:
    unchecked, `Engine.reference_problem`)."""
    numerics = {name for name, knob in run.engine.knobs.items() if knob.numerics}
    variant = modes[0].model if modes else {}
    mode = with_model_variant(run.engine.reference_mode(run.reference_name), variant)
    mode = mode.model_copy(update={"knobs": {**mode.knobs, **reference_knobs(numerics, modes)}})
    key = variant_key(mode)
    who = ("" if run is ctx.primary else f" of {run.engine.kind}") + (f" ({variant_label(variant)})" if variant else "")
    if (problem := run.engine.reference_problem(run.spec)) is not None:  # the campaign names no reference
        run.reference_problems[key] = problem
        reporter().stage(f"correctness reference{who}: {problem}; every mode{who} runs unchecked")
        return
    named = "the TP=1 reference server" if run.engine.starts_servers else "the reference server the campaign names"
    reporter().stage(f"correctness reference: starting a TP=1 server{who}" if run.engine.starts_servers
                     else f"correctness reference{who}: asking {named}")
    try:
        with ctx.stages.stage("server-start", hosts=mode_hosts(run.deployment_for(mode), mode), subject=mode.name):
            server, telemetry = start_mode_server.with_options(task_run_name=f"start-server {mode.name}")(
                run.deployment_for(mode), mode)
    except Exception as exc:
        run.reference_problems[key] = f"{named}{who} did not start: {first_line(exc)}"
        land_failed_server(ctx, run, mode, str(exc))
        reporter().stage(run.reference_problems[key] + f"; every mode{who} runs unchecked")
        return
    gate = None
    try:
        gate, run.references[key] = correctness_gate(run.engine, server, server.served_name, run.vocab, None, None)
    except Exception as exc:
        run.reference_problems[key] = f"{named}{who} did not answer the gate prompts: {first_line(exc)}"
        reporter().stage(run.reference_problems[key] + f"; every mode{who} runs unchecked")
    finally:
        stop_server_and_telemetry(ctx, run, mode, server, telemetry, gate)


def run_mode(ctx: RunContext, mode: ModeSpec, cells: list[Cell]) -> None:
    """Start the mode's server once, gate it, run its cells in order, stop it whatever happens.

    The first single-worker mode of each engine and model variant gives their reference answers."""
    run, key = ctx.engine_run(mode), variant_key(mode)
    deployment = run.deployment_for(mode)
    assert deployment is not None  # modes run only after deploy()
    reporter().stage(f"mode {mode.name}: " + ("starting the server" if run.engine.starts_servers
                                               else "attaching to its server (not servebench's)"))
    try:
        with ctx.stages.stage("server-start", hosts=mode_hosts(deployment, mode), subject=mode.name):
            server, telemetry = start_mode_server.with_options(task_run_name=f"start-server {mode.name}")(
                deployment, mode)
    except Exception as exc:
        land_failed_server(ctx, run, mode, str(exc))
        if key not in run.references and key not in run.reference_problems and ctx.gives_reference(mode):
            run.reference_problems[key] = f"the reference mode {mode.name} did not start: {first_line(exc)}"
        what = "server did not start" if run.engine.starts_servers else "server not ready"
        for cell in cells:
            land_failed_cell(ctx, cell, f"{what}: {exc}")
        return
    gate = None
    try:
        reporter().stage(f"mode {mode.name}: correctness gate")
        gate, answer = correctness_gate(run.engine, server, server.served_name, run.vocab, run.references.get(key),
                                         run.reference_problems.get(key))
        if gate.status == "reference":
            run.references[key] = answer
        land_mode_server(ctx, run, mode, server, gate)
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
        if searches(ctx, mode) and not blocks_cells(gate, ctx.campaign.correctness.accept):
            server, telemetry = search_mode_capacity(ctx, mode, server, telemetry, gate)
    except Exception as exc:
        for cell in cells:
            if cell.key not in ctx.statuses:
                land_failed_cell(ctx, cell, f"{type(exc).__name__}: {exc}")
    finally:
        stop_server_and_telemetry(ctx, run, mode, server, telemetry, gate)


def signalled_problem(ctx: RunContext, previous: Cell) -> str | None:
    """A kill or stop fault hit the server's processes in the cell before: even if its health path
    still answers (vLLM's API server outlives a Ray rank for a while), it is not trusted with the
    next cell."""
    if previous.key in ctx.signalled:
        return f"a fault signalled processes of the server in cell {previous.key}"
    return None


def apply_link(ctx: RunContext, cell: Cell) -> str | None:
    """Give the testbed's links the cell's network setting (when it changes); why not, or None."""
    if cell.link is None or cell.link.label == ctx.link:
        return None
    network, deployment = ctx.campaign.network, ctx.deployment
    # a cell has a link only in a campaign with a network axis; cells run only after deploy()
    assert network is not None and deployment is not None
    reporter().stage(f"network: links set to {cell.link.label}")
    try:
        set_links(ctx.provider, network.testbed, cell.link, deployment.nodes)
    except Exception as exc:
        ctx.link = None
        return f"the network setting {cell.link.label} could not be applied: {first_line(exc)}"
    ctx.link = cell.link.label
    return None


def searches(ctx: RunContext, mode: ModeSpec) -> bool:
    """Whether the mode's capacity is searched after its cells: a campaign with `search:`, and the
    mode among those still to search (a resume finishes only the searches that did not)."""
    return ctx.campaign.search is not None and (ctx.searches is None or mode.name in ctx.searches)


def mode_hosts(deployment: Deployment | None, mode: ModeSpec) -> int:
    """How many nodes a mode's server starts on (a stage timing's `hosts`)."""
    return len(mode_nodes(deployment.nodes, mode)) if deployment is not None else 0
