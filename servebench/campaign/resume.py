"""Resuming a run: which of its cells still need measuring, and whether it may be resumed at all.

A run whose orchestrator was killed keeps status `running` in the warehouse, its cells landed
so far, and complete result files in its run directory for cells measured but not landed
(the load generator writes its JSON last). `servebench resume RUN_ID` lands those files, each cell
with its attempts (`servebench.orchestration.cells`: a superseded attempt's move a kill interrupted
is finished first, so its JSON is never taken for the cell's), then measures only the cells with
neither; `servebench resume --failed RUN_ID` measures again the cells of a finished run that
failed. No cell is measured twice. The orchestrator writes
`orchestrator.json` in the run directory so that a resume never races a live orchestrator.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path

from servebench.config.campaign import Campaign
from servebench.config.sweep import Cell

ORCHESTRATOR_FILE = "orchestrator.json"
FINISHED = ("completed", "partial", "invalid", "failed", "interrupted")


class ResumeError(RuntimeError):
    """The run cannot be resumed as asked: said with the run id and what to do instead."""


def resume_problem(run_id: str, status: str, failed_only: bool, orchestrator_alive: bool) -> str | None:
    """Why this run cannot be resumed (or rerun) now, or None."""
    if orchestrator_alive:
        return f"run {run_id} is still running: its orchestrator is alive (see {ORCHESTRATOR_FILE} in its run dir)"
    if failed_only:
        return None if status in FINISHED or status == "running" else f"run {run_id} has status {status!r}"
    if status in ("completed", "partial", "invalid", "failed"):
        return (f"run {run_id} finished ({status}): nothing to resume; `servebench resume --failed {run_id}` "
                "measures its failed cells again")
    return None  # running (its orchestrator was killed) or interrupted (Ctrl-C)


def cells_to_run(cells: list[Cell], statuses: dict[str, str], failed_only: bool) -> list[Cell]:
    """The cells to measure: with `failed_only` those that failed, else those with no result at all."""
    if failed_only:
        return [cell for cell in cells if statuses.get(cell.key) == "failed"]
    return [cell for cell in cells if cell.key not in statuses]


def write_orchestrator_file(run_dir: Path, batch_job: str | None = None) -> None:
    """Who orchestrates the run now (PID, its start time, the host, the scheduler's job it runs in)."""
    import psutil

    me = psutil.Process()
    (run_dir / ORCHESTRATOR_FILE).write_text(json.dumps(
        {"pid": me.pid, "create_time": me.create_time(), "host": socket.gethostname(),
         "batch_job": batch_job}))


def orchestrator_alive(run_dir: Path, job_listed: Callable[[str], bool] | None = None) -> bool:
    """Whether the process that last orchestrated the run still runs: on this host, by its PID; on another
    host, inside a batch job (`servebench submit`), while its scheduler still lists that job (`job_listed`);
    else taken as alive: only that host can tell."""
    import psutil

    try:
        record = json.loads((run_dir / ORCHESTRATOR_FILE).read_text())
    except (OSError, ValueError):
        return False
    if record.get("host") != socket.gethostname():
        job = record.get("batch_job")
        return job_listed(str(job)) if job and job_listed is not None else True
    if record.get("pid") == os.getpid():
        return False
    try:
        return abs(psutil.Process(record["pid"]).create_time() - record["create_time"]) < 0.01
    except (psutil.NoSuchProcess, KeyError, TypeError):
        return False


def load_resumable(wh: str, run_id: str, failed_only: bool) -> tuple[dict, Campaign]:
    """The run's record and its campaign as it was run, or ResumeError saying why not."""
    from servebench import warehouse
    from servebench.campaign.loading import parse_campaign
    from servebench.warehouse import landing

    con = warehouse.connect(wh)
    try:
        run = landing.run_record(con, run_id)
    finally:
        con.close()
    if run is None:
        raise ResumeError(f"no run {run_id} in {wh}")
    run_dir = Path(run["run_dir"])
    copy = run_dir / "campaign.yaml"  # relative paths in it are from where the original was
    campaign = parse_campaign(copy.read_text(), source=str(copy), base_dir=Path(run["campaign_file"]).parent)
    problem = resume_problem(run_id, run["status"], failed_only, orchestrator_alive(run_dir, job_lister(campaign)))
    if problem is not None:
        raise ResumeError(problem)
    if campaign.spec_hash() != run["spec_hash"]:
        raise ResumeError(f"{run_dir / 'campaign.yaml'} is not the campaign run {run_id} ran (spec hash "
                          f"{campaign.spec_hash()}, the run's {run['spec_hash']})")
    return run, campaign


def job_lister(campaign: Campaign) -> Callable[[str], bool] | None:
    """Whether the campaign's scheduler still lists a job (a provider with batch jobs), else None."""
    from servebench.providers import get_provider, get_provider_class
    from servebench.providers.base import BATCH_JOBS

    if BATCH_JOBS not in get_provider_class(campaign.provider.kind).capabilities:
        return None
    return get_provider(campaign).job_listed
