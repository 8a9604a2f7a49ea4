"""`servebench`: plan, build, run, resume, rerun-failed, serve, load, query, report, regressions, compare,
annotate, bisect (and the commands the add_*_parser functions below add).

Prefect is imported only by the commands that run flows, so `plan`, `query` and `load`
start fast and the load generator's process carries nothing it does not need.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import sys
from decimal import Decimal
from pathlib import Path
from typing import Collection, Sequence

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from servebench import warehouse
from servebench.campaign.loading import SpecError, campaign_path, load_campaign, shipped_campaigns
from servebench.cli.common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    chosen_run_id,
    run_choice_args,
    warehouse_arg,
    warehouse_path,
)
from servebench.plugins import load_plugins

WRAP_WIDTH = 20  # the narrowest a free-text column of a table may wrap to
STATUS_STYLE = {"completed": "bold green", "partial": "bold yellow", "invalid": "bold red", "failed": "bold red"}
STATUS_MEANING = {
    "partial": "some cells failed",
    "invalid": "every cell ran, but some measurements failed their validity checks (validity: fail)",
    "failed": "no cell completed",
}


CAMPAIGN_COMMANDS = {"plan", "build", "run"}  # their `file` may name a shipped campaign


def main(argv: list[str] | None = None) -> int:
    load_plugins()  # before the parser: plugin engines are choices of `load --engine`
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command in CAMPAIGN_COMMANDS and args.file:
        args.file = str(campaign_path(args.file))
    try:
        return args.func(args) or EXIT_OK
    except SpecError as exc:
        print(f"servebench: invalid campaign\n{exc}", file=sys.stderr)
        return EXIT_FAILED
    except warehouse.WarehouseError as exc:
        print(f"servebench: {exc}", file=sys.stderr)
        return EXIT_FAILED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="servebench", description="Benchmark campaigns for LLM serving on CPUs.")
    sub = parser.add_subparsers(dest="command", required=True)

    plan = sub.add_parser("plan", help="validate a campaign, print its cells and server commands")
    plan.add_argument("file")
    plan.set_defaults(func=cmd_plan)

    build = sub.add_parser("build", help="build (or find) the engine venv of a campaign and print it")
    build.add_argument("file")
    build.add_argument("--dry-run", action="store_true",
                       help="print each engine's build key, whether it is cached, and the exact commands and "
                            "environment a build runs; build nothing")
    build.set_defaults(func=cmd_build)

    run = sub.add_parser("run", help="run a campaign end to end")
    run.add_argument("file", nargs="?")
    run.add_argument("--resume", metavar="RUN_ID", help="instead: finish this run (as `servebench resume`)")
    warehouse_arg(run)
    run.set_defaults(func=cmd_run)

    resume = sub.add_parser("resume", help="finish a run whose orchestrator was killed: stop what it left, land "
                            "what it measured, measure only the cells with no result")
    resume.add_argument("run_id")
    warehouse_arg(resume)
    resume.set_defaults(func=cmd_resume, failed_only=False)

    rerun = sub.add_parser("rerun-failed", help="measure the failed cells of a finished run again (same run id)")
    rerun.add_argument("run_id")
    warehouse_arg(rerun)
    rerun.set_defaults(func=cmd_resume, failed_only=True)

    campaigns = sub.add_parser("campaigns", help="list the campaigns shipped with servebench (plan, build and "
                               "run take one by its name from any directory)")
    campaigns.set_defaults(func=cmd_campaigns)

    serve = sub.add_parser("serve", help="serve prefect.yaml's nightly deployments from this machine "
                           "(needs a running Prefect server: PREFECT_API_URL)")
    serve.add_argument("deployments", nargs="*", help="names from prefect.yaml (default: all)")
    serve.set_defaults(func=cmd_serve)

    query = sub.add_parser("query", help="run SQL on the warehouse (read-only)")
    query.add_argument("sql")
    query.add_argument("--format", choices=["table", "markdown", "csv", "json"], default="table",
                       help="table: one block per row when the table is wider than the terminal "
                       "($COLUMNS, or 80 when not a terminal); markdown: a GitHub table")
    warehouse_arg(query)
    query.set_defaults(func=cmd_query)

    report = sub.add_parser("report", help="render the HTML report of a run")
    run_choice_args(report)
    report.add_argument("--out", help="directory for report.html (default: the run directory)")
    warehouse_arg(report)
    report.set_defaults(func=cmd_report)

    from servebench.cli.best import add_best_parser
    from servebench.cli.bisect import add_bisect_parser
    from servebench.cli.builds import add_builds_parser
    from servebench.cli.capacity import add_capacity_parser
    from servebench.cli.chaos import add_chaos_parser
    from servebench.cli.load import add_load_parser
    from servebench.cli.regressions import add_regression_parsers
    from servebench.cli.saturation import add_saturation_parser
    from servebench.cli.testbed import add_testbed_parser

    add_load_parser(sub)
    add_capacity_parser(sub)
    add_best_parser(sub)
    add_saturation_parser(sub)
    add_builds_parser(sub)
    add_bisect_parser(sub)
    add_chaos_parser(sub)
    add_testbed_parser(sub)
    add_regression_parsers(sub)
    return parser


def cmd_campaigns(args: argparse.Namespace) -> int:
    shipped = shipped_campaigns()
    for path in shipped:
        first = next((line.lstrip("# ").strip() for line in path.read_text().splitlines() if line.startswith("#")), "")
        print(f"{path.stem:24} {first}")
    print(f"(in {shipped[0].parent})" if shipped else "no campaigns are shipped")
    return EXIT_OK


def cmd_plan(args: argparse.Namespace) -> int:
    from servebench.campaign.plan import make_plan
    from servebench.cli.plan import describe_plan
    from servebench.providers import Provider, get_provider_class

    campaign = load_campaign(args.file)
    provider_class: type[Provider] = get_provider_class(campaign.provider.kind)
    plan = make_plan(campaign, provider_class.host_cpus())
    print(describe_plan(plan, Path(args.file)))
    return EXIT_OK


def cmd_build(args: argparse.Namespace) -> int:
    from servebench.builds.builders import ensure
    from servebench.builds.prerequisites import PrerequisiteError, require
    from servebench.cli.builds import dry_run_text
    from servebench.engines import get_engine
    from servebench.paths import cache_dir
    from servebench.spec.sweep import build_specs

    campaign = load_campaign(args.file)
    if args.dry_run:
        text, all_met = dry_run_text(campaign, cache_dir())
        print(text)
        return EXIT_OK if all_met else EXIT_FAILED
    try:
        for kind, spec in build_specs(campaign):
            require(get_engine(kind).build_prerequisites(spec), f"engine {kind}: {spec.describe()}")
    except PrerequisiteError as exc:
        print(f"servebench build: {exc}", file=sys.stderr)
        return EXIT_FAILED
    for kind, spec in build_specs(campaign):
        build = ensure(get_engine(kind).build_recipe(spec), cache_dir(), log=lambda text: print(text, file=sys.stderr))
        state = "cached" if build.build_seconds is None else f"built in {build.build_seconds:.0f} s"
        print(f"{build.key} ({spec.describe()} -> {build.engine_version}, {state})")
        print(build.python if build.python_version else build.venv_path)  # a cmake build: its binaries' directory
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    if args.resume:
        if args.file:
            print("servebench run: give a campaign file or --resume RUN_ID, not both", file=sys.stderr)
            return EXIT_FAILED
        args.run_id, args.failed_only = args.resume, False
        return cmd_resume(args)
    if not args.file:
        print("servebench run: give a campaign file (or --resume RUN_ID)", file=sys.stderr)
        return EXIT_FAILED
    campaign = load_campaign(args.file)  # fail fast, before Prefect starts

    def run() -> dict:
        from servebench.flows.campaign import campaign_run  # after the API URL is set: prefect reads it at import

        return campaign_run(campaign_file=args.file, warehouse_path=str(warehouse_path(args)))
    return orchestrate(args, campaign.name, run)


def cmd_resume(args: argparse.Namespace) -> int:
    """`resume` and `rerun-failed`: the same run id, its campaign as it was run (checked first,
    before Prefect starts)."""
    from servebench.campaign.resume import ResumeError, load_resumable

    try:
        _, campaign = load_resumable(str(warehouse_path(args)), args.run_id, args.failed_only)
    except ResumeError as exc:
        print(f"servebench: {exc}", file=sys.stderr)
        return EXIT_FAILED

    def run() -> dict:
        from servebench.flows.campaign import campaign_resume

        return campaign_resume(run_id=args.run_id, warehouse_path=str(warehouse_path(args)),
                               failed_only=args.failed_only)
    return orchestrate(args, campaign.name, run)


def orchestrate(args: argparse.Namespace, name: str, flow_run) -> int:
    """Run a campaign flow against a temporary Prefect API with the progress display; Ctrl-C and
    SIGTERM stop it cleanly; then the summary."""
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # the progress reporter replaces the log scroll
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no telemetry from the temporary server
    from servebench import progress
    from servebench.cli.prefect_api import temporary_api

    console = Console(stderr=True)
    path = str(warehouse_path(args))
    signal.signal(signal.SIGTERM, _terminate)  # a scheduler's cancel stops as cleanly as Ctrl-C
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background by a shell
        signal.signal(signal.SIGINT, signal.default_int_handler)
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
    console.print('try:       servebench query "select mode, clients, rate, count(*) from requests '
                  'join cells using (cell_id) group by all"')
    return EXIT_OK if outcome["status"] == "completed" else EXIT_FAILED


def print_cells_summary(console: Console, warehouse_file: str, run_id: str) -> None:
    """The run's cells as landed, then loud lines for invalid ones: a run whose cells all
    completed must not look clean when some of its numbers are not measurements to trust."""
    import duckdb

    from servebench.analysis.run_summary import summarize

    try:
        con = warehouse.connect(warehouse_file, read_only=True)
        try:
            summary = summarize(con, run_id)
        finally:
            con.close()
    except (warehouse.WarehouseError, duckdb.Error) as exc:  # e.g. locked by another campaign landing
        console.print(Text(f"no cell summary: {exc}", style="yellow"), soft_wrap=True)
        return
    if summary.rows:
        print_rows(console, summary.columns, summary.rows, wrappable=[summary.columns[-1]])
    if (retried := summary.retry_line()) is not None:
        console.print(Text(retried, style="yellow"), soft_wrap=True)
    for line in summary.alarm_lines():
        console.print(Text(line, style="bold red"), soft_wrap=True)


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


def cmd_serve(args: argparse.Namespace) -> int:
    if not os.environ.get("PREFECT_API_URL"):
        from prefect.settings import PREFECT_API_URL

        if not PREFECT_API_URL.value():
            print("servebench: schedules need a persistent Prefect server. Start one (`prefect server start`) "
                  "and export PREFECT_API_URL=http://127.0.0.1:4200/api, then run `servebench serve` again.",
                  file=sys.stderr)
            return EXIT_FAILED
    from servebench.flows.serve import ROOT, serve_nightly

    os.chdir(ROOT)  # prefect.yaml's parameters are paths relative to the checkout
    try:
        serve_nightly(args.deployments or None)
    except ValueError as exc:
        print(f"servebench: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return EXIT_OK


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def cmd_query(args: argparse.Namespace) -> int:
    import duckdb

    con = warehouse.connect(warehouse_path(args), read_only=True)
    try:
        cursor = con.execute(args.sql)
    except duckdb.Error as exc:
        print(f"servebench: query failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    names = [d[0] for d in cursor.description] if cursor.description else []
    result = cursor.fetchall() if names else []
    con.close()
    if args.format == "json":
        print(json.dumps([dict(zip(names, row)) for row in result], default=str, indent=1))
    elif args.format == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(names)
        writer.writerows(result)
    elif args.format == "markdown":
        print(markdown_table(names, result))
    else:
        print_rows(Console(), names, result)
    return EXIT_OK


def display(value: object) -> str:
    return "NULL" if value is None else str(value)


def print_rows(console: Console, names: Sequence[str], rows: Sequence[Sequence[object]],
               wrappable: Collection[str] = ()) -> None:
    """A table when it fits the console ($COLUMNS, or 80 when not a terminal), else one block of
    `name  value` lines per row, like psql's \\x: rich squeezes a too-wide table's columns until
    values break mid-word, a block never breaks a value. Only the `wrappable` columns (free text)
    may wrap, down to WRAP_WIDTH; every other value stays on one line."""
    table = rows_table(names, rows, wrappable)
    narrowest = rows_table(names, rows, wrappable, squeezed=True) if wrappable else table
    if Measurement.get(console, console.options.update_width(1 << 30), narrowest).maximum <= console.width:
        console.print(table)
    else:
        print_vertical(console, names, rows)


def rows_table(names: Sequence[str], rows: Sequence[Sequence[object]], wrappable: Collection[str],
               squeezed: bool = False) -> Table:
    """squeezed: the wrappable columns at their narrowest, to measure whether the table can fit."""
    table = Table(show_edge=False)
    for name in names:
        wraps = name in wrappable
        table.add_column(Text(name), no_wrap=not wraps,  # Text: a `[` in a name or value is not rich markup
                         max_width=WRAP_WIDTH if wraps and squeezed else None)
    for row in rows:
        table.add_row(*(Text(display(value)) for value in row))
    return table


def print_vertical(console: Console, names: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """soft_wrap: rich writes each line whole (a terminal wraps it visually), never cut at its width."""
    width = max(map(len, names), default=0)
    for number, row in enumerate(rows, 1):
        console.print(Text(f"-[ row {number} ]-", style="bold"), soft_wrap=True)
        for name, value in zip(names, row):
            text = display(value).replace("\n", "\n" + " " * (width + 2))
            console.print(Text.assemble((name.ljust(width), "bold"), "  ", text), soft_wrap=True)


def markdown_table(names: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub markdown table, numeric columns right-aligned; `|` and newlines escaped so a
    value stays in its cell."""
    def cell(value: object) -> str:
        return display(value).replace("|", "\\|").replace("\n", "<br>")

    def numeric(column: int) -> bool:
        values = [row[column] for row in rows if row[column] is not None]
        return bool(values) and all(isinstance(v, (int, float, Decimal)) and not isinstance(v, bool) for v in values)

    lines = ["| " + " | ".join(cell(name) for name in names) + " |",
             "|" + "|".join(" ---: " if numeric(i) else " --- " for i in range(len(names))) + "|"]
    lines += ["| " + " | ".join(cell(value) for value in row) + " |" for row in rows]
    return "\n".join(lines)


def cmd_report(args: argparse.Namespace) -> int:
    from servebench.analysis.report import run_report
    from servebench.warehouse import reads

    con = warehouse.connect(warehouse_path(args), read_only=True)
    try:
        run_id = chosen_run_id(con, args)
        if run_id is None:
            print("servebench: no run found in the warehouse", file=sys.stderr)
            return EXIT_FAILED
        run_dir = reads.run_directory(con, run_id)
        if run_dir is None:
            print(f"servebench: no run {run_id!r} in the warehouse", file=sys.stderr)
            return EXIT_FAILED
        path = run_report(con, run_id, Path(args.out or run_dir))
    finally:
        con.close()
    print(path)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
