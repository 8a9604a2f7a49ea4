"""The campaign flow: provision, build, model, then for each mode serve -> load -> land, then
regressions against the history, then report.

Every finished cell is landed before the next one starts; a failed cell is recorded with
its cause and the campaign goes on; on Ctrl-C or any error every server is stopped and
what was measured stays in the warehouse.
"""

from __future__ import annotations

import secrets
import shutil
from datetime import datetime, timezone
from itertools import groupby
from pathlib import Path

from prefect import flow
from prefect.artifacts import create_link_artifact
from prefect.exceptions import TerminationSignal

import warehouse
from servebench import landing
from servebench.load.runner import load_result
from servebench.model import vocab_size
from servebench.paths import runs_dir
from servebench.progress import reporter
from servebench.providers import Node
from servebench.ray_cluster import RayCluster
from servebench.serve import Server, is_healthy, kv_capacity_tokens
from servebench.correctness import GateAnswer, GateResult, blocks_cells
from servebench.spec import Campaign, GeneratedModelSpec, ModeSpec, load_campaign
from servebench.sweep import Cell, expand
from tasks.build import build_engine
from tasks.cluster import needs_ray, start_ray_cluster, stop_ray_cluster
from tasks.land import land_build, land_cell, land_nodes, land_run_start, land_run_update, land_server, session
from tasks.load import cell_load_config, requests_csv_path, run_cell_load
from tasks.model import prepare_model
from tasks.provision import provision
from tasks.report import render_report
from tasks.regressions import detect_regressions, publish_regressions
from tasks.serve import correctness_gate, start_mode_server, stop_mode_server
from tasks.telemetry import Telemetry, stop_telemetry

REFERENCE_MODE = "reference-tp1"


def new_run_id() -> str:
    return datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-" + secrets.token_hex(3)


@flow(name="campaign-run", log_prints=False)
def campaign_run(campaign_file: str, warehouse_path: str | None = None) -> dict:
    """Run every cell of a campaign file and land the results; return where they are."""
    campaign = load_campaign(campaign_file)
    wh = str(warehouse_path or warehouse.default_path())
    run_id = new_run_id()
    run_dir = runs_dir() / run_id
    run_dir.mkdir(parents=True)
    shutil.copy(campaign_file, run_dir / "campaign.yaml")
    land_run_start(wh, run_id=run_id, campaign=campaign.name, spec_hash=campaign.spec_hash(),
                   spec_text=Path(campaign_file).read_text(), spec_normalized=campaign.normalized(),
                   campaign_file=str(Path(campaign_file).resolve()), run_dir=run_dir)
    outcome = {"run_id": run_id, "warehouse": wh, "run_dir": str(run_dir), "status": "failed", "cells": {}}
    cluster = None
    cells: list[Cell] = []
    try:
        reporter().stage("provisioning nodes")
        nodes, inventories = provision(campaign)
        land_nodes(wh, run_id, nodes, inventories)
        reporter().stage("building the engine venv")
        build = build_engine(campaign.engine)
        land_build(wh, run_id, build)
        reporter().stage("preparing the model")
        model_dir = prepare_model(campaign.model, build, str(Path(campaign_file).parent))
        land_run_update(wh, run_id, model_path=model_dir)
        vocab = vocab_size(Path(model_dir))
        cells = expand(campaign)
        reporter().cells_planned(len(cells))
        if needs_ray(campaign):
            reporter().stage("starting the Ray cluster")
            cluster = start_ray_cluster(campaign, nodes, build, str(run_dir))
        groups = [list(group) for _, group in groupby(cells, key=lambda c: c.mode.name)]
        groups.sort(key=lambda group: not is_reference_mode(group[0].mode))  # the reference answers first
        reference = None
        if not is_reference_mode(groups[0][0].mode):
            reference = reference_answers(campaign, nodes, build, model_dir, vocab, wh, run_id, run_dir)
        for group in groups:
            reference = run_mode(campaign, group, len(cells), nodes, build, model_dir, vocab, wh, run_id, run_dir,
                                 outcome["cells"], cluster, reference)
        outcome["status"] = run_status(outcome["cells"])
    except BaseException as exc:
        interrupted = isinstance(exc, (KeyboardInterrupt, TerminationSignal))  # Ctrl-C, or SIGTERM via Prefect
        outcome["status"] = "interrupted" if interrupted else "failed"
        outcome["error"] = "interrupted by the user" if interrupted else f"{type(exc).__name__}: {exc}"
        raise
    finally:
        if cluster is not None:
            stop_ray_cluster.fn(campaign, cluster)  # plain call: must also run while a Ctrl-C unwinds
        land_measured_cells(campaign, cells, wh, run_id, run_dir, outcome["cells"])
        with session(wh) as con:
            landing.update_run(con, run_id, status=outcome["status"], error=outcome.get("error"),
                               ended_at=landing.now())
        if outcome["status"] != "interrupted":
            outcome["regressions"] = find_regressions(wh, run_id, campaign)
        outcome["report"] = write_report(wh, run_id, run_dir)
    return outcome


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


def land_measured_cells(campaign: Campaign, cells: list[Cell], wh: str, run_id: str, run_dir: Path,
                        statuses: dict[str, str]) -> None:
    """Land cells that were measured but not landed (an interrupt between the two): the load
    generator writes its JSON last, so a JSON in the run directory is a complete result."""
    for cell in cells:
        output = run_dir / "cells" / f"{cell.key}.json"
        if cell.key in statuses or not output.exists():
            continue
        result = load_result(output)
        status = "completed" if result["summary"]["completed"] > 0 else "failed"
        with session(wh) as con:
            landing.land_cell(con, run_id, cell, input_len=campaign.load.input_len,
                              output_len=campaign.load.output_len, status=status, error=None, started_at=None,
                              ended_at=landing.now(), result=result, result_path=str(output),
                              requests_csv=Path(requests_csv_path(str(output))))
        statuses[cell.key] = status


def is_reference_mode(mode: ModeSpec) -> bool:
    return mode.world_size == 1 and mode.executor == "mp"


def reference_answers(campaign: Campaign, nodes: list[Node], build, model_dir: str, vocab: int, wh: str,
                      run_id: str, run_dir: Path) -> GateAnswer | None:
    """No single-worker mode in the campaign: a TP=1 server answers the gate prompts once."""
    mode = ModeSpec(name=REFERENCE_MODE, tp=1, pp=1, executor="mp")
    reporter().stage("correctness reference: starting a TP=1 server")
    server, telemetry = start_mode_server.with_options(task_run_name=f"start-server {REFERENCE_MODE}")(
        campaign, mode, nodes, build, model_dir, served_name(campaign), str(run_dir))
    gate = None
    try:
        gate, answer = correctness_gate(server, served_name(campaign), vocab, None)
    finally:
        stop_server_and_telemetry(campaign, server, telemetry, wh, run_id, gate)
    return answer


def run_mode(campaign: Campaign, cells: list[Cell], total: int, nodes: list[Node], build, model_dir: str,
             vocab: int, wh: str, run_id: str, run_dir: Path, statuses: dict[str, str], cluster: RayCluster | None,
             reference: GateAnswer | None) -> GateAnswer | None:
    """Start the mode's server once, gate it, run its cells in order, stop it whatever happens.

    Returns the campaign's reference answers (set by the first single-worker mode)."""
    mode = cells[0].mode
    reporter().stage(f"mode {mode.name}: starting the server")
    try:
        server, telemetry = start_mode_server.with_options(task_run_name=f"start-server {mode.name}")(
            campaign, mode, nodes, build, model_dir, served_name(campaign), str(run_dir), cluster)
    except Exception as exc:
        land_server(wh, run_id, mode=mode.name, pid=None, port=None, command=[], env={}, log_path=None,
                    started_at=None, ready_seconds=None, stopped_at=None, status="failed", error=str(exc))
        for cell in cells:
            land_failed_cell(campaign, cell, wh, run_id, f"server did not start: {exc}", statuses)
        return reference
    gate = None
    try:
        reporter().stage(f"mode {mode.name}: correctness gate")
        gate, answer = correctness_gate(server, served_name(campaign), vocab, reference)
        reference = reference or answer
        land_mode_server(wh, run_id, server, "ready", gate)
        for cell in cells:
            reporter().cell_started(cell.key, cell.mode.name, len(statuses), total)
            if blocks_cells(gate, campaign.correctness.accept):
                land_failed_cell(campaign, cell, wh, run_id, f"correctness gate failed: {gate.detail}", statuses,
                                 correctness=gate.status)
            else:
                run_one_cell(campaign, cell, server, vocab, wh, run_id, run_dir, statuses, gate.status)
    except Exception as exc:
        for cell in cells:
            if cell.key not in statuses:
                land_failed_cell(campaign, cell, wh, run_id, f"{type(exc).__name__}: {exc}", statuses)
    finally:
        stop_server_and_telemetry(campaign, server, telemetry, wh, run_id, gate)
    return reference


def stop_server_and_telemetry(campaign: Campaign, server: Server, telemetry: Telemetry, wh: str, run_id: str,
                              gate: GateResult | None) -> None:
    """Plain calls, not task runs: this must also work while a Ctrl-C unwinds."""
    stop_telemetry.fn(telemetry)
    stop_mode_server.fn(campaign, server)
    land_mode_server(wh, run_id, server, "ready", gate)
    with session(wh) as con:
        landing.land_samples(con, run_id, server.mode, telemetry.node_files, telemetry.server_files)


def run_one_cell(campaign: Campaign, cell: Cell, server: Server, vocab: int, wh: str, run_id: str,
                 run_dir: Path, statuses: dict[str, str], correctness: str | None) -> None:
    if not is_healthy(server):
        land_failed_cell(campaign, cell, wh, run_id, f"server of mode {cell.mode.name} is no longer healthy "
                         f"(exit code {server.process.exit_code()}); see {server.log_path}", statuses)
        return
    config = cell_load_config(campaign.load, cell, server.url, served_name(campaign), vocab)
    output = run_dir / "cells" / f"{cell.key}.json"
    started = landing.now()
    try:
        result = run_cell_load.with_options(task_run_name=f"load {cell.key}")(config, str(output))
    except Exception as exc:
        land_failed_cell(campaign, cell, wh, run_id, str(exc), statuses, started, correctness)
        return
    summary = result["summary"]
    status = "completed" if summary["completed"] > 0 else "failed"
    error = None if status == "completed" else f"every request failed: {summary['errors']}"
    land_cell.with_options(task_run_name=f"land {cell.key}")(
        wh, run_id, cell, input_len=campaign.load.input_len, output_len=campaign.load.output_len, status=status,
        error=error, started_at=started, ended_at=landing.now(), result=result, result_path=str(output),
        correctness=correctness, requests_csv=Path(requests_csv_path(str(output))))
    statuses[cell.key] = status
    throughput = summary.get("output_throughput") or 0.0
    verdict = "" if summary.get("valid", True) else "  INVALID: " + "; ".join(summary["invalid_reasons"])
    reporter().cell_finished(cell.key, status, f"{summary['completed']} ok, {summary['failed']} failed, "
                             f"{throughput:.1f} tok/s{verdict}")


def land_failed_cell(campaign: Campaign, cell: Cell, wh: str, run_id: str, error: str, statuses: dict[str, str],
                     started: datetime | None = None, correctness: str | None = None) -> None:
    land_cell.with_options(task_run_name=f"land {cell.key}")(
        wh, run_id, cell, input_len=campaign.load.input_len, output_len=campaign.load.output_len, status="failed",
        error=error, started_at=started, ended_at=landing.now(), result=None, result_path=None,
        correctness=correctness)
    statuses[cell.key] = "failed"
    reporter().cell_finished(cell.key, "failed", error.splitlines()[0][:160])


def land_mode_server(wh: str, run_id: str, server: Server, status: str, gate: GateResult | None = None) -> None:
    land_server.fn(wh, run_id, mode=server.mode, pid=server.process.pid, port=server.port,
                   command=server.launch.argv, env=server.launch.env, log_path=str(server.log_path),
                   started_at=server.started_at, ready_seconds=server.ready_seconds, stopped_at=server.stopped_at,
                   status=status, error=None, correctness=gate.status if gate else None,
                   correctness_detail=gate.detail if gate else None,
                   kv_capacity_tokens=kv_capacity_tokens(server.log_path))


def run_status(statuses: dict[str, str]) -> str:
    if statuses and all(s == "completed" for s in statuses.values()):
        return "completed"
    return "partial" if any(s == "completed" for s in statuses.values()) else "failed"


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
