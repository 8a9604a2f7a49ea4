"""`servebench annotate accept|exclude RUN`: accept a change as the new baseline, or leave a night out
of the history, then analyze the campaign's newest run again (docs/regressions.md)."""

from __future__ import annotations

import argparse
import sys

from servebench import warehouse
from servebench.cli.common import EXIT_FAILED, EXIT_OK, warehouse_arg, warehouse_path
from servebench.warehouse import reads


def add_annotate_parser(sub: argparse._SubParsersAction) -> None:
    annotate = sub.add_parser("annotate", help="accept a change as the new baseline, or exclude a night")
    annotate.add_argument("action", choices=["accept", "exclude"], help="accept: that night starts a new baseline "
                          "(an intended change); exclude: the night is left out of the history")
    annotate.add_argument("run", help="the night: a run id")
    annotate.add_argument("--note", required=True, help="why (kept with the annotation)")
    annotate.add_argument("--series", help="one series id (default: every series of the run)")
    annotate.add_argument("--metric", help="one metric (default: every metric)")
    annotate.add_argument("--author", help="who annotates (kept with the annotation)")
    warehouse_arg(annotate)
    annotate.set_defaults(func=cmd_annotate)


def cmd_annotate(args: argparse.Namespace) -> int:
    from servebench.analysis.regression.history import annotate, recompute

    con = warehouse.connect(warehouse_path(args))
    try:
        try:
            annotation_id = annotate(con, args.action, args.run, args.note, args.series, args.metric, args.author)
        except ValueError as exc:
            print(f"servebench: {exc}", file=sys.stderr)
            return EXIT_FAILED
        campaign = reads.run_campaign(con, args.run)
        analyzed = recompute(con, campaign=campaign, latest_only=True)
    finally:
        con.close()
    print(f"annotation {annotation_id}: {args.action} {args.run}; re-analyzed {analyzed} run(s) of {campaign}")
    return EXIT_OK
