"""`servebench regressions`: the regressions and improvements the history's detector found
(`servebench.analysis.regression`; docs/regressions.md)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timedelta, timezone

from rich.console import Console
from rich.table import Table

from servebench import warehouse
from servebench.cli.common import EXIT_OK, EXIT_REGRESSION, format_arg, warehouse_arg, warehouse_path


def add_regressions_parser(sub: argparse._SubParsersAction) -> None:
    regressions = sub.add_parser("regressions", help="list regressions and improvements found in the history")
    regressions.add_argument("--since", type=_since, help="nights since: 2026-11-01, or 7d / 24h (default: all)")
    regressions.add_argument("--campaign", help="only this campaign")
    regressions.add_argument("--all-nights", action="store_true",
                             help="every analyzed night (default: each campaign's newest run)")
    regressions.add_argument("--recompute", action="store_true",
                             help="analyze the runs again first (after annotations or new settings)")
    regressions.add_argument("--fail-on-regression", action="store_true",
                             help=f"exit {EXIT_REGRESSION} if a regression (suspected or confirmed) is listed")
    format_arg(regressions, ("table", "json", "markdown"))
    warehouse_arg(regressions)
    regressions.set_defaults(func=cmd_regressions)


def _since(text: str) -> datetime:
    now = datetime.now(timezone.utc)
    units = {"d": "days", "h": "hours", "w": "weeks"}
    if text[:-1].isdigit() and text[-1] in units:
        return now - timedelta(**{units[text[-1]]: int(text[:-1])})
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--since {text!r}: give a date (2026-11-01) or a span (7d, 24h, 2w)")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def cmd_regressions(args: argparse.Namespace) -> int:
    from servebench.analysis.regression.history import findings, recompute
    from servebench.analysis.regression.summary import COLUMNS, bisect_commands, markdown, table_rows

    con = warehouse.connect(warehouse_path(args), read_only=not args.recompute)
    try:
        if args.recompute:
            analyzed = recompute(con, since=args.since, campaign=args.campaign)
            print(f"analyzed {analyzed} run(s) again", file=sys.stderr)
        rows = findings(con, since=args.since, campaign=args.campaign, latest_only=not args.all_nights)
        judged = judged_runs(con, args)
    finally:
        con.close()
    rows = [r for r in rows if r["kind"] != "noisy"] if args.format != "json" else rows
    if args.format == "json":
        print(json.dumps({"findings": rows, "verdicts": {run_id: [v.model_dump() for v in verdicts]
                                                         for run_id, verdicts in judged.items()}},
                         default=str, indent=1))
    elif args.format == "markdown":
        verdicts = [v for found in judged.values() for v in found]
        print(markdown(rows, ", ".join(judged) or None, verdicts if judged else None))
    else:
        table = Table(*COLUMNS, title="regressions and improvements")
        for row in table_rows(rows):
            table.add_row(*row)
        Console(width=220).print(table if rows else "no regression or improvement found")
        print_verdicts(judged)
        for command in bisect_commands(rows):
            print(f"find the commit: {command}")
    if args.fail_on_regression and any(r["kind"] == "regression" for r in rows):
        return EXIT_REGRESSION
    return EXIT_OK


def judged_runs(con: warehouse.Connection, args: argparse.Namespace) -> dict:
    """Each campaign's newest finished run (every finished run with --all-nights), with every series'
    verdict: what the findings table alone cannot say (no change, or not enough history to tell)."""
    from servebench.analysis.regression.history import run_settings, run_verdicts
    from servebench.warehouse.history import finished_runs

    runs = finished_runs(con, since=args.since, campaign=args.campaign, latest_only=not args.all_nights)
    return {run_id: run_verdicts(con, run_id, run_settings(con, run_id)) for run_id in runs}


def print_verdicts(judged: dict) -> None:
    from servebench.analysis.regression.summary import verdict_counts

    for run_id, verdicts in judged.items():
        print(f"run {run_id}: {verdict_counts(verdicts)}")
        for verdict in verdicts:
            if verdict.verdict == "not enough history":
                print(f"  {verdict.series_id} {verdict.metric}: {verdict.detail}")
                break   # one example: every series of a run has the same nights
