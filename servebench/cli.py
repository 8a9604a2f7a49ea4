"""`servebench`: plan, build, run, serve, load, query, report, regressions, compare, annotate.

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
from pathlib import Path

from rich.console import Console
from rich.table import Table

import warehouse
from servebench.spec import SpecError, load_campaign

EXIT_OK, EXIT_FAILED, EXIT_INTERRUPTED = 0, 1, 130


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
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
    build.set_defaults(func=cmd_build)

    run = sub.add_parser("run", help="run a campaign end to end")
    run.add_argument("file")
    warehouse_arg(run)
    run.set_defaults(func=cmd_run)

    serve = sub.add_parser("serve", help="serve prefect.yaml's nightly deployments from this machine "
                           "(needs a running Prefect server: PREFECT_API_URL)")
    serve.add_argument("deployments", nargs="*", help="names from prefect.yaml (default: all)")
    serve.set_defaults(func=cmd_serve)

    query = sub.add_parser("query", help="run SQL on the warehouse (read-only)")
    query.add_argument("sql")
    query.add_argument("--format", choices=["table", "csv", "json"], default="table")
    warehouse_arg(query)
    query.set_defaults(func=cmd_query)

    report = sub.add_parser("report", help="render the HTML report of a run")
    which = report.add_mutually_exclusive_group()
    which.add_argument("--run", help="run id (default: the latest run)")
    which.add_argument("--campaign", help="the latest run of this campaign")
    report.add_argument("--out", help="directory for report.html (default: the run directory)")
    warehouse_arg(report)
    report.set_defaults(func=cmd_report)

    from servebench.load.cli import add_load_parser
    from servebench.regression.cli import add_regression_parsers
    add_load_parser(sub)
    add_regression_parsers(sub)
    return parser


def warehouse_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--warehouse", help="DuckDB file (default: $SERVEBENCH_WAREHOUSE or "
                        "warehouse/servebench.duckdb)")


def warehouse_path(args: argparse.Namespace) -> Path:
    return Path(args.warehouse) if args.warehouse else warehouse.default_path()


def cmd_plan(args: argparse.Namespace) -> int:
    from servebench.plan import describe_plan

    campaign = load_campaign(args.file)
    print(describe_plan(campaign, Path(args.file)))
    return EXIT_OK


def cmd_build(args: argparse.Namespace) -> int:
    from servebench.build import ensure_engine_venv
    from servebench.paths import cache_dir

    campaign = load_campaign(args.file)
    build = ensure_engine_venv(campaign.engine, cache_dir(), log=lambda text: print(text, file=sys.stderr))
    state = "cached" if build.build_seconds is None else f"built in {build.build_seconds:.0f} s"
    print(f"{build.key} ({campaign.engine.package} -> {build.engine_version}, {state})")
    print(build.python)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    campaign = load_campaign(args.file)  # fail fast, before Prefect starts
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")  # the live display replaces the log scroll
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no telemetry from the temporary server
    from servebench import progress
    from servebench.prefect_api import temporary_api

    console = Console(stderr=True)
    path = str(warehouse_path(args))
    signal.signal(signal.SIGTERM, _terminate)  # a scheduler's cancel stops as cleanly as Ctrl-C
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # started in the background by a shell
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with temporary_api(), progress.live(console):
            from flows.campaign import campaign_run  # after the API URL is set: prefect reads it at import

            outcome = campaign_run(campaign_file=args.file, warehouse_path=path)
    except BaseException as exc:  # Ctrl-C, or SIGTERM (Prefect raises its TerminationSignal for it)
        if not isinstance(exc, KeyboardInterrupt) and type(exc).__name__ != "TerminationSignal":
            raise
        console.print(f"[yellow]interrupted[/]: servers stopped; cells measured so far are in {path}")
        return EXIT_INTERRUPTED
    counts = {}
    for status in outcome["cells"].values():
        counts[status] = counts.get(status, 0) + 1
    console.print(f"campaign [bold]{campaign.name}[/] run {outcome['run_id']}: [bold]{outcome['status']}[/] "
                  f"({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})")
    console.print(f"warehouse: {outcome['warehouse']}")
    console.print(f"report:    {outcome.get('report')}")
    found = outcome.get("regressions") or {}
    console.print(f"history:   {found.get('regression', 0)} regression(s), {found.get('improvement', 0)} "
                  f"improvement(s) against earlier runs (servebench regressions)")
    console.print(f"run dir:   {outcome['run_dir']}")
    console.print('try:       servebench query "select mode, clients, rate, count(*) from requests '
                  'join cells using (cell_id) group by all"')
    return EXIT_OK if outcome["status"] == "completed" else EXIT_FAILED


def cmd_serve(args: argparse.Namespace) -> int:
    if not os.environ.get("PREFECT_API_URL"):
        from prefect.settings import PREFECT_API_URL

        if not PREFECT_API_URL.value():
            print("servebench: schedules need a persistent Prefect server. Start one (`prefect server start`) "
                  "and export PREFECT_API_URL=http://127.0.0.1:4200/api, then run `servebench serve` again.",
                  file=sys.stderr)
            return EXIT_FAILED
    from flows.serve import ROOT, serve_nightly

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
    else:
        table = Table(*names)
        for row in result:
            table.add_row(*("NULL" if v is None else str(v) for v in row))
        Console().print(table)
    return EXIT_OK


def cmd_report(args: argparse.Namespace) -> int:
    from servebench.report import latest_run_id, run_report

    con = warehouse.connect(warehouse_path(args), read_only=True)
    try:
        run_id = args.run or latest_run_id(con, args.campaign)
        if run_id is None:
            print("servebench: no run found in the warehouse", file=sys.stderr)
            return EXIT_FAILED
        found = con.execute("select run_dir from runs where run_id = ?", [run_id]).fetchone()
        if found is None:
            print(f"servebench: no run {run_id!r} in the warehouse", file=sys.stderr)
            return EXIT_FAILED
        path = run_report(con, run_id, Path(args.out or found[0]))
    finally:
        con.close()
    print(path)
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
