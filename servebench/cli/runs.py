"""`servebench runs`: every run of the warehouse, newest first: run id, campaign, start, status, duration and
cells valid of all; the index a user reads before `report`, `compare` or `resume`. `--html [PATH]` writes it
as a page instead, with each run's headline, report link and comparison (`servebench.analysis.runs_index`)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timezone
from pathlib import Path
from typing import Sequence

from servebench import warehouse
from servebench.cli.common import EXIT_FAILED, EXIT_OK, format_arg, warehouse_path
from servebench.cli.tables import markdown_table, readable

COLUMNS = ("run", "campaign", "started (UTC)", "status", "took", "cells valid")


def add_runs_parser(sub: argparse._SubParsersAction) -> None:
    runs = sub.add_parser("runs", help="list the warehouse's runs, newest first: campaign, start, status, "
                          "duration, cells valid of all")
    runs.add_argument("--campaign", help="only this campaign's runs")
    runs.add_argument("--warehouse", help="DuckDB file to read (default: $SERVEBENCH_WAREHOUSE or "
                      "runs/servebench.duckdb)")
    format_arg(runs, ("table", "markdown", "json"))
    runs.add_argument("--html", nargs="?", const="", metavar="PATH",
                      help="write the index page instead: every run with its headline figure, a link to its report "
                      "and its comparison with the campaign's previous run (default PATH: index.html in the runs "
                      "directory, $SERVEBENCH_RUNS or runs/, as every run writes it)")
    runs.set_defaults(func=cmd_runs)


def cmd_runs(args: argparse.Namespace) -> int:
    from servebench.warehouse.reads import runs_overview

    if args.html is not None:
        return write_html(args)
    with warehouse.connect(warehouse_path(args), read_only=True) as con:
        found = runs_overview(con, args.campaign)
    if args.format == "json":
        print(json.dumps(found, default=str, indent=1))
        return EXIT_OK
    if not found:
        where = f"of campaign {args.campaign!r} " if args.campaign else ""
        print(f"servebench: no run {where}in {warehouse_path(args)}", file=sys.stderr)
        return EXIT_FAILED
    rows = [(run["run_id"], run["campaign"], f"{run['started_at'].astimezone(timezone.utc):%Y-%m-%d %H:%M}",
             run["status"], str(readable(run["seconds"], "seconds")) if run["seconds"] is not None else "-",
             f"{run['cells_valid']} of {run['cells']}") for run in found]
    if args.format == "markdown":
        print(markdown_table(COLUMNS, rows))
    else:
        print_columns(COLUMNS, rows)
    return EXIT_OK


def write_html(args: argparse.Namespace) -> int:
    """The index page of every run (of the whole warehouse: it stands beside every run's directory)."""
    from servebench.analysis.runs_index import write_index
    from servebench.paths import runs_dir

    path = Path(args.html) if args.html else runs_dir() / "index.html"
    if args.campaign:
        print("servebench: --html lists every run; --campaign is for the text listing", file=sys.stderr)
        return EXIT_FAILED
    with warehouse.connect(warehouse_path(args), read_only=True) as con:
        written = write_index(con, path)
    print(written)
    return EXIT_OK


def print_columns(names: Sequence[object], rows: Sequence[Sequence[object]]) -> None:
    """Plain aligned columns, one run a line, like `git log --oneline`: a listing stays one line a run at
    any width, where a boxed table of six columns would fall back to blocks on a narrow console."""
    widths = [max(len(str(value)) for value in column) for column in zip(names, *rows)]
    for line in (names, *rows):
        print("  ".join(str(value).ljust(width) for value, width in zip(line, widths)).rstrip())
