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
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_link_artifact
from prefect.exceptions import TerminationSignal

from servebench import warehouse
from servebench.plugins import load_plugins
from servebench.flows.cells import land_result_file
from servebench.flows.context import EngineRun, RunContext, first_line, reference_mode_name
from servebench.flows.modes import reference_answers, run_mode
from servebench.flows.tuning import judge_tuning, landed_capacities, optuna_first_mode, remeasure_default, tune_with_optuna
from servebench.warehouse import landing
from servebench.analysis.cell_dispersion import land_intervals
from servebench.builds.cache import hold_in_use
from servebench.builds.model import vocab_size
from servebench.builds.prerequisites import require
from servebench.campaign.loading import load_campaign
from servebench.campaign.outcome import run_status
from servebench.campaign.placement import split_client_node
from servebench.campaign.plan import Plan, group_by_mode, make_plan
from servebench.campaign.resume import cells_to_run, load_resumable, write_orchestrator_file
from servebench.spec.campaign import Campaign, ModeSpec
from servebench.spec.sweep import Cell, configurations, variant_specs
from servebench.engines import get_engine
from servebench.paths import default_warehouse, runs_dir
from servebench.progress import reporter
from servebench.providers import Provider, claims, get_provider, get_provider_class
from servebench.providers.claims import HeldClaims, this_host_cpu_claims
from servebench.serving.deployment import ClientNode, Deployment
from servebench.warehouse.store import session
from servebench.tasks.build import build_engine
from servebench.tasks.distribute import place_artifacts
from servebench.tasks.land import land_build, land_nodes, land_placements, land_run_start, land_run_update
from servebench.tasks.model import prepare_model
from servebench.tasks.network import clear_links
from servebench.tasks.provision import provision
from servebench.tasks.regressions import detect_regressions, publish_regressions
from servebench.tasks.report import render_report
from servebench.tasks.shared import start_shared_services, stop_shared_services


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


@flow(name="campaign-run", log_prints=False)
def campaign_run(campaign_file: str, warehouse_path: str | None = None) -> dict:
    """Run every cell of a campaign file and land the results; return where they are."""
    load_plugins()  # a worker's flow run sees the engines and providers SERVEBENCH_PLUGINS names, as the CLI does
    campaign = load_campaign(campaign_file)
    plan = make_plan(campaign, get_provider_class(campaign.provider.kind).host_cpus())
    wh = str(warehouse_path or default_warehouse())
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
    load_plugins()
    wh = str(warehouse_path or default_warehouse())
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
    if campaign.search is not None:  # searches that did not finish run again, reusing the probes they landed
        done = set(landed_capacities(ctx))  # a server that failed or was stopped: not again
        ctx.searches = set() if failed_only else {mode.name for mode in configurations(campaign)} - done
    ctx.rerun_failed = failed_only
    todo = cells_to_run(plan.cells, ctx.statuses, failed_only)
    for cell in todo:
        ctx.statuses.pop(cell.key, None)
        ctx.invalid.pop(cell.key, None)
    note = {"at": landing.now().isoformat(), "kind": "rerun-failed" if failed_only else "resume",
            "status_before": run["status"], "landed_from_run_dir": sorted(set(ctx.statuses) - before),
            "measured": [cell.key for cell in todo], "reclaimed": reclaimed,
            "searches": sorted(ctx.searches or [])}
    with session(wh) as con:
        landing.note_resume(con, run_id, note)
    reporter().stage(f"{note['kind']} of run {run_id}: {len(note['landed_from_run_dir'])} cell(s) landed from the "
                     f"run directory, {len(todo)} to measure"
                     + (f", capacity searches to finish: {', '.join(note['searches'])}" if note["searches"] else ""))
    return run_cells(ctx, todo)


def new_context(plan: Plan, wh: str, run_id: str, run_dir: Path, campaign_dir: Path) -> RunContext:
    campaign = plan.campaign
    engines = {kind: EngineRun(engine=get_engine(kind), spec=spec,
                               reference_name=reference_mode_name(kind, primary=index == 0))
               for index, (kind, spec) in enumerate(campaign.engine_specs().items())}
    return RunContext(plan=plan, engines=engines,
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
        if cells or ctx.searches:
            ctx.claims = hold_claims(ctx)
            deploy(ctx)
            modes = group_by_mode(cells)
            measured = {mode.name for mode, _ in modes}
            modes += [(mode, []) for mode in configurations(campaign)  # a resumed run's unfinished searches
                      if ctx.searches is not None and mode.name in ctx.searches and mode.name not in measured]
            # each engine's reference answers first
            modes.sort(key=lambda mode_cells: not ctx.gives_reference(mode_cells[0]))
            optuna = campaign.search is not None and campaign.search.strategy == "optuna" and not ctx.rerun_failed
            for run in ctx.engines.values():
                served = [mode for mode, _ in modes if ctx.engine_run(mode) is run]
                if optuna and run is ctx.primary:
                    served = [optuna_first_mode(ctx)]
                if served and (served[0] is None or not ctx.gives_reference(served[0])):
                    reference_answers(ctx, run, [m for m in configurations(campaign) if ctx.engine_run(m) is run])
            if optuna:  # a few configurations, chosen one after the other
                tune_with_optuna(ctx, cells)
            else:
                for mode, mode_cells in modes:
                    run_mode(ctx, mode, mode_cells)
        if campaign.search is not None and campaign.search.kind == "tune":
            remeasure_default(ctx)
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
        land_repeat_intervals(wh, run_id)
        if outcome["status"] != "interrupted":
            outcome["regressions"] = find_regressions(wh, run_id, campaign)
        outcome["report"] = write_report(wh, run_id, ctx.run_dir)
    return outcome


def deploy(ctx: RunContext) -> None:
    """Provision the nodes; for each engine the campaign's modes use: build it, prepare the model in
    its format, place both on the nodes, start its shared services."""
    campaign, wh = ctx.campaign, ctx.warehouse
    reporter().stage("provisioning nodes; " + ctx.plan.client.describe())
    nodes, inventories, offsets = provision(ctx.provider)
    servers, client = split_client_node(nodes, [n.name for n in campaign.provider.node_specs()], ctx.plan.client.node)
    land_nodes(wh, ctx.run_id, nodes, inventories, offsets, client_node=client.name if client else None)
    land_run_update(wh, ctx.run_id, provider_kind=ctx.provider.kind, allocation=allocation_text(ctx.provider))
    used = {campaign.engine_kind(mode) for mode in campaign.modes}
    placements = []
    for kind, run in ctx.engines.items():
        if kind not in used:
            continue
        named = "" if run is ctx.primary else f" {kind}"
        reporter().stage(f"building the engine{named}")
        require(run.engine.build_prerequisites(run.spec), f"engine {kind}: {run.spec.describe()}")
        build = build_engine(run.engine.build_recipe(run.spec))
        run.build_hold = hold_in_use(Path(build.venv_path).parent, build.key)
        land_build(wh, ctx.run_id, build)
        reporter().stage(f"preparing the model{named and ' for' + named}")
        model_dir = prepare_model(campaign.model, build, str(ctx.campaign_dir), run.engine.kind)
        if run is ctx.primary:
            land_run_update(wh, ctx.run_id, model_path=model_dir)
        run.vocab = vocab_size(Path(model_dir))
        reporter().stage(f"placing the engine build{named} and the model on every node"
                         + (f", the load generator on {client.name}" if client else ""))
        placed = place_artifacts(ctx.provider, servers, client, inventories, build, model_dir)
        placements += [p.model_dump() for p in placed.placements]
        load_client = None if client is None else ClientNode(
            provider=ctx.provider, node=client, tree=placed.load_tree,
            clock_offset_s=offsets.get(client.name))
        run.deployment = Deployment(campaign=campaign, engine=run.engine, spec=run.spec, provider=ctx.provider,
                                    nodes=servers, build=build, model_dir=model_dir, served_name=ctx.served_name,
                                    run_dir=str(ctx.run_dir), tools_dir=placed.tools_dir, clock_offsets=offsets,
                                    client=load_client)
        reporter().stage(f"starting the services the{named} modes share, if any")
        modes = [mode for mode in campaign.modes if campaign.engine_kind(mode) == kind]
        shared = start_shared_services(run.engine, run.spec, modes, servers, build, ctx.provider, str(ctx.run_dir))
        for line in shared.notes if shared is not None else []:
            reporter().stage(line)
        run.deployment = replace(run.deployment, shared=shared)
        served = [mode for mode in configurations(campaign) if campaign.engine_kind(mode) == kind]
        placements += deploy_build_variants(ctx, run, served, servers, inventories)  # a commit axis's too
    land_placements(wh, ctx.run_id, placements)
    reporter().cells_planned(len(ctx.plan.cells))
    if ctx.planned_cells > len(ctx.plan.cells):
        reporter().stage(f"and at most {ctx.planned_cells - len(ctx.plan.cells)} capacity probes (cells too)")


def deploy_build_variants(ctx: RunContext, run: EngineRun, modes: list[ModeSpec], servers: list,
                          inventories: dict) -> list[dict]:
    """Modes whose `build:` differs from their engine's block (another target CPU, a commit of a
    commit axis): each distinct build is made (or found by key), recorded and placed like the
    engine's; the rest of the deployment (model, nodes, shared services) is the engine's."""
    placements: list[dict] = []
    for spec in variant_specs(ctx.campaign, modes, run.spec):
        reporter().stage(f"building the engine {spec.describe()}")
        require(run.engine.build_prerequisites(spec), f"engine {run.engine.kind}: {spec.describe()}")
        build = build_engine(run.engine.build_recipe(spec))
        run.variant_holds.append(hold_in_use(Path(build.venv_path).parent, build.key))
        land_build(ctx.warehouse, ctx.run_id, build)
        placed = place_artifacts(ctx.provider, servers, None, inventories, build, run.deployment.model_dir)
        placements += [p.model_dump() for p in placed.placements]
        run.variants.append(replace(run.deployment, spec=spec, build=build))
    return placements


def release(ctx: RunContext) -> None:
    """Stop the shared services, then let the provider stop what is left and give the nodes back;
    links the campaign changed are plain again; the run's claims and its hold on the builds go last."""
    try:
        for run in ctx.engines.values():
            if run.deployment is not None and run.deployment.shared is not None:
                stop_shared_services.fn(run.engine, run.deployment.shared, ctx.provider)
    finally:
        try:
            ctx.provider.release()
        finally:
            try:
                if ctx.campaign.network is not None and ctx.deployment is not None:
                    clear_links(ctx.provider, ctx.campaign.network.testbed, ctx.deployment.nodes)
            finally:
                if ctx.claims is not None:
                    ctx.claims.release()
                for run in ctx.engines.values():  # nothing runs from the builds now: `builds gc` may remove them
                    if run.build_hold is not None:
                        run.build_hold.close()
                        run.build_hold = None
                    while run.variant_holds:
                        run.variant_holds.pop().close()


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


def land_repeat_intervals(wh: str, run_id: str) -> None:
    """The bootstrap intervals of the repeats' medians (`cell_intervals`, shown by the
    `cell_dispersion` view), once the run's cells are landed; a failure is said, never hides the
    run's outcome (the end-of-run table and the report compute them again)."""
    try:
        with session(wh) as con:
            land_intervals(con, run_id)
    except Exception as exc:
        reporter().stage(f"landing the repeats' intervals failed: {exc}")


def land_measured_cells(ctx: RunContext) -> None:
    """Land cells that were measured but not landed (an interrupt between the two): the load
    generator writes its JSON last, so a JSON in the run directory is a complete result.
    (A search's probes are landed so by the search itself, when it reaches them again.)"""
    for cell in ctx.plan.cells:
        land_result_file(ctx, cell)


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
