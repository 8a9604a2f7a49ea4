"""A mode's server through its part of a run: whether it can still serve, its row in the
warehouse, a restart after a fault, and the stop (with its telemetry) whatever happens."""

from __future__ import annotations

from pathlib import Path

from servebench.config.campaign import ModeSpec
from servebench.config.sweep import configurations
from servebench.engines.base import RankShare
from servebench.orchestration.context import EngineRun, RunContext, first_line, log_text
from servebench.planning.memory import model_weights, rank_layout, ranks_of
from servebench.progress import reporter
from servebench.roofline.figures import rank_roofline_figures
from servebench.serving.correctness import GateResult
from servebench.serving.deployment import replica_nodes
from servebench.serving.sampling import stop_telemetry
from servebench.serving.server import Server, exit_codes, is_healthy, node_argv, stop_server
from servebench.serving.telemetry import Telemetry
from servebench.tasks.serve import start_mode_server
from servebench.warehouse import landing, store


def server_problem(server: Server) -> str | None:
    """Why the mode's server cannot serve (a process ended, its node or allocation is gone), or None."""
    try:
        if is_healthy(server):
            return None
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
    stop_server_and_telemetry(ctx, server, telemetry, gate)
    restarted, fresh = start_mode_server.with_options(task_run_name=f"restart-server {mode.name}")(
        ctx.engine_run(mode).deployment_for(mode), mode)
    # the mode's samples land as one set (land_samples replaces the mode's rows): the earlier servers' too
    fresh.node_files[:0], fresh.server_files[:0] = telemetry.node_files, telemetry.server_files
    land_mode_server(ctx, restarted, "ready", gate)
    return restarted, fresh


def stop_server_and_telemetry(ctx: RunContext, server: Server, telemetry: Telemetry, gate: GateResult | None) -> None:
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
    land_mode_server(ctx, server, "ready", gate)
    with store.session(ctx.warehouse) as con:
        landing.land_samples(con, ctx.run_id, server.mode, telemetry.node_files, telemetry.server_files)


def land_mode_server(ctx: RunContext, server: Server, status: str, gate: GateResult | None = None) -> None:
    """The server's row: its API process (a replicas mode's: r0's, its port the balancer's), its gate, and the
    KV capacity its log states (one replica's), a plain call; the layout (replicas, balancer) from the run's spec."""
    api = server.api
    run = ctx.engine_serving(server.mode)
    engine = run.engine
    with store.session(ctx.warehouse) as con:
        landing.land_server(
            con, ctx.run_id, mode=server.mode, engine=engine.kind, build_key=server_build_key(ctx, run, server.mode),
            pid=api.process.pid, port=server.port, command=node_argv(api.node, api.launch.argv), env=api.launch.env,
            log_path=str(server.log_path), started_at=server.started_at, ready_seconds=server.ready_seconds,
            stopped_at=server.stopped_at, status=status, error=None, correctness=gate.status if gate else None,
            correctness_detail=gate.detail if gate else None,
            correctness_divergences=[d.model_dump() for d in gate.first_divergence] if gate else None,
            kv_capacity_tokens=engine.kv_capacity_tokens(log_text(server.log_path)),
            rank_figures=rank_figures(ctx, run, server.mode), ranks=rank_placement(ctx, run, server.mode))


def served_mode(ctx: RunContext, run: EngineRun, server_mode: str) -> ModeSpec | None:
    """The mode a server serves, by its name: a configuration (`<default>-again` is its default's, the longest
    name it starts with), or the engine's reference (a variant's too); None for neither."""
    if server_mode == run.reference_name or server_mode.startswith(run.reference_name + "-"):
        return run.engine.reference_mode(run.reference_name)
    matching = [m for m in configurations(ctx.campaign)
                if m.name == server_mode or server_mode.startswith(m.name + "-")]
    return max(matching, key=lambda m: len(m.name)) if matching else None


def rank_placement(ctx: RunContext, run: EngineRun, server_mode: str) -> list[list[RankShare]] | None:
    """Each replica's processes as the engine lays them out on the replica's nodes (what `servebench plan`
    prints per node: rank0, dp1.rank0, rpc1, ...), for server_ranks; None for a server of no mode or an engine
    that declares no layout (`rank_layout`: the model aside)."""
    mode = served_mode(ctx, run, server_mode)
    d = run.deployment_for(mode) if mode is not None else None
    if mode is None or d is None or d.engine.api.memory is None:
        return None
    chosen = mode.model_copy(update={"nodes": None})  # each replica's nodes, chosen already
    try:
        return [rank_layout(d.engine, chosen, d.spec, [(n.name, n.cpus) for n in nodes])
                for nodes in replica_nodes(d.nodes, mode)]
    except Exception as exc:  # context for the network view only: the server's row lands anyway
        reporter().note(f"mode {server_mode}: rank placement unknown: {first_line(exc)}")
        return None


def rank_figures(ctx: RunContext, run: EngineRun, server_mode: str) -> dict | None:
    """The mode's largest rank from its model's shape (servebench/planning/memory.py): its weights, a
    token's KV and its parameters, and how many ranks share a node (cell_roofline, docs/roofline.md);
    None for a server of no campaign mode (a reference) or a shape not known."""
    mode = next((m for m in configurations(ctx.campaign) if m.name == server_mode), None)
    d = run.deployment_for(mode) if mode is not None else None
    if mode is None or d is None or d.engine.api.memory is None:
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
        reporter().note(f"mode {server_mode}: bytes per rank unknown: {first_line(exc)}")
        return None
    return rank_roofline_figures(weights, shares) if shares else None


def server_build_key(ctx: RunContext, run: EngineRun, server_mode: str) -> str | None:
    """The build a server ran: its mode's own (`build:`), else its engine's."""
    mode = next((m for m in configurations(ctx.campaign) if m.name == server_mode), None)
    deployment = run.deployment_for(mode) if mode is not None else run.deployment
    return deployment.build.key if deployment is not None else None
