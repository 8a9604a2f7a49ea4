"""A campaign run as plain Python: a new run or a resumed one set up (`RunContext`), then its cells
measured mode by mode on a deployment, the nodes released, and whatever happened what was
measured landed, the run's status, its regressions and its report.

Every finished cell is landed before the next one starts; a failed cell is recorded with
its cause and the campaign goes on; on Ctrl-C or any error every server is stopped and
what was measured stays in the warehouse.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from datetime import datetime, timezone
from pathlib import Path

from prefect.artifacts import create_link_artifact
from prefect.exceptions import TerminationSignal

from servebench.analysis.cell_dispersion import land_intervals
from servebench.analysis.predictions import land_run_predictions
from servebench.analysis.report import run_report
from servebench.analysis.runs_index import write_index
from servebench.campaign.loading import load_campaign
from servebench.campaign.outcome import run_status
from servebench.campaign.resume import cells_to_run, load_resumable, write_orchestrator_file
from servebench.config.campaign import Campaign, ModeSpec
from servebench.config.sweep import Cell, configurations, model_variants
from servebench.engines import engine_for
from servebench.orchestration.cells import land_result_file
from servebench.orchestration.context import EngineRun, RunContext, first_line, reference_mode_name
from servebench.orchestration.deploy import allocation_text, deploy
from servebench.orchestration.modes import reference_answers, run_mode
from servebench.orchestration.tuning import (
    judge_tuning,
    landed_capacities,
    optuna_first_mode,
    remeasure_default,
    tune_with_optuna,
)
from servebench.paths import default_warehouse, runs_dir
from servebench.planning.plan import Plan, group_by_mode, make_plan
from servebench.progress import reporter
from servebench.providers import Provider, claims, get_provider, get_provider_class
from servebench.providers.base import BATCH_JOBS
from servebench.providers.claims import HeldClaims, this_host_cpu_claims
from servebench.serving import links
from servebench.tasks.land import land_run_start
from servebench.tasks.regressions import detect_regressions, publish_regressions
from servebench.warehouse.landing import RunRecord
from servebench.warehouse.sink import RunResults, now


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


def new_run(campaign_file: str, warehouse_path: str | None) -> RunContext:
    """A new run of the campaign file: planned, its directory made (with the campaign as run), its row landed."""
    campaign = load_campaign(campaign_file)
    provider_class: type[Provider] = get_provider_class(campaign.provider.kind)
    plan = make_plan(campaign, provider_class.host_cpus())
    wh = str(warehouse_path or default_warehouse())
    run_id = new_run_id()
    run_dir = runs_dir() / run_id
    run_dir.mkdir(parents=True)
    shutil.copy(campaign_file, run_dir / "campaign.yaml")
    land_run_start(RunResults(wh, run_id), RunRecord(
        campaign=campaign.name, spec_hash=campaign.spec_hash(), spec_text=Path(campaign_file).read_text(),
        spec_normalized=campaign.normalized(), campaign_file=str(Path(campaign_file).resolve()), run_dir=run_dir))
    return new_context(plan, wh, run_id, run_dir, Path(campaign_file).resolve().parent)


def resumed_run(run_id: str, warehouse_path: str | None, failed_only: bool) -> tuple[RunContext, list[Cell]]:
    """A run whose orchestrator was killed, taken up again: what it left running is stopped, results in
    its run directory are landed; the cells still to measure (`failed_only`: its failed cells instead)."""
    wh = str(warehouse_path or default_warehouse())
    run, campaign = load_resumable(wh, run_id, failed_only)
    provider_class: type[Provider] = get_provider_class(campaign.provider.kind)
    plan = make_plan(campaign, provider_class.host_cpus())
    ctx = new_context(plan, wh, run_id, Path(run["run_dir"]), Path(run["campaign_file"]).parent)
    reclaimed = ctx.provider.reclaim(json.loads(run["allocation"] or "{}"))
    for line in reclaimed:
        reporter().stage(f"reclaimed: {line}")
    ctx.statuses.update(ctx.results.cell_statuses())
    ctx.invalid.update(ctx.results.invalid_cells())
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
    note_resume(ctx, run["status"], sorted(set(ctx.statuses) - before), todo, reclaimed, failed_only)
    return ctx, todo


def note_resume(ctx: RunContext, status_before: str, landed: list[str], todo: list[Cell], reclaimed: list[str],
                failed_only: bool) -> None:
    """What a resume found and will do, on the run's row and said."""
    note = {"at": now().isoformat(), "kind": "rerun-failed" if failed_only else "resume",
            "status_before": status_before, "landed_from_run_dir": landed,
            "measured": [cell.key for cell in todo], "reclaimed": reclaimed,
            "searches": sorted(ctx.searches or [])}
    ctx.results.resumed(note)
    reporter().stage(f"{note['kind']} of run {ctx.run_id}: {len(note['landed_from_run_dir'])} cell(s) landed from "
                     f"the run directory, {len(todo)} to measure"
                     + (f", capacity searches to finish: {', '.join(note['searches'])}" if note["searches"] else ""))


def new_context(plan: Plan, wh: str, run_id: str, run_dir: Path, campaign_dir: Path) -> RunContext:
    campaign = plan.campaign
    engines = {kind: EngineRun(engine=engine_for(spec), spec=spec,
                               reference_name=reference_mode_name(kind, primary=index == 0))
               for index, (kind, spec) in enumerate(campaign.engine_specs().items())}
    return RunContext(plan=plan, engines=engines,
                      provider=get_provider(campaign, plan.client.reserved_on_nodes, run_id=run_id), warehouse=wh,
                      run_id=run_id, run_dir=run_dir, campaign_dir=campaign_dir)


def run_cells(ctx: RunContext, cells: list[Cell]) -> dict:
    """Deploy, measure `cells` mode by mode, release; whatever happens, land what was measured,
    then the run's status (over all of its cells), regressions and the report."""
    campaign = ctx.campaign
    write_orchestrator_file(ctx.run_dir, batch_job(ctx.provider))
    outcome = {"run_id": ctx.run_id, "warehouse": ctx.warehouse, "run_dir": str(ctx.run_dir), "status": "failed",
               "cells": ctx.statuses, "invalid": ctx.invalid}
    try:
        if cells or ctx.searches:
            ctx.claims = hold_claims(ctx)
            deploy(ctx)
            measure(ctx, cells)
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
        finish_run(ctx, outcome)
    return outcome


def measure(ctx: RunContext, cells: list[Cell]) -> None:
    """Each engine's reference answers first (from a server of its own when no mode of the campaign gives
    them), then every mode with its cells in order; or, tuned by Optuna, a few configurations chosen one
    after the other."""
    modes = modes_in_order(ctx, cells)
    optuna = tuned_by_optuna(ctx)
    for run in ctx.engines.values():
        for variant in model_variants(ctx.campaign):  # each model variant its own reference
            served: list[ModeSpec | None] = [mode for mode, _ in modes
                                             if ctx.engine_run(mode) is run and mode.model == variant]
            if optuna and run is ctx.primary:
                first = optuna_first_mode(ctx)
                served = [first] if first is None or first.model == variant else [None]  # None: not known
            if served and (served[0] is None or not ctx.gives_reference(served[0])):
                reference_answers(ctx, run, [m for m in configurations(ctx.campaign)
                                             if ctx.engine_run(m) is run and m.model == variant])
    if optuna:
        tune_with_optuna(ctx, cells)
    else:
        for mode, mode_cells in modes:
            run_mode(ctx, mode, mode_cells)


def modes_in_order(ctx: RunContext, cells: list[Cell]) -> list[tuple[ModeSpec, list[Cell]]]:
    """The modes to run with their cells, in the campaign's order but each engine's reference modes
    first; a resumed run's unfinished capacity searches too, with no cells of their own."""
    modes = group_by_mode(cells)
    measured = {mode.name for mode, _ in modes}
    modes += [(mode, []) for mode in configurations(ctx.campaign)
              if ctx.searches is not None and mode.name in ctx.searches and mode.name not in measured]
    modes.sort(key=lambda mode_cells: not ctx.gives_reference(mode_cells[0]))
    return modes


def tuned_by_optuna(ctx: RunContext) -> bool:
    """Whether Optuna chooses the configurations (not when only failed cells are measured again)."""
    search = ctx.campaign.search
    return search is not None and search.strategy == "optuna" and not ctx.rerun_failed


def finish_run(ctx: RunContext, outcome: dict) -> None:
    """Plain calls, whatever happened (also while a Ctrl-C unwinds): release the nodes, land what was
    measured and the run's row, then the repeats' intervals, regressions (not after an interrupt) and
    the report, then the index of every run beside the run directories."""
    try:
        with ctx.stages.stage("release", hosts=len(ctx.provider.nodes())):
            release(ctx)
    except Exception as exc:  # what was measured still lands; the run says what could not be released
        outcome["release_error"] = f"{type(exc).__name__}: {exc}"
        reporter().stage(f"releasing the nodes failed: {first_line(exc)}")
    land_stage_timings(ctx)
    land_measured_cells(ctx)
    ctx.results.ended(outcome["status"], outcome.get("error") or outcome.get("release_error"),
                      allocation_text(ctx.provider))
    land_repeat_intervals(ctx.results)
    land_predictions(ctx)
    if outcome["status"] != "interrupted":
        outcome["regressions"] = find_regressions(ctx.warehouse, ctx.run_id, ctx.campaign)
    outcome["report"] = write_report(ctx.results, ctx.run_dir)
    write_runs_index(ctx.results, ctx.run_dir.parent)


def release(ctx: RunContext) -> None:
    """Stop the shared services, then let the provider stop what is left and give the nodes back;
    links the campaign changed are plain again; the run's claims and its hold on the builds go last."""
    try:
        for run in ctx.engines.values():
            if run.deployment is not None and run.deployment.shared is not None:
                run.engine.stop_shared(run.deployment.shared, ctx.provider)
    finally:
        try:
            ctx.provider.release()
        finally:
            try:
                if ctx.campaign.network is not None and ctx.deployment is not None:
                    links.clear_links(ctx.provider, ctx.campaign.network.testbed, ctx.deployment.nodes)
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


def find_regressions(wh: str, run_id: str, campaign: Campaign) -> dict[str, int]:
    """Tonight against the history; a failure here never hides the run's own outcome."""
    reporter().stage("looking for regressions in the history")
    try:
        rows = detect_regressions(wh, run_id, campaign.detection)
    except Exception as exc:  # the measurements are landed; `servebench regressions --recompute` redoes it
        reporter().stage(f"regression detection failed: {exc}")
        return {}
    try:
        publish_regressions(rows, run_id, wh, campaign.detection)
    except Exception as exc:
        reporter().stage(f"could not attach the regressions artifact: {exc}")
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["kind"]] = counts.get(row["kind"], 0) + 1
    return counts


def land_repeat_intervals(results: RunResults) -> None:
    """The bootstrap intervals of the repeats' medians (`cell_intervals`, shown by the
    `cell_dispersion` view), once the run's cells are landed; a failure is said, never hides the
    run's outcome (the end-of-run table and the report compute them again)."""
    try:
        results.derived(land_intervals)
    except Exception as exc:
        reporter().stage(f"landing the repeats' intervals failed: {exc}")


def land_stage_timings(ctx: RunContext) -> None:
    """How long each stage took and what it cost the orchestrator (`stage_timings`, docs/scale.md); a failure
    is said, never hides the run's outcome."""
    try:
        ctx.results.stage_timings(ctx.stages.timings)
    except Exception as exc:
        reporter().stage(f"landing the stages' timings failed: {exc}")


def land_predictions(ctx: RunContext) -> None:
    """Each cell's prediction beside its measurement (`cell_predictions`, docs/performance-model.md); a
    failure is said, never hides the run's outcome (`servebench predict CAMPAIGN --run RUN` prints them)."""
    try:
        ctx.results.derived(land_run_predictions(ctx.plan, ctx.campaign_dir))
    except Exception as exc:
        reporter().stage(f"landing the cells' predictions failed: {exc}")


def land_measured_cells(ctx: RunContext) -> None:
    """Land cells that were measured but not landed (an interrupt between the two): the load
    generator writes its JSON last, so a JSON in the run directory is a complete result.
    (A search's probes are landed so by the search itself, when it reaches them again.)"""
    for cell in ctx.plan.cells:
        land_result_file(ctx, cell)


def write_report(results: RunResults, run_dir: Path) -> str | None:
    """Render the report; a failure here is reported but never hides the run's own outcome."""
    run_id = results.run_id
    try:
        path = render_report(results, run_dir)
    except Exception as exc:  # the measurements are landed already; the report can be redone
        reporter().stage(f"report failed: {exc}")
        return None
    try:
        create_link_artifact(link=Path(path).resolve().as_uri(), link_text=f"report for run {run_id}",
                             key="campaign-report", description="servebench report (offline HTML)")
    except Exception as exc:  # e.g. no Prefect API reachable: the path is returned anyway
        reporter().stage(f"could not attach the report artifact: {exc}")
    return path


def write_runs_index(results: RunResults, runs: Path) -> None:
    """Every run at a glance, `index.html` beside the run directories, written again; a failure is
    said, never fails the run (`servebench runs --html` writes it again)."""
    try:
        results.read(lambda con, _: write_index(con, runs / "index.html"))
    except Exception as exc:
        reporter().stage(f"the runs index failed: {first_line(exc)}")


def render_report(results: RunResults, run_dir: Path) -> str:
    """The run's report from the warehouse (read-only), in its run directory."""
    return str(results.read(lambda con, run_id: run_report(con, run_id, run_dir)))


def batch_job(provider: Provider) -> str | None:
    """The scheduler's job the orchestrator runs in (`servebench submit`), which a resume asks about."""
    return provider.enclosing_job() if BATCH_JOBS in provider.capabilities else None
