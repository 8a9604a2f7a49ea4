"""`servebench run CAMPAIGN`: a campaign end to end, as the Prefect flow `campaign_run` (`flows/campaign.py`)."""

from __future__ import annotations

import argparse
import sys

from servebench.campaign.loading import load_campaign
from servebench.cli.campaign_flow import orchestrate
from servebench.cli.common import EXIT_FAILED, campaign_file, warehouse_arg, warehouse_path
from servebench.cli.resume import cmd_resume


def add_run_parser(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run a campaign end to end")
    run.add_argument("file", nargs="?", type=campaign_file)
    run.add_argument("--resume", metavar="RUN_ID", help="instead: finish this run (as `servebench resume`)")
    warehouse_arg(run)
    run.set_defaults(func=cmd_run)


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
