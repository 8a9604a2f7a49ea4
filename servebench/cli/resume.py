"""`servebench resume RUN_ID`: the one way to continue a run under its own run id
(`servebench.campaign.resume`; docs/faults-and-resume.md): a run whose orchestrator was killed is finished
(what it left is stopped, what it measured landed, only the cells with no result measured); with `--failed`,
a finished run's failed cells are measured again."""

from __future__ import annotations

import argparse
import sys

from servebench.cli.campaign_flow import orchestrate
from servebench.cli.common import EXIT_FAILED, warehouse_arg, warehouse_path


def add_resume_parser(sub: argparse._SubParsersAction) -> None:
    resume = sub.add_parser("resume", help="finish a run whose orchestrator was killed (stop what it left, land "
                            "what it measured, measure only the cells with no result), or with --failed measure a "
                            "finished run's failed cells again; the run keeps its id")
    resume.add_argument("run_id", help="the run (`servebench runs` lists them)")
    resume.add_argument("--failed", dest="failed_only", action="store_true",
                        help="measure again the cells that failed in a finished run")
    warehouse_arg(resume, makes_runs=True)
    resume.set_defaults(func=cmd_resume)


def cmd_resume(args: argparse.Namespace) -> int:
    """The same run id, its campaign as it was run (checked first, before Prefect starts)."""
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
