"""`servebench campaigns`: the campaigns shipped with servebench, each with its first comment line."""

from __future__ import annotations

import argparse

from servebench.campaign.loading import shipped_campaigns
from servebench.cli.common import EXIT_OK


def add_campaigns_parser(sub: argparse._SubParsersAction) -> None:
    campaigns = sub.add_parser("campaigns", help="list the campaigns shipped with servebench (plan, build and "
                               "run take one by its name from any directory)")
    campaigns.set_defaults(func=cmd_campaigns)


def cmd_campaigns(args: argparse.Namespace) -> int:
    shipped = shipped_campaigns()
    for path in shipped:
        first = next((line.lstrip("# ").strip() for line in path.read_text().splitlines() if line.startswith("#")), "")
        print(f"{path.stem:24} {first}")
    print(f"(in {shipped[0].parent})" if shipped else "no campaigns are shipped")
    return EXIT_OK
