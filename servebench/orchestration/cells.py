"""One cell of a mode: its load against the mode's server, with the campaign's faults for it, judged
(`servebench.campaign.outcome`) and landed before the next cell starts; or, after an interrupt,
landed from the result file it left. A failed cell is landed with its cause."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from servebench.campaign.load_config import LoadTarget, cell_load_config
from servebench.campaign.outcome import CellOutcome, FaultEvidence, failed_outcome, measure_again, measured_outcome
from servebench.config.sweep import Cell
from servebench.load.runner import load_result
from servebench.orchestration.context import RunContext
from servebench.orchestration.servers import server_problem
from servebench.progress import reporter
from servebench.serving.cell_load import progress_path, requests_csv_path
from servebench.serving.faults import FaultTimer
from servebench.serving.server import Server
from servebench.tasks.load import run_cell_load
from servebench.warehouse.landing import CellAttempt, CellMeasurement, CellRecord
from servebench.warehouse.sink import now


def run_one_cell(ctx: RunContext, cell: Cell, server: Server, correctness: str | None,
                 search_probe: bool = False) -> dict | None:
    """Measure one cell and land it; return its load summary (None: nothing was measured). A
    measurement the load generator finds invalid is taken again right away, on the same server,
    up to `validity.retries` times (`measure_again`); every attempt lands, the last is the cell's."""
    attempt = 0
    while True:
        problem = server_problem(server)
        if problem is not None:
            land_failed_cell(ctx, cell, problem, search_probe=search_probe)
            return None
        measured = measure_cell(ctx, cell, server, correctness, search_probe)
        if measured is None:
            return None
        result, outcome, faults, started, kv_failures = measured
        if not measure_again(outcome, attempt, ctx.campaign.validity.retries, faults):
            break
        supersede_attempt(ctx, cell, result, attempt, outcome)
        attempt += 1
    land_measured_cell(ctx, cell, result, outcome, started=started, correctness=correctness,
                       search_probe=search_probe, kv_failures=kv_failures)
    summary = result["summary"]
    land_attempt(ctx, cell.key, attempt, False, summary, str(result_file(ctx, cell)))
    throughput = summary.get("output_throughput") or 0.0
    busy = (summary.get("client") or {}).get("core_fraction")
    verdict = "" if summary.get("valid", True) else "  INVALID: " + "; ".join(summary["invalid_reasons"])
    retried = f", measured {attempt + 1} times" if attempt else ""
    reporter().cell_finished(cell.key, outcome.status, f"{summary['completed']} ok, {summary['failed']} failed, "
                             f"{throughput:.1f} tok/s, gate {correctness}"
                             + (f", client CPU {busy:.0%}" if busy is not None else "") + retried + verdict)
    return summary


def measure_cell(ctx: RunContext, cell: Cell, server: Server, correctness: str | None, search_probe: bool
                 ) -> tuple[dict, CellOutcome, FaultEvidence, datetime, int | None] | None:
    """One measurement of the cell and its verdict (None: the load did not run; the cell is landed failed)."""
    run = ctx.engine_run(cell.mode)
    assert run.deployment is not None  # cells are measured only after deploy()
    load_client = run.deployment.client
    target = LoadTarget(server.url, ctx.served_name, server.launch.health_path, tuple(server.instance_urls.values()))
    config = cell_load_config(ctx.campaign, cell, target, run.vocab, ctx.plan.client, run.engine)
    output = result_file(ctx, cell)
    started = now()
    log_from = api_log_sizes(server)
    timers = start_faults(ctx, cell, server)
    try:
        result = run_cell_load.with_options(task_run_name=f"load {cell.key}")(
            config, str(output), load_client, mark=f"{ctx.provider.run_id}.load")
    except BaseException as exc:
        if not isinstance(exc, Exception):  # Ctrl-C, SIGTERM: undo the faults (a cut host, a full /dev/shm)
            for timer in timers:
                timer.finish()
            raise
        land_failed_cell(ctx, cell, str(exc) + finish_faults(ctx, cell, timers).clause, started, correctness,
                         search_probe=search_probe)
        return None
    faults = finish_faults(ctx, cell, timers)  # first: a fault that lasts is undone before the server is asked
    outcome = measured_outcome(ctx.campaign, cell, result["summary"], server_problem(server), faults)
    return result, outcome, faults, started, count_in_logs(log_from, run.engine.api.kv_failure_pattern)


def supersede_attempt(ctx: RunContext, cell: Cell, result: dict, attempt: int, outcome: CellOutcome) -> None:
    """An invalid measurement about to be taken again: its files move aside (`<key>.attempt<N>.*`, so
    a resume never lands it as the cell) and it lands as a superseded attempt."""
    output = result_file(ctx, cell)
    kept = output.with_name(f"{cell.key}.attempt{attempt}.json")
    for source, target in ((Path(requests_csv_path(str(output))), Path(requests_csv_path(str(kept)))), (output, kept)):
        if source.exists():
            source.replace(target)
    land_attempt(ctx, cell.key, attempt, True, result["summary"], str(kept))
    reporter().stage(f"{cell.key}: measured again, attempt {attempt} was invalid: "
                     + "; ".join(outcome.invalid_reasons or []))


def land_result_file(ctx: RunContext, cell: Cell, search_probe: bool = False) -> bool:
    """Land a cell measured but not landed before the run was cut (its complete JSON in the run
    directory; the load generator writes it last and atomically), judged as a measured cell is.
    Whether it did."""
    output = result_file(ctx, cell)
    if cell.key in ctx.statuses or not output.exists():
        return False
    result = load_result(output)
    outcome = measured_outcome(ctx.campaign, cell, result["summary"], faults=FaultEvidence.planned(ctx.campaign, cell))
    land_measured_cell(ctx, cell, result, outcome, started=None, search_probe=search_probe)
    return True


def land_measured_cell(ctx: RunContext, cell: Cell, result: dict, outcome: CellOutcome, *,
                       started: datetime | None, correctness: str | None = None, search_probe: bool = False,
                       kv_failures: int | None = None) -> None:
    """A cell the load generator measured, with its verdict, into the warehouse and the run's count."""
    output = result_file(ctx, cell)
    measured = CellMeasurement(result=result, result_path=str(output),
                               requests_csv=Path(requests_csv_path(str(output))), kv_failures=kv_failures)
    land_cell(ctx, outcome, cell_record(ctx, cell, outcome, started, correctness, search_probe, measured))


def land_failed_cell(ctx: RunContext, cell: Cell, error: str, started: datetime | None = None,
                     correctness: str | None = None, search_probe: bool = False) -> None:
    """A cell that failed without a measurement, with its cause."""
    outcome = failed_outcome(ctx.campaign, error)
    land_cell(ctx, outcome, cell_record(ctx, cell, outcome, started, correctness, search_probe))
    reporter().cell_finished(cell.key, "failed", error.splitlines()[0][:160])


def cell_record(ctx: RunContext, cell: Cell, outcome: CellOutcome, started: datetime | None,
                correctness: str | None, search_probe: bool, measured: CellMeasurement | None = None) -> CellRecord:
    """The cell with its verdict and what was measured (None: nothing), ended now."""
    load = ctx.campaign.load
    return CellRecord(cell=cell, input_len=load.input_len, output_len=load.output_len, status=outcome.status,
                      error=outcome.error, slo_met=outcome.slo_met, correctness=correctness,
                      search_probe=search_probe, started_at=started, ended_at=now(), measured=measured)


def land_cell(ctx: RunContext, outcome: CellOutcome, record: CellRecord) -> None:
    """A plain call, not a task run: a measured cell lands even when the orchestration API falters
    (and while a Ctrl-C unwinds); then the run counts its verdict."""
    ctx.results.cell(record)
    ctx.record(record.cell, outcome)


def land_attempt(ctx: RunContext, cell_key: str, attempt: int, superseded: bool, summary: dict,
                 result_path: str | None) -> None:
    """One measurement of a cell (a plain call, as a cell's landing is)."""
    ctx.results.cell_attempt(CellAttempt(cell_key=cell_key, attempt=attempt, superseded=superseded, summary=summary,
                                         result_path=result_path))


def result_file(ctx: RunContext, cell: Cell) -> Path:
    """Where the load generator writes the cell's complete result (JSON; its requests beside it)."""
    return ctx.run_dir / "cells" / f"{cell.key}.json"


def start_faults(ctx: RunContext, cell: Cell, server: Server) -> list[FaultTimer]:
    """The campaign's faults for this cell, each on its node (default: the API server's)."""
    mode_deployment, deployment = ctx.engine_run(cell.mode).deployment_for(cell.mode), ctx.deployment
    assert mode_deployment is not None and deployment is not None  # cells are measured only after deploy()
    local_load = mode_deployment.client is None
    progress = progress_path(str(result_file(ctx, cell))) if local_load else None  # after N requests: the count
    by_name = {node.name: node for node in deployment.sampled_nodes}
    return [FaultTimer(ctx.provider, by_name.get(fault.node, server.api.node) if fault.node else server.api.node,
                       fault, progress).start()
            for fault in ctx.campaign.faults if fault.cell == cell.key]


def finish_faults(ctx: RunContext, cell: Cell, timers: list[FaultTimer]) -> FaultEvidence:
    """Land what the cell's faults did, and return it as evidence for the cell's verdict."""
    if not timers:
        return FaultEvidence()
    injected = [timer.finish() for timer in timers]
    ctx.results.faults(cell.key, cell.mode.name, injected)
    for fault in injected:
        reporter().stage(fault.describe())
    if any(fault.hit and fault.spec.action in ("kill", "stop") for fault in injected):
        ctx.signalled.add(cell.key)
    return FaultEvidence.injected([fault.describe() for fault in injected], any(f.hit for f in injected))


def log_size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


def api_log_sizes(server: Server) -> dict[Path, int]:
    """Each API process's log (every replica's of a `replicas` mode: r0's, r1's, ...) and its size now: where
    a cell's lines start."""
    return {running.log_path: log_size(running.log_path) for running in server.processes if running.launch.api}


def count_in_logs(starts: dict[Path, int], pattern: str | None) -> int | None:
    """Lines matching the engine's pattern written to these logs since their start bytes, summed (a `replicas`
    mode's KV failures are every replica's); None when the engine has no such line or no log could be read."""
    counts = [count for path, start in starts.items() if (count := count_in_log(path, start, pattern)) is not None]
    return sum(counts) if counts else None


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
