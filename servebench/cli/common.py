"""What every `servebench` command shares: exit codes and the warehouse option."""

from __future__ import annotations

import argparse
from pathlib import Path

from servebench.paths import default_warehouse

EXIT_OK, EXIT_FAILED, EXIT_REGRESSION, EXIT_INTERRUPTED = 0, 1, 3, 130


def warehouse_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--warehouse", help="DuckDB file (default: $SERVEBENCH_WAREHOUSE or "
                        "runs/servebench.duckdb)")


def warehouse_path(args: argparse.Namespace) -> Path:
    return Path(args.warehouse) if args.warehouse else default_warehouse()


def run_choice_args(parser: argparse.ArgumentParser) -> None:
    """--run ID or --campaign NAME (its latest run); neither: the latest run."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--run", help="run id (default: the latest run)")
    which.add_argument("--campaign", help="the latest run of this campaign")


def chosen_run_id(con, args: argparse.Namespace) -> str | None:
    """The run `run_choice_args` asked for, or None if the warehouse has none."""
    from servebench.warehouse.reads import latest_run_id

    return args.run or latest_run_id(con, args.campaign)
