"""A mode's server through its part of a run: whether it can still serve, its row in the
warehouse, a restart after a fault, and the stop (with its telemetry) whatever happens."""

from __future__ import annotations

from pathlib import Path

from servebench.config.campaign import ModeSpec
from servebench.engines.base import RankShare
from servebench.orchestration.context import EngineRun, RunContext, first_line, log_text
from servebench.planning.memory import model_weights, rank_layout, ranks_of
from servebench.progress import reporter
from servebench.roofline.figures import rank_roofline_figures
from servebench.serving.correctness import GateResult
from servebench.serving.deployment import replica_nodes
from servebench.serving.server import Server, exit_codes, is_healthy, node_argv, stop_server
from servebench.serving.telemetry import Telemetry, stop_telemetry
from servebench.tasks.land import land_server
from servebench.tasks.serve import start_mode_server
from servebench.warehouse.landing import RankFigures, ServerGate, ServerLayout, ServerRecord


def server_problem(server: Server) -> str | None:
    """Why the mode's server cannot serve (a process ended, its node or allocation is gone), or None."""
    try:
        if is_healthy(server):
            return None
        if server.external:
            return f"the server of mode {server.mode} at {server.url} no longer answers {server.launch.health_path}"
        return (f"server of mode {server.mode} is no longer healthy (exit codes: {exit_codes(server)}); "
                f"see {server.log_path}")
    except Exception as exc:  # the provider could not even ask: that is the cause
        return f"{type(exc).__name__}: {exc}"


def restart_server(ctx: RunContext, mode: ModeSpec, server: Server, telemetry: Telemetry,
                   gate: GateResult | None, problem: str) -> tuple[Server, Telemetry]:
    """The mode's server is no longer healthy (the cell before failed with that cause): stop what
    is left of it, start it again for the mode's next cells (its gate stands: the same build and
    settings). If it does not start, that raises and the mode's remaining cells fail with it."""
    reporter().stage(f"mode {mode.name}: {problem.splitlines()[0][:160]}; restarting its server")
    run = ctx.engine_run(mode)
    stop_server_and_telemetry(ctx, run, mode, server, telemetry, gate)
    restarted, fresh = start_mode_server.with_options(task_run_name=f"restart-server {mode.name}")(
        run.deployment_for(mode), mode)
    # the mode's samples land as one set (land_samples replaces the mode's rows): the earlier servers' too
    fresh.node_files[:0], fresh.server_files[:0] = telemetry.node_files, telemetry.server_files
    land_mode_server(ctx, run, mode, restarted, gate)
    return restarted, fresh


def stop_server_and_telemetry(ctx: RunContext, run: EngineRun, mode: ModeSpec, server: Server, telemetry: Telemetry,
                              gate: GateResult | None) -> None:
    """Plain calls, not task runs: this must also work while a Ctrl-C unwinds. A stop that fails
    (its host unreachable, its allocation gone) is reported and the rest still happens: the
    server's row and samples land, and the campaign goes on to the next mode."""
    for what, stop in (("telemetry", lambda: stop_telemetry(ctx.provider, telemetry)),
                       ("server", lambda: stop_server(ctx.provider, server))):
        try:
            stop()
        except Exception as exc:
            reporter().stage(f"mode {server.mode}: stopping its {what} failed: {first_line(exc)}")
    if server.balancer is not None:
        served = ", ".join(f"{name} {count}" for name, count in server.balancer.requests.items())
        reporter().stage(f"mode {server.mode}: requests per replica ({server.balancer.policy}, nginx's access log "
                         f"{server.balancer.access_log}): {served}")
    land_mode_server(ctx, run, mode, server, gate)
    ctx.results.samples(server.mode, telemetry.node_files, telemetry.server_files)


def land_mode_server(ctx: RunContext, run: EngineRun, mode: ModeSpec, server: Server,
                     gate: GateResult | None = None) -> None:
    """The ready server's row, a plain call: its API process (a replicas mode's: r0's, its port the balancer's),
    the layout of the mode it serves, its gate, the KV capacity its log states (one replica's), its ranks; a
    server servebench did not start has no process, command or log of servebench's to land, only its URL's
    port, its life as measured and its gate."""
    api = server.api_process
    process_fields = {} if api is None else {
        "pid": api.process.pid, "command": node_argv(api.node, api.launch.argv), "env": api.launch.env,
        "log_path": str(api.log_path), "kv_capacity_tokens": run.engine.kv_capacity_tokens(log_text(api.log_path))}
    ctx.results.server(ServerRecord(
        mode=server.mode, layout=ServerLayout.of(mode), status="ready", engine=run.engine.kind,
        build_key=server_build_key(run, mode), port=server.port,
        started_at=server.started_at, ready_seconds=server.ready_seconds, stopped_at=server.stopped_at,
        gate=None if gate is None else ServerGate(status=gate.status, detail=gate.detail, divergences=[
            d.model_dump() for d in gate.first_divergence]),
        rank_figures=rank_figures(run, mode), ranks=rank_placement(run, mode), **process_fields))


def land_failed_server(ctx: RunContext, run: EngineRun, mode: ModeSpec, error: str) -> None:
    """A server of the mode that did not start, with why (a task run: Prefect shows it)."""
    land_server(ctx.results, ServerRecord.failed(mode.name, ServerLayout.of(mode), error, engine=run.engine.kind,
                                                 build_key=server_build_key(run, mode)))


def rank_placement(run: EngineRun, mode: ModeSpec) -> list[list[RankShare]] | None:
    """Each replica's processes as the engine lays them out on the replica's nodes (what `servebench plan`
    prints per node: rank0, dp1.rank0, rpc1, ...), for server_ranks; None for an engine that declares no layout
    (`rank_layout`: the model aside)."""
    d = run.deployment_for(mode)
    if d is None or d.engine.api.memory is None:
        return None
    chosen = mode.model_copy(update={"nodes": None})  # each replica's nodes, chosen already
    try:
        return [rank_layout(d.engine, chosen, d.spec, [(n.name, n.cpus) for n in nodes])
                for nodes in replica_nodes(d.nodes, mode)]
    except Exception as exc:  # context for the network view only: the server's row lands anyway
        reporter().note(f"mode {mode.name}: rank placement unknown: {first_line(exc)}")
        return None


def rank_figures(run: EngineRun, mode: ModeSpec) -> RankFigures | None:
    """The mode's largest rank from its model's shape (servebench/planning/memory.py): its weights, a
    token's KV and its parameters, and how many ranks share a node (cell_roofline, docs/roofline.md);
    None for a shape not known."""
    d = run.deployment_for(mode)
    if d is None or d.engine.api.memory is None:
        return None
    try:
        weights = model_weights(d.campaign.model, d.engine, Path(d.model_dir))
        if weights.shape is None:
            return None
        # named as allocated (Slurm: not node1); a replicas mode's ranks are one replica's (each is alike)
        chosen = [(n.name, n.cpus) for n in replica_nodes(d.nodes, mode)[0]]
        shares = [s for s in ranks_of(d.engine, mode.model_copy(update={"nodes": None}), d.spec, chosen,
                                      weights.shape) if s.layers]
    except Exception as exc:  # context for the roofline only: the server's row lands anyway
        reporter().note(f"mode {mode.name}: bytes per rank unknown: {first_line(exc)}")
        return None
    return RankFigures(**rank_roofline_figures(weights, shares)) if shares else None


def server_build_key(run: EngineRun, mode: ModeSpec) -> str | None:
    """The build a server ran: its mode's own (`build:`), else its engine's (None: no build of servebench's)."""
    deployment = run.deployment_for(mode)
    return deployment.build.key if deployment is not None and deployment.build is not None else None
