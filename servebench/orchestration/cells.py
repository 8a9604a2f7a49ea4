"""One cell of a mode: its load against the mode's server, with the campaign's faults for it, judged
(`servebench.campaign.outcome`) and landed before the next cell starts; or, after an interrupt,
landed from the result file it left. A failed cell is landed with its cause. A cell lands with every
measurement of it (`cell_attempts`) in one transaction; a superseded measurement's files are moved
aside under a marker, so that a kill at any point of the move leaves a state a resume reads one way."""

from __future__ import annotations

import glob
import re
from collections.abc import Callable
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
    attempt = len(superseded_attempts(ctx, cell))  # a resumed cell goes on after the killed run's attempts
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
        supersede_attempt(ctx, cell, attempt, outcome)
        attempt += 1
    land_measured_cell(ctx, cell, result, outcome, started=started, correctness=correctness,
                       search_probe=search_probe, kv_failures=kv_failures)
    summary = result["summary"]
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
    target = LoadTarget(server.url, server.served_name, server.launch.health_path, tuple(server.instance_urls.values()))
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


def _no_step(step: str) -> None:
    """A step of a superseded attempt's move reached (nothing to do)."""


supersede_step: Callable[[str], None] = _no_step  # called at each step of a supersede: where a test kills it


def supersede_attempt(ctx: RunContext, cell: Cell, attempt: int, outcome: CellOutcome) -> None:
    """An invalid measurement about to be taken again: its files move aside (`<key>.attempt<N>.*`, so
    a resume never lands it as the cell); it lands with the cell, as a superseded attempt. The move is
    recorded first (`<key>.attempt<N>.superseding`) and the marker removed last: a kill before the
    marker leaves the measurement the cell's result, complete; a kill after it leaves a move that the
    next reader of the cell's attempts finishes (`finish_supersede`), so the result JSON is never read
    without its requests."""
    output = result_file(ctx, cell)
    marker = supersede_marker(output, attempt)
    marker.touch()
    supersede_step("marked")
    move_attempt_files(output, attempt)
    marker.unlink()
    supersede_step("done")
    reporter().stage(f"{cell.key}: measured again, attempt {attempt} was invalid: "
                     + "; ".join(outcome.invalid_reasons or []))


def attempt_file(output: Path, attempt: int) -> Path:
    """Where a superseded attempt's result JSON is kept (its requests beside it, as the cell's are)."""
    return output.with_name(f"{output.stem}.attempt{attempt}.json")


def supersede_marker(output: Path, attempt: int) -> Path:
    """The record that the attempt's files are being moved aside (not `.json`: no result)."""
    return output.with_name(f"{output.stem}.attempt{attempt}.superseding")


def move_attempt_files(output: Path, attempt: int) -> None:
    """The cell's requests CSV, then its JSON, to the attempt's names; a file already moved is skipped,
    so a move a kill interrupted is finished by doing it again."""
    kept = attempt_file(output, attempt)
    for step, (source, target) in enumerate(((Path(requests_csv_path(str(output))), Path(requests_csv_path(str(kept)))),
                                             (output, kept))):
        if source.exists():
            source.replace(target)
        supersede_step(("csv", "json")[step])


def finish_supersede(output: Path) -> None:
    """Finish each move of an attempt's files that a kill interrupted (its marker still there): before
    the cell's result is read or measured again, never after."""
    for marker in sorted(output.parent.glob(f"{glob.escape(output.stem)}.attempt*.superseding")):
        attempt = marker.name.removeprefix(f"{output.stem}.attempt").removesuffix(".superseding")
        if attempt.isdigit():
            move_attempt_files(output, int(attempt))
            marker.unlink()


def superseded_attempts(ctx: RunContext, cell: Cell) -> list[CellAttempt]:
    """The cell's measurements superseded so far in the run (`<key>.attempt<N>.json`, N from 0; a
    killed run's too), an interrupted move finished first; each summary judged again as it was when it
    was superseded (the verdict marks it invalid in place where the orchestrator's own checks find it
    so: another process's share of the server's cores)."""
    output = result_file(ctx, cell)
    finish_supersede(output)
    found: list[CellAttempt] = []
    while (kept := attempt_file(output, len(found))).exists():
        summary = load_result(kept)["summary"]
        measured_outcome(ctx.campaign, cell, summary)  # its verdict marks the summary as the cell's marked it
        found.append(CellAttempt(cell_key=cell.key, attempt=len(found), superseded=True, summary=summary,
                                 result_path=str(kept)))
    return found


def land_result_file(ctx: RunContext, cell: Cell, search_probe: bool = False) -> bool:
    """Land a cell measured but not landed before the run was cut (its complete JSON in the run
    directory; the load generator writes it last and atomically), judged as a measured cell is, with
    its attempts. Whether it did. A JSON whose move aside a kill interrupted is an attempt, not the
    cell's result: the move is finished first."""
    output = result_file(ctx, cell)
    if cell.key in ctx.statuses:
        return False
    finish_supersede(output)
    if not output.exists():
        return False
    result = load_result(output)
    outcome = measured_outcome(ctx.campaign, cell, result["summary"], faults=FaultEvidence.planned(ctx.campaign, cell))
    land_measured_cell(ctx, cell, result, outcome, started=None, search_probe=search_probe)
    return True


def land_measured_cell(ctx: RunContext, cell: Cell, result: dict, outcome: CellOutcome, *,
                       started: datetime | None, correctness: str | None = None, search_probe: bool = False,
                       kv_failures: int | None = None) -> None:
    """A cell the load generator measured, with its verdict and every attempt (the superseded ones, then
    this one), into the warehouse and the run's count. Its requests from the CSV beside the result, else
    from the result itself."""
    output = result_file(ctx, cell)
    csv = Path(requests_csv_path(str(output)))
    measured = CellMeasurement(result=result, result_path=str(output), requests_csv=csv if csv.exists() else None,
                               kv_failures=kv_failures)
    attempts = superseded_attempts(ctx, cell)
    attempts.append(CellAttempt(cell_key=cell.key, attempt=len(attempts), superseded=False, summary=result["summary"],
                                result_path=str(output)))
    land_cell(ctx, outcome, cell_record(ctx, cell, outcome, started, correctness, search_probe, measured), attempts)


def land_failed_cell(ctx: RunContext, cell: Cell, error: str, started: datetime | None = None,
                     correctness: str | None = None, search_probe: bool = False) -> None:
    """A cell that failed without a measurement, with its cause (and the attempts superseded before)."""
    outcome = failed_outcome(ctx.campaign, error)
    land_cell(ctx, outcome, cell_record(ctx, cell, outcome, started, correctness, search_probe),
              superseded_attempts(ctx, cell))
    reporter().cell_finished(cell.key, "failed", error.splitlines()[0][:160])


def cell_record(ctx: RunContext, cell: Cell, outcome: CellOutcome, started: datetime | None,
                correctness: str | None, search_probe: bool, measured: CellMeasurement | None = None) -> CellRecord:
    """The cell with its verdict and what was measured (None: nothing), ended now."""
    load = ctx.campaign.load
    return CellRecord(cell=cell, input_len=load.input_len, output_len=load.output_len, status=outcome.status,
                      error=outcome.error, slo_met=outcome.slo_met, correctness=correctness,
                      search_probe=search_probe, started_at=started, ended_at=now(), measured=measured)


def land_cell(ctx: RunContext, outcome: CellOutcome, record: CellRecord,
              attempts: list[CellAttempt] | None = None) -> None:
    """A plain call, not a task run: a measured cell lands even when the orchestration API falters
    (and while a Ctrl-C unwinds), its row, requests and attempts in one transaction; then the run
    counts its verdict."""
    ctx.results.cell(record, attempts or [])
    ctx.record(record.cell, outcome)


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
