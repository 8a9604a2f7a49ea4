"""The campaign flows: a run (provision, build, model, then for each mode serve -> load -> land,
then regressions against the history, then report) and its resume. What each stage does, in
which order, is `servebench.orchestration`; every stage Prefect tracks is a task of `servebench.tasks`."""

from __future__ import annotations

from prefect import flow

from servebench.orchestration.run import new_run, resumed_run, run_cells
from servebench.plugins import load_plugins


@flow(name="campaign-run", log_prints=False)
def campaign_run(campaign_file: str, warehouse_path: str | None = None) -> dict:
    """Run every cell of a campaign file and land the results; return where they are."""
    load_plugins()  # a worker's flow run sees the engines and providers SERVEBENCH_PLUGINS names, as the CLI does
    run = new_run(campaign_file, warehouse_path)
    return run_cells(run, run.plan.cells)


@flow(name="campaign-resume", log_prints=False)
def campaign_resume(run_id: str, warehouse_path: str | None = None, failed_only: bool = False) -> dict:
    """Finish a run whose orchestrator was killed: what it left running is stopped, results in its
    run directory are landed, and only cells with no result are measured (`failed_only`: the
    failed cells of a finished run are measured again instead)."""
    load_plugins()
    run, cells = resumed_run(run_id, warehouse_path, failed_only)
    return run_cells(run, cells)
