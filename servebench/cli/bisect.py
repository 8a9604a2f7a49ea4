"""`servebench bisect CAMPAIGN --good A --bad B`: the first commit of the engine that made a metric
worse (`flows/bisect.py`; the decisions in `servebench/bisect/search.py`)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from rich.console import Console
from rich.table import Table

from servebench.cli.common import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, format_arg, warehouse_arg, warehouse_path


def add_bisect_parser(sub) -> None:
    from servebench.analysis.regression.series import METRICS

    p = sub.add_parser("bisect", help="find the first engine commit between --good and --bad that made a metric "
                       "worse: builds (through the cache) and measures the midpoints, each step a run of its own")
    p.add_argument("file", help="a campaign whose engine is built from git (`source: {git: ..., commit: ...}`)")
    p.add_argument("--good", required=True, help="a commit (hash, tag, branch) known good")
    p.add_argument("--bad", required=True, help="a later commit known bad (trusted, not built: as git bisect)")
    p.add_argument("--metric", default="tpot_p50_ms", choices=[m for m in METRICS if m != "capacity"],
                   help="the cells' column to judge by (default: tpot_p50_ms)")
    p.add_argument("--mode", help="the campaign's mode to measure (default: its first)")
    p.add_argument("--threshold", type=float, default=0.10,
                   help="how much worse a commit must be to be bad (relative, default 0.10): every one of its "
                        "repeats worse than every repeat of the good commit by more than this")
    p.add_argument("--repeats", type=int, default=3, help="cells per commit, at the load point (default: 3)")
    p.add_argument("--point", help="the load point to measure, as in cell keys (c4, rate8; default: the campaign's "
                   "first)")
    format_arg(p, ("table", "json"))
    warehouse_arg(p, makes_runs=True)
    p.set_defaults(func=cmd_bisect)


def cmd_bisect(args: argparse.Namespace) -> int:
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from servebench import progress
    from servebench.bisect.search import BisectError
    from servebench.bisect.steps import bisected_point, commits_to_bisect
    from servebench.builds.venv import BuildError
    from servebench.campaign.loading import load_campaign
    from servebench.cli.prefect_api import temporary_api
    from servebench.paths import cache_dir

    if args.threshold <= 0 or args.repeats < 1:
        print("servebench bisect: --threshold is a positive fraction (0.1: 10 % worse), --repeats at least 1",
              file=sys.stderr)
        return EXIT_FAILED
    campaign = load_campaign(args.file)  # a bad campaign, mode or pair of commits fails here, before Prefect starts
    try:
        commits_to_bisect(campaign, args.mode or campaign.modes[0].name, args.good, args.bad, cache_dir())
        bisected_point(campaign, args.point)
    except (BisectError, BuildError) as exc:
        print(f"servebench bisect: {exc}", file=sys.stderr)
        return EXIT_FAILED
    console = Console(stderr=True)
    try:
        with temporary_api(), progress.live(console):
            from servebench.flows.bisect import bisect_run

            outcome = bisect_run(campaign_file=args.file, good=args.good, bad=args.bad, metric=args.metric,
                                 mode=args.mode, threshold=args.threshold, repeats=args.repeats,
                                 warehouse_path=str(warehouse_path(args)), point=args.point)
    except (BisectError, BuildError) as exc:
        print(f"servebench bisect: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: the steps measured so far are in the warehouse (bisect_steps)")
        return EXIT_INTERRUPTED
    if args.format == "json":
        print(json.dumps(outcome, default=str, indent=1))
        return EXIT_OK
    print_outcome(Console(width=200), outcome, args.metric)
    return EXIT_OK


def print_outcome(console: Console, outcome: dict, metric: str) -> None:
    table = Table("step", "commit", "subject", metric, "repeats", "change", "apart by", "verdict", "run",
                  title=f"bisect {outcome['bisect_id']}")
    for s in outcome["steps"]:
        table.add_row(str(s["step"]), s["commit_hash"][:12], s["subject"], f"{s['value']:.3g}",
                      " ".join(f"{v:.3g}" for v in s["repeat_values"]),
                      "" if s["change"] is None else f"{s['change']:+.1%}",
                      "" if s["separation"] is None else f"{s['separation']:+.1%}", s["verdict"], s["run_id"])
    console.print(table)
    trusted = "" if outcome["bad_measured"] else " (the --bad commit itself: not measured, as given)"
    console.print(f"first bad commit: [bold]{outcome['first_bad']}[/] {outcome['subject']}{trusted}")
    console.print(f"last good commit: {outcome['last_good']}")
    console.print(f"{outcome['builds']} commits built and measured of {outcome['commits']} "
                  f"(at most {outcome['most_builds']}); steps in {outcome['warehouse']} (bisect_steps), "
                  f"{outcome['folder']}")
