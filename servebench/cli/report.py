"""`servebench report`: the HTML report of a run (`servebench.analysis.report`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from servebench import warehouse
from servebench.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    chosen_run_or_say_why,
    run_choice_args,
    warehouse_arg,
    warehouse_path,
)


def add_report_parser(sub: argparse._SubParsersAction) -> None:
    report = sub.add_parser("report", help="render the HTML report of a run")
    run_choice_args(report)
    report.add_argument("--out", help="directory for report.html (default: the run directory)")
    warehouse_arg(report)
    report.set_defaults(func=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    from servebench.analysis.report import run_report
    from servebench.warehouse import reads

    con = warehouse.connect(warehouse_path(args), read_only=True)
    try:
        run_id = chosen_run_or_say_why(con, args)
        if run_id is None:
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
