"""`servebench deployments`: nightly runs of the user's own campaigns as Prefect deployments.

`init CAMPAIGN...` writes a prefect.yaml of the user's own, one deployment per campaign in the user's time
zone (`servebench.campaign.deployments`); `serve` runs that file's deployments at their times from this
host, one run at a time, without a worker (Prefect's `serve`; the schedules live in a Prefect server).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from servebench.campaign.deployments import (
    DEFAULT_CRON,
    DEFAULT_POOL,
    CampaignDeployment,
    Schedule,
    check_cron,
    local_timezone,
    prefect_yaml,
    valid_timezone,
)
from servebench.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, campaign_file
from servebench.paths import default_warehouse


def add_deployments_parser(sub: argparse._SubParsersAction) -> None:
    deployments = sub.add_parser("deployments", help="nightly runs of your own campaigns: write a prefect.yaml, "
                                 "serve it")
    actions = deployments.add_subparsers(dest="action", required=True)
    init = actions.add_parser("init", help="write a prefect.yaml: one nightly deployment per campaign, in your "
                              "time zone")
    init.add_argument("campaigns", nargs="+", type=campaign_file, metavar="CAMPAIGN",
                      help="campaign files (or shipped campaigns' names)")
    init.add_argument("--out", default="prefect.yaml", help="the file to write (default: prefect.yaml here)")
    init.add_argument("--timezone", help="an IANA zone, e.g. America/Chicago (default: this host's, from TZ or "
                      "/etc/localtime)")
    init.add_argument("--cron", default=DEFAULT_CRON, help=f"when, in that zone (default: \"{DEFAULT_CRON}\")")
    init.add_argument("--warehouse", help="the DuckDB file every run lands in (default: $SERVEBENCH_WAREHOUSE "
                      "or runs/servebench.duckdb), made absolute")
    init.add_argument("--pool", default=DEFAULT_POOL, help=f"the work pool for `prefect deploy` (default: "
                      f"{DEFAULT_POOL})")
    init.add_argument("--force", action="store_true", help="replace the file if it exists")
    init.set_defaults(func=cmd_deployments_init)
    serve = actions.add_parser("serve", help="run a prefect.yaml's deployments at their times from this host "
                               "(needs a running Prefect server: PREFECT_API_URL)")
    serve.add_argument("names", nargs="*", help="deployment names (default: all of the file)")
    serve.add_argument("--file", default="prefect.yaml", help="the prefect.yaml (default: prefect.yaml here)")
    serve.set_defaults(func=cmd_deployments_serve)


def cmd_deployments_init(args: argparse.Namespace) -> int:
    from servebench.campaign.loading import load_campaign

    out = Path(args.out).absolute()
    if out.exists() and not args.force:
        print(f"servebench: {out} exists: give --force to replace it, or --out another file", file=sys.stderr)
        return EXIT_FAILED
    timezone = args.timezone or local_timezone()
    if not valid_timezone(timezone):
        print(f"servebench: --timezone {timezone!r} is not an IANA time zone (e.g. America/Chicago)", file=sys.stderr)
        return EXIT_USAGE
    try:
        check_cron(args.cron)
    except ValueError as exc:
        print(f"servebench: {exc}", file=sys.stderr)
        return EXIT_USAGE
    campaigns = []
    for given in args.campaigns:
        campaign = load_campaign(given)   # an invalid campaign is refused now, not at night
        campaigns.append(CampaignDeployment(name=campaign.name, campaign_file=Path(given).absolute(),
                                            description=campaign.description or ""))
    warehouse = Path(args.warehouse).absolute() if args.warehouse else default_warehouse().absolute()
    try:
        text = prefect_yaml(campaigns, Schedule(timezone=timezone, cron=args.cron, warehouse=warehouse,
                                                directory=out.parent, file_name=out.name, pool=args.pool))
    except ValueError as exc:
        print(f"servebench: {exc}", file=sys.stderr)
        return EXIT_FAILED
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(f"wrote {out}: {len(campaigns)} deployment(s) at \"{args.cron}\" in {timezone}")
    print(f"serve it: servebench deployments serve --file {out}   (or prefect deploy --all --prefect-file {out})")
    return EXIT_OK


def cmd_deployments_serve(args: argparse.Namespace) -> int:
    if not os.environ.get("PREFECT_API_URL"):
        from prefect.settings import PREFECT_API_URL

        if not PREFECT_API_URL.value():
            print("servebench: schedules need a persistent Prefect server. Start one (`prefect server start`) and "
                  "export PREFECT_API_URL=http://127.0.0.1:4200/api, then serve again.", file=sys.stderr)
            return EXIT_FAILED
    from servebench.flows.serve import serve_deployments

    path = Path(args.file).absolute()
    if not path.is_file():
        print(f"servebench: {path}: no such prefect.yaml (write one with `servebench deployments init`)",
              file=sys.stderr)
        return EXIT_FAILED
    os.chdir(path.parent)  # a prefect.yaml's parameters and entrypoints are relative to its folder
    try:
        serve_deployments(path, args.names or None)
    except ValueError as exc:
        print(f"servebench: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return EXIT_OK
