"""`servebench run CAMPAIGN`: a campaign end to end, as the Prefect flow `campaign_run` (`flows/campaign.py`).
A run cut short is finished by `servebench resume RUN_ID`."""

from __future__ import annotations

import argparse

from servebench.campaign.loading import load_campaign
from servebench.cli.campaign_flow import orchestrate
from servebench.cli.common import campaign_file, warehouse_arg, warehouse_path


def add_run_parser(sub: argparse._SubParsersAction) -> None:
    run = sub.add_parser("run", help="run a campaign end to end")
    run.add_argument("file", type=campaign_file, help="a campaign file, or a shipped campaign's name "
                     "(`servebench campaigns`)")
    warehouse_arg(run, makes_runs=True)
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    campaign = load_campaign(args.file)  # fail fast, before Prefect starts

    def run() -> dict:
        from servebench.flows.campaign import campaign_run  # after the API URL is set: prefect reads it at import

        return campaign_run(campaign_file=args.file, warehouse_path=str(warehouse_path(args)))
    return orchestrate(args, campaign.name, run)
