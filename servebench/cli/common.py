"""What every `servebench` command shares: exit codes and the warehouse option."""

from __future__ import annotations

import argparse
from pathlib import Path

import warehouse

EXIT_OK, EXIT_FAILED, EXIT_REGRESSION, EXIT_INTERRUPTED = 0, 1, 3, 130


def warehouse_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--warehouse", help="DuckDB file (default: $SERVEBENCH_WAREHOUSE or "
                        "warehouse/servebench.duckdb)")


def warehouse_path(args: argparse.Namespace) -> Path:
    return Path(args.warehouse) if args.warehouse else warehouse.default_path()
