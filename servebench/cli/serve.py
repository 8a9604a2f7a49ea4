"""`servebench serve`: prefect.yaml's nightly deployments served from this host (`flows/serve.py`)."""

from __future__ import annotations

import argparse
import os
import sys

from servebench.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK


def add_serve_parser(sub: argparse._SubParsersAction) -> None:
    serve = sub.add_parser("serve", help="serve prefect.yaml's nightly deployments from this host "
                           "(needs a running Prefect server: PREFECT_API_URL)")
    serve.add_argument("deployments", nargs="*", help="names from prefect.yaml (default: all)")
    serve.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    if not os.environ.get("PREFECT_API_URL"):
        from prefect.settings import PREFECT_API_URL

        if not PREFECT_API_URL.value():
            print("servebench: schedules need a persistent Prefect server. Start one (`prefect server start`) "
                  "and export PREFECT_API_URL=http://127.0.0.1:4200/api, then run `servebench serve` again.",
                  file=sys.stderr)
            return EXIT_FAILED
    from servebench.flows.serve import ROOT, serve_nightly

    os.chdir(ROOT)  # prefect.yaml's parameters are paths relative to the checkout
    try:
        serve_nightly(args.deployments or None)
    except ValueError as exc:
        print(f"servebench: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return EXIT_OK
