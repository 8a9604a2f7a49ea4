"""`servebench rerun-failed RUN_ID`: a finished run's failed cells measured again, under the same run id:
a resume that measures only the cells that failed (`servebench.cli.resume`)."""

from __future__ import annotations

import argparse

from servebench.cli.common import warehouse_arg
from servebench.cli.resume import cmd_resume


def add_rerun_failed_parser(sub: argparse._SubParsersAction) -> None:
    rerun = sub.add_parser("rerun-failed", help="measure the failed cells of a finished run again (same run id)")
    rerun.add_argument("run_id")
    warehouse_arg(rerun)
    rerun.set_defaults(func=cmd_rerun_failed, failed_only=True)


def cmd_rerun_failed(args: argparse.Namespace) -> int:
    return cmd_resume(args)
