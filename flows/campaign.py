"""The campaign flow: provision, build, model, then for each mode serve -> load -> land, then
regressions against the history, then report. `campaign_resume` finishes a run whose
orchestrator was killed (or reruns a finished run's failed cells) through the same stages.

Every finished cell is landed before the next one starts; a failed cell is recorded with
its cause and the campaign goes on; on Ctrl-C or any error every server is stopped and
what was measured stays in the warehouse.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_link_artifact
from prefect.exceptions import TerminationSignal

import warehouse
from servebench import landing
from servebench.build.model import vocab_size
from servebench.campaign.loading import load_campaign
from servebench.campaign.placement import split_client_node
from servebench.campaign.plan import Plan, group_by_mode, make_plan
from servebench.campaign.resume import cells_to_run, load_resumable, write_orchestrator_file
from servebench.campaign.schema import Campaign, GeneratedModelSpec, ModeSpec
from servebench.analysis.capacity import Probe as CapacityProbe
from servebench.analysis.capacity import SearchSettings, judge, observed_from_summary, search_capacity
from servebench.campaign.sweep import Cell, configurations, search_cell
from servebench.engines import Engine, get_engine
from servebench.load.runner import load_result
from servebench.paths import runs_dir
from servebench.progress import reporter
from servebench.providers import Provider, claims, get_provider, get_provider_class
from servebench.providers.claims import HeldClaims, this_host_cpu_claims
from servebench.serving.correctness import GateAnswer, GateResult, blocks_cells
from servebench.serving.faults import FaultTimer
from servebench.serving.server import Server, exit_codes, is_healthy
from tasks.build import build_engine
from tasks.distribute import place_artifacts
from tasks.faults import land_faults, start_cell_faults
from tasks.land import (land_build, land_capacity, land_cell, land_nodes, land_placements, land_run_start,
                        land_run_update, land_server, land_tuning, session)
from tasks.load import ClientNode, cell_load_config, requests_csv_path, run_cell_load
from tasks.model import prepare_model
from tasks.network import clear_links, set_links
from tasks.provision import provision
from tasks.regressions import detect_regressions, publish_regressions
from tasks.report import render_report
from tasks.serve import Deployment, correctness_gate, start_mode_server, stop_mode_server
from tasks.shared import start_shared_services, stop_shared_services
from tasks.telemetry import Telemetry, stop_telemetry

REFERENCE_MODE = "reference-tp1"


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


@dataclass
class RunContext:
    """The state one campaign run threads through its stages (set once, read everywhere)."""

    plan: Plan
    engine: Engine
    provider: Provider                             # one per run: allocates, holds and releases the nodes
    warehouse: str
    run_id: str
    run_dir: Path
    campaign_dir: Path                             # relative paths in the campaign (a model) are from here
    deployment: Deployment | None = None           # nodes, build, model, shared services: set once provisioned
    vocab: int = 0
    reference: GateAnswer | None = None            # the TP=1 answers every other mode is judged against
    reference_problem: str | None = None           # why there is no reference: every mode is then unchecked
    link: str | None = None                        # the network setting the testbed's links have now
    claims: HeldClaims | None = None               # what the run has to itself (nodes' CPUs), until release
    statuses: dict[str, str] = field(default_factory=dict)          # cell key -> completed | failed
    invalid: dict[str, list[str]] = field(default_factory=dict)     # cell key -> the generator's reasons

    @property
    def campaign(self) -> Campaign:
        return self.plan.campaign

    @property
    def served_name(self) -> str:
        return served_name(self.campaign)


@flow(name="campaign-run", log_prints=False)
def campaign_run(campaign_file: str, warehouse_path: str | None = None) -> dict:
    """Run every cell of a campaign file and land the results; return where they are."""
    campaign = load_campaign(campaign_file)
    plan = make_plan(campaign, get_provider_class(campaign.provider.kind).host_cpus())
    wh = str(warehouse_path or warehouse.default_path())
    run_id = new_run_id()
    run_dir = runs_dir() / run_id
    run_dir.mkdir(parents=True)
    shutil.copy(campaign_file, run_dir / "campaign.yaml")
    land_run_start(wh, run_id=run_id, campaign=campaign.name, spec_hash=campaign.spec_hash(),
                   spec_text=Path(campaign_file).read_text(), spec_normalized=campaign.normalized(),
                   campaign_file=str(Path(campaign_file).resolve()), run_dir=run_dir)
    ctx = new_context(plan, wh, run_id, run_dir, Path(campaign_file).resolve().parent)
    return run_cells(ctx, plan.cells)


@flow(name="campaign-resume", log_prints=False)
def campaign_resume(run_id: str, warehouse_path: str | None = None, failed_only: bool = False) -> dict:
    """Finish a run whose orchestrator was killed: what it left running is stopped, results in its
    run directory are landed, and only cells with no result are measured (`failed_only`: the
    failed cells of a finished run are measured again instead)."""
    wh = str(warehouse_path or warehouse.default_path())
    run, campaign = load_resumable(wh, run_id, failed_only)
    run_dir = Path(run["run_dir"])
    plan = make_plan(campaign, get_provider_class(campaign.provider.kind).host_cpus())
    ctx = new_context(plan, wh, run_id, run_dir, Path(run["campaign_file"]).parent)
    reclaimed = ctx.provider.reclaim(json.loads(run["allocation"] or "{}"))
    for line in reclaimed:
        reporter().stage(f"reclaimed: {line}")
    with session(wh) as con:
        ctx.statuses.update(landing.cell_statuses(con, run_id))
        ctx.invalid.update(landing.invalid_cells(con, run_id))
    before = set(ctx.statuses)
    land_measured_cells(ctx)
    todo = cells_to_run(plan.cells, ctx.statuses, failed_only)
    for cell in todo:
        ctx.statuses.pop(cell.key, None)
        ctx.invalid.pop(cell.key, None)
    note = {"at": landing.now().isoformat(), "kind": "rerun-failed" if failed_only else "resume",
            "status_before": run["status"], "landed_from_run_dir": sorted(set(ctx.statuses) - before),
            "measured": [cell.key for cell in todo], "reclaimed": reclaimed}
    with session(wh) as con:
        landing.note_resume(con, run_id, note)
    reporter().stage(f"{note['kind']} of run {run_id}: {len(note['landed_from_run_dir'])} cell(s) landed from the "
                     f"run directory, {len(todo)} to measure")
    return run_cells(ctx, todo)


def new_context(plan: Plan, wh: str, run_id: str, run_dir: Path, campaign_dir: Path) -> RunContext:
    campaign = plan.campaign
    return RunContext(plan=plan, engine=get_engine(campaign.engine.kind),
                      provider=get_provider(campaign, plan.client.reserved_on_nodes, run_id=run_id), warehouse=wh,
                      run_id=run_id, run_dir=run_dir, campaign_dir=campaign_dir)


def run_cells(ctx: RunContext, cells: list[Cell]) -> dict:
    """Deploy, measure `cells` mode by mode, release; whatever happens, land what was measured,
    then the run's status (over all of its cells), regressions and the report."""
    campaign, wh, run_id = ctx.campaign, ctx.warehouse, ctx.run_id
    write_orchestrator_file(ctx.run_dir)
    outcome = {"run_id": run_id, "warehouse": wh, "run_dir": str(ctx.run_dir), "status": "failed",
               "cells": ctx.statuses, "invalid": ctx.invalid}
    try:
        if cells:
            ctx.claims = hold_claims(ctx)
            ctx.deployment = deploy(ctx)
            modes = group_by_mode(cells)
            modes.sort(key=lambda mode_cells: not ctx.engine.is_reference(mode_cells[0]))  # reference answers first
            if not ctx.engine.is_reference(modes[0][0]):
                reference_answers(ctx)
            for mode, mode_cells in modes:
                run_mode(ctx, mode, mode_cells)
        if campaign.search is not None and campaign.search.kind == "tune":
            judge_tuning(ctx)
        outcome["status"] = run_status(ctx.statuses, ctx.invalid, campaign.validity.on_invalid)
    except BaseException as exc:
        interrupted = isinstance(exc, (KeyboardInterrupt, TerminationSignal))  # Ctrl-C, or SIGTERM via Prefect
        outcome["status"] = "interrupted" if interrupted else "failed"
        outcome["error"] = "interrupted by the user" if interrupted else f"{type(exc).__name__}: {exc}"
        raise
    finally:
        try:
            release(ctx)  # plain calls: must also run while a Ctrl-C unwinds
        except Exception as exc:  # what was measured still lands; the run says what could not be released
            outcome["release_error"] = f"{type(exc).__name__}: {exc}"
            reporter().stage(f"releasing the nodes failed: {first_line(exc)}")
        land_measured_cells(ctx)
        with session(wh) as con:
            landing.update_run(con, run_id, status=outcome["status"],
                               error=outcome.get("error") or outcome.get("release_error"),
                               ended_at=landing.now(), allocation=allocation_text(ctx.provider))
        if outcome["status"] != "interrupted":
            outcome["regressions"] = find_regressions(wh, run_id, campaign)
        outcome["report"] = write_report(wh, run_id, ctx.run_dir)
    return outcome


def deploy(ctx: RunContext) -> Deployment:
    """Provision the nodes, build the engine, prepare the model, start the shared services."""
    campaign, wh = ctx.campaign, ctx.warehouse
    reporter().stage("provisioning nodes; " + ctx.plan.client.describe())
    nodes, inventories, offsets = provision(ctx.provider)
    servers, client = split_client_node(nodes, [n.name for n in campaign.provider.node_specs()], ctx.plan.client.node)
    land_nodes(wh, ctx.run_id, nodes, inventories, offsets, client_node=client.name if client else None)
    land_run_update(wh, ctx.run_id, provider_kind=ctx.provider.kind, allocation=allocation_text(ctx.provider))
    reporter().stage("building the engine")
    build = build_engine(ctx.engine.build_recipe(campaign.engine))
    land_build(wh, ctx.run_id, build)
    reporter().stage("preparing the model")
    model_dir = prepare_model(campaign.model, build, str(ctx.campaign_dir))
    land_run_update(wh, ctx.run_id, model_path=model_dir)
    ctx.vocab = vocab_size(Path(model_dir))
    reporter().stage("placing the engine build and the model on every node"
                     + (f", the load generator on {client.name}" if client else ""))
    placed = place_artifacts(ctx.provider, servers, client, inventories, build, model_dir)
    land_placements(wh, ctx.run_id, [p.model_dump() for p in placed.placements])
    reporter().cells_planned(len(ctx.plan.cells))
    load_client = None if client is None else ClientNode(
        provider=ctx.provider, node=client, python=build.python, tree=placed.load_tree,
        clock_offset_s=offsets.get(client.name))
    ctx.deployment = Deployment(campaign=campaign, engine=ctx.engine, provider=ctx.provider, nodes=servers, build=build,
                                model_dir=model_dir, served_name=ctx.served_name, run_dir=str(ctx.run_dir),
                                tools_dir=placed.tools_dir, clock_offsets=offsets, client=load_client)
    reporter().stage("starting the services the modes share, if any")
    shared = start_shared_services(ctx.engine, campaign, servers, build, ctx.provider, str(ctx.run_dir))
    return replace(ctx.deployment, shared=shared)


def release(ctx: RunContext) -> None:
    """Stop the shared services, then let the provider stop what is left and give the nodes back;
    links the campaign changed are plain again; the run's claims go last."""
    try:
        if ctx.deployment is not None and ctx.deployment.shared is not None:
            stop_shared_services.fn(ctx.engine, ctx.deployment.shared, ctx.provider)
    finally:
        try:
            ctx.provider.release()
        finally:
            try:
                if ctx.campaign.network is not None and ctx.deployment is not None:
                    clear_links(ctx.campaign.network.testbed, [node.name for node in ctx.deployment.nodes])
            finally:
                if ctx.claims is not None:
                    ctx.claims.release()


def hold_claims(ctx: RunContext) -> HeldClaims:
    """The nodes' claims and the load generator's CPUs on this host, held until release: a run that
    wants what another holds waits, saying for whom."""
    client = ctx.plan.client
    names = ctx.provider.claims() + (this_host_cpu_claims(client.cpus) if client.node is None and client.cpus
                                     else [])
    holder = {"run_id": ctx.run_id, "campaign": ctx.campaign.name, "pid": os.getpid()}
    return claims.hold(names, holder, say=reporter().stage)


def allocation_text(provider: Provider) -> str | None:
    """What the provider holds (or held: after release, how it ended), as JSON for `runs.allocation`."""
    try:
        return json.dumps(provider.allocation_record())
    except Exception as exc:  # a controller that no longer answers must not hide the run's outcome
        return json.dumps({"error": first_line(exc)})


def find_regressions(wh: str, run_id: str, campaign: Campaign) -> dict[str, int]:
    """Tonight against the history; a failure here never hides the run's own outcome."""
    reporter().stage("looking for regressions in the history")
    try:
        rows = detect_regressions(wh, run_id, campaign.detection)
    except Exception as exc:  # the measurements are landed; `servebench regressions --recompute` redoes it
        reporter().stage(f"regression detection failed: {exc}")
        return {}
    try:
        publish_regressions(rows, run_id)
    except Exception as exc:
        reporter().stage(f"could not attach the regressions artifact: {exc}")
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["kind"]] = counts.get(row["kind"], 0) + 1
    return counts


def land_measured_cells(ctx: RunContext) -> None:
    """Land cells that were measured but not landed (an interrupt between the two): the load
    generator writes its JSON last, so a JSON in the run directory is a complete result."""
    for cell in ctx.plan.cells:
        output = ctx.run_dir / "cells" / f"{cell.key}.json"
        if cell.key in ctx.statuses or not output.exists():
            continue
        result = load_result(output)
        status = "completed" if result["summary"]["completed"] > 0 else "failed"
        with session(ctx.warehouse) as con:
            landing.land_cell(con, ctx.run_id, cell, input_len=ctx.campaign.load.input_len,
                              output_len=ctx.campaign.load.output_len, status=status, error=None, started_at=None,
                              ended_at=landing.now(), result=result, result_path=str(output),
                              requests_csv=Path(requests_csv_path(str(output))))
        ctx.statuses[cell.key] = status


def reference_answers(ctx: RunContext) -> None:
    """No single-worker mode in the campaign: a TP=1 server answers the gate prompts once.

    If it cannot, no mode is compared with anything: each is marked `unchecked`, never
    silently judged against another distributed mode."""
    mode = ctx.engine.reference_mode(REFERENCE_MODE)
    reporter().stage("correctness reference: starting a TP=1 server")
    try:
        server, telemetry = start_mode_server.with_options(task_run_name=f"start-server {REFERENCE_MODE}")(
            ctx.deployment, mode)
    except Exception as exc:
        ctx.reference_problem = f"the TP=1 reference server did not start: {first_line(exc)}"
        land_server(ctx.warehouse, ctx.run_id, mode=REFERENCE_MODE, pid=None, port=None, command=[], env={},
                    log_path=None, started_at=None, ready_seconds=None, stopped_at=None, status="failed",
                    error=str(exc))
        reporter().stage(ctx.reference_problem + "; every mode runs unchecked")
        return
    gate = None
    try:
        gate, ctx.reference = correctness_gate(ctx.engine, server, ctx.served_name, ctx.vocab, None, None)
    except Exception as exc:
        ctx.reference_problem = f"the TP=1 reference server did not answer the gate prompts: {first_line(exc)}"
        reporter().stage(ctx.reference_problem + "; every mode runs unchecked")
    finally:
        stop_server_and_telemetry(ctx, server, telemetry, gate)


def run_mode(ctx: RunContext, mode: ModeSpec, cells: list[Cell]) -> None:
    """Start the mode's server once, gate it, run its cells in order, stop it whatever happens.

    The first single-worker mode's answers become the campaign's reference."""
    reporter().stage(f"mode {mode.name}: starting the server")
    try:
        server, telemetry = start_mode_server.with_options(task_run_name=f"start-server {mode.name}")(
            ctx.deployment, mode)
    except Exception as exc:
        land_server(ctx.warehouse, ctx.run_id, mode=mode.name, pid=None, port=None, command=[], env={},
                    log_path=None, started_at=None, ready_seconds=None, stopped_at=None, status="failed",
                    error=str(exc))
        if ctx.reference is None and ctx.reference_problem is None and ctx.engine.is_reference(mode):
            ctx.reference_problem = f"the reference mode {mode.name} did not start: {first_line(exc)}"
        for cell in cells:
            land_failed_cell(ctx, cell, f"server did not start: {exc}")
        return
    gate = None
    try:
        reporter().stage(f"mode {mode.name}: correctness gate")
        gate, answer = correctness_gate(ctx.engine, server, ctx.served_name, ctx.vocab, ctx.reference,
                                         ctx.reference_problem)
        if gate.status == "reference":
            ctx.reference = answer
        land_mode_server(ctx, server, "ready", gate)
        reporter().stage(f"mode {mode.name}: gate {gate.status}: {gate.detail}")
        for index, cell in enumerate(cells):
            reporter().cell_started(cell.key, cell.mode.name, len(ctx.statuses), len(ctx.plan.cells))
            if index and (problem := server_problem(server)) is not None:  # a fault took the server down
                server, telemetry = restart_server(ctx, mode, server, telemetry, gate, problem)
            if blocks_cells(gate, ctx.campaign.correctness.accept):
                land_failed_cell(ctx, cell, blocked_reason(gate, ctx.campaign.correctness.accept),
                                 correctness=gate.status)
            elif (problem := apply_link(ctx, cell)) is not None:
                land_failed_cell(ctx, cell, problem, correctness=gate.status)
            else:
                run_one_cell(ctx, cell, server, gate.status)
        if ctx.campaign.search is not None and not blocks_cells(gate, ctx.campaign.correctness.accept):
            server, telemetry = search_mode_capacity(ctx, mode, server, telemetry, gate)
    except Exception as exc:
        for cell in cells:
            if cell.key not in ctx.statuses:
                land_failed_cell(ctx, cell, f"{type(exc).__name__}: {exc}")
    finally:
        stop_server_and_telemetry(ctx, server, telemetry, gate)


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
        if (problem := server_problem(current["server"])) is not None:
            current["server"], current["telemetry"] = restart_server(ctx, mode, current["server"],
                                                                     current["telemetry"], gate, problem)
        reporter().cell_started(cell.key, mode.name, len(ctx.statuses), len(ctx.plan.cells))
        probe_cells.append(cell.key)
        summary = run_one_cell(ctx, cell, current["server"], gate.status, search_probe=True)
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


def judge_tuning(ctx: RunContext) -> None:
    """`search: tune`: the best configuration against the default, from every capacity the run
    landed (also those of an earlier attempt, after a resume), into `tuning`."""
    spec = ctx.campaign.search
    default = configurations(ctx.campaign)[0].name
    verdict = land_tuning(ctx.warehouse, ctx.run_id, default, spec.over, ctx.campaign.slo)
    bounds = (f" (the probes' brackets allow {_times(verdict.ratio_low)} to {_times(verdict.ratio_high)})"
              if verdict.ratio is not None else "")
    reporter().stage(f"tuning: best {verdict.best_mode} at {verdict.best_capacity}, default {default} at "
                     f"{verdict.default_capacity}: {verdict.why}{bounds}; {verdict.probes} probes")


def _times(ratio: float | None) -> str:
    return "unbounded" if ratio is None else f"{ratio:.2f}x"


def restart_server(ctx: RunContext, mode: ModeSpec, server: Server, telemetry: Telemetry,
                   gate: GateResult | None, problem: str) -> tuple[Server, Telemetry]:
    """The mode's server is no longer healthy (the cell before failed with that cause): stop what
    is left of it, start it again for the mode's next cells (its gate stands: the same build and
    settings). If it does not start, that raises and the mode's remaining cells fail with it."""
    reporter().stage(f"mode {mode.name}: {problem.splitlines()[0][:160]}; restarting its server")
    stop_server_and_telemetry(ctx, server, telemetry, gate)
    restarted, telemetry = start_mode_server.with_options(task_run_name=f"restart-server {mode.name}")(
        ctx.deployment, mode)
    land_mode_server(ctx, restarted, "ready", gate)
    return restarted, telemetry


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
    config = cell_load_config(ctx.campaign, cell, server.url, ctx.served_name, ctx.vocab, ctx.plan.client,
                              ctx.engine)
    output = ctx.run_dir / "cells" / f"{cell.key}.json"
    started = landing.now()
    timers = start_faults(ctx, cell, server)
    try:
        result = run_cell_load.with_options(task_run_name=f"load {cell.key}")(
            config, str(output), ctx.deployment.client, mark=f"{ctx.provider.run_id}.load")
    except Exception as exc:
        land_failed_cell(ctx, cell, str(exc) + finish_faults(ctx, cell, timers), started, correctness,
                         search_probe=search_probe)
        return None
    injected = finish_faults(ctx, cell, timers)
    summary = result["summary"]
    status = "completed" if summary["completed"] > 0 else "failed"
    error = None if status == "completed" else f"every request failed: {summary['errors']}"
    if (problem := server_problem(server)) is not None:
        # a process of the server ended (or its node went away) during the cell: what it measured
        # lands, but the cell failed, with the cause
        status, error = "failed", f"{problem} (during the cell: {summary['completed']} requests answered, " \
                                  f"{summary['failed']} failed){injected}"
    elif status == "failed":
        error += injected
    land_cell.fn(  # a plain call: a measured cell lands even when the orchestration API falters
        ctx.warehouse, ctx.run_id, cell, input_len=ctx.campaign.load.input_len,
        output_len=ctx.campaign.load.output_len, status=status, error=error, started_at=started,
        ended_at=landing.now(), result=result, result_path=str(output), correctness=correctness,
        requests_csv=Path(requests_csv_path(str(output))), search_probe=search_probe,
        slo_met=slo_verdict(ctx.campaign.slo, cell, summary, status))
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


def slo_verdict(slo: dict[str, float], cell: Cell, summary: dict, status: str) -> bool | None:
    """Whether the cell met the campaign's SLO (valid, every limit held); None without an SLO."""
    if not slo:
        return None
    point = cell.point.rate if cell.point.kind == "open" else cell.point.clients
    return judge(point, observed_from_summary(summary, slo), slo,
                 valid=status == "completed" and bool(summary.get("valid", True))).met


def start_faults(ctx: RunContext, cell: Cell, server: Server) -> list[FaultTimer]:
    """The campaign's faults for this cell, each on its node (default: the API server's)."""
    return start_cell_faults(ctx.campaign.faults, cell.key, server.api.node, ctx.deployment.sampled_nodes,
                             ctx.provider)


def finish_faults(ctx: RunContext, cell: Cell, timers: list[FaultTimer]) -> str:
    """Land what the cell's faults did; return it as a clause for the cell's error ('' if none)."""
    if not timers:
        return ""
    injected = [timer.finish() for timer in timers]
    land_faults(ctx.warehouse, ctx.run_id, cell.key, cell.mode.name, injected)
    for fault in injected:
        reporter().stage(fault.describe())
    return "; injected: " + "; ".join(fault.describe() for fault in injected)


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
    land_server.fn(ctx.warehouse, ctx.run_id, mode=server.mode, pid=api.process.pid, port=server.port,
                   command=api.launch.argv, env=api.launch.env, log_path=str(server.log_path),
                   started_at=server.started_at, ready_seconds=server.ready_seconds, stopped_at=server.stopped_at,
                   status=status, error=None, correctness=gate.status if gate else None,
                   correctness_detail=gate.detail if gate else None,
                   correctness_divergences=[d.model_dump() for d in gate.first_divergence] if gate else None,
                   kv_capacity_tokens=ctx.engine.kv_capacity_tokens(log_text(server.log_path)))


def run_status(statuses: dict[str, str], invalid: dict[str, list[str]], on_invalid: str = "fail") -> str:
    """completed | invalid (every cell measured, some not to be trusted, and the campaign fails on that)
    | partial | failed."""
    if statuses and all(s == "completed" for s in statuses.values()):
        return "invalid" if invalid and on_invalid == "fail" else "completed"
    return "partial" if any(s == "completed" for s in statuses.values()) else "failed"


def log_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:300]


def served_name(campaign: Campaign) -> str:
    if isinstance(campaign.model, GeneratedModelSpec):
        return campaign.model.generate
    return Path(campaign.model.path).name


def write_report(wh: str, run_id: str, run_dir: Path) -> str | None:
    """Render the report; a failure here is reported but never hides the run's own outcome."""
    try:
        path = render_report.fn(wh, run_id, str(run_dir))
    except Exception as exc:  # the measurements are landed already; the report can be redone
        reporter().stage(f"report failed: {exc}")
        return None
    try:
        create_link_artifact(link=Path(path).resolve().as_uri(), link_text=f"report for run {run_id}",
                             key="campaign-report", description="servebench report (offline HTML)")
    except Exception as exc:  # e.g. no Prefect API reachable: the path is returned anyway
        reporter().stage(f"could not attach the report artifact: {exc}")
    return path
