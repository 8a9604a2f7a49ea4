"""A campaign flow run from the command line (`run`, `resume`): a temporary Prefect
API, the progress display, Ctrl-C and SIGTERM stopping it cleanly, then the summary of its cells."""

from __future__ import annotations

import argparse
import os
import signal
from typing import Callable

from rich.console import Console
from rich.text import Text

from servebench import warehouse
from servebench.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, warehouse_path
from servebench.cli.tables import print_rows
from servebench.warehouse.reads import RATE_TOLERANCE, schedule_notes

STATUS_STYLE = {"completed": "bold green", "partial": "bold yellow", "invalid": "bold red", "failed": "bold red"}
STATUS_MEANING = {
    "partial": "some cells failed",
    "invalid": "every cell ran, but some measurements failed their validity checks (validity: fail)",
    "failed": "no cell completed",
}


def orchestrate(args: argparse.Namespace, name: str, flow_run: Callable[[], dict]) -> int:
    """Run a campaign flow against a temporary Prefect API with the progress display; Ctrl-C and
    SIGTERM stop it cleanly; then the summary."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # the progress reporter replaces the log scroll
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no telemetry from the temporary server
    from servebench import progress
    from servebench.cli.prefect_api import temporary_api

    console = Console(stderr=True)
    path = str(warehouse_path(args))
    signal.signal(signal.SIGTERM, _terminate)  # a scheduler's cancel stops as cleanly as Ctrl-C
    try:
        with temporary_api(), progress.live(console):
            outcome = flow_run()
    except BaseException as exc:  # Ctrl-C, or SIGTERM (Prefect raises its TerminationSignal for it)
        if not isinstance(exc, KeyboardInterrupt) and type(exc).__name__ != "TerminationSignal":
            raise
        console.print(f"[yellow]interrupted[/]: servers stopped; cells measured so far are in {path}")
        return EXIT_INTERRUPTED
    print_cells_summary(console, outcome["warehouse"], outcome["run_id"])
    console.print(status_line(name, outcome), soft_wrap=True)
    console.print(f"warehouse: {outcome['warehouse']}")
    console.print(f"report:    {outcome.get('report')}")
    found = outcome.get("regressions") or {}
    console.print(f"history:   {found.get('regression', 0)} regression(s), {found.get('improvement', 0)} "
                  f"improvement(s) against earlier runs (servebench regressions)")
    console.print(f"run dir:   {outcome['run_dir']}")
    console.print('try:       servebench tables; servebench query "select mode, clients, offered_rate, count(*), '
                  'quantile_cont(ttft_ms, 0.99) from measured_requests join cells using (cell_id) group by all"')
    return EXIT_OK if outcome["status"] == "completed" else EXIT_FAILED


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def print_cells_summary(console: Console, warehouse_file: str, run_id: str) -> None:
    """The run's cells as landed, then loud lines for invalid ones: a run whose cells all
    completed must not look clean when some of its numbers are not measurements to trust. An
    open-loop cell whose schedule realized a rate off the one its key names says so in its notes."""
    import duckdb

    from servebench.analysis.run_summary import summarize

    try:
        con = warehouse.connect(warehouse_file, read_only=True)
        try:
            summary = summarize(con, run_id)
            off_rate = schedule_notes(con, run_id)
        finally:
            con.close()
    except (warehouse.WarehouseError, duckdb.Error) as exc:  # e.g. locked by another campaign landing
        console.print(Text(f"no cell summary: {exc}", style="yellow"), soft_wrap=True)
        return
    if summary.rows:
        rows = [with_note(row, off_rate.get(row[0])) for row in summary.rows]
        print_rows(console, summary.columns, rows, wrappable=[summary.columns[-1]])
    if off_rate:
        console.print(Text(f"{len(off_rate)} open-loop cell(s) ran a schedule more than {RATE_TOLERANCE:.0%} off "
                           "the rate their key names (cells.realized_rate vs offered_rate)", style="yellow"),
                      soft_wrap=True)
    if (retried := summary.retry_line()) is not None:
        console.print(Text(retried, style="yellow"), soft_wrap=True)
    for line in summary.alarm_lines():
        console.print(Text(line, style="bold red"), soft_wrap=True)


def with_note(row: tuple[str, ...], note: str | None) -> tuple[str, ...]:
    """A summary row with a note added to its last column (the notes: reasons / error)."""
    if note is None:
        return row
    return (*row[:-1], "; ".join(text for text in (row[-1], note) if text))


def status_line(campaign: str, outcome: dict) -> Text:
    """`campaign X run Y: status (n completed, m failed)`, plus what a status other than completed means."""
    counts: dict[str, int] = {}
    for status in outcome["cells"].values():
        counts[status] = counts.get(status, 0) + 1
    status = outcome["status"]
    line = Text.assemble("campaign ", (campaign, "bold"), f" run {outcome['run_id']}: ",
                         (status, STATUS_STYLE.get(status, "bold")),
                         f" ({', '.join(f'{n} {s}' for s, n in sorted(counts.items())) or 'no cells'})")
    if status in STATUS_MEANING:
        line.append(f": {STATUS_MEANING[status]}")
    return line
