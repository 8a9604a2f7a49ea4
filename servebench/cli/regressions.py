"""`servebench regressions`, `servebench compare` and `servebench annotate`."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timedelta, timezone

from rich.console import Console
from rich.table import Table

from servebench import warehouse
from servebench.cli.common import EXIT_FAILED, EXIT_OK, EXIT_REGRESSION, warehouse_arg, warehouse_path
from servebench.warehouse import reads


def add_regression_parsers(sub) -> None:
    regressions = sub.add_parser("regressions", help="list regressions and improvements found in the history")
    regressions.add_argument("--since", type=_since, help="nights since: 2026-11-01, or 7d / 24h (default: all)")
    regressions.add_argument("--campaign", help="only this campaign")
    regressions.add_argument("--all-nights", action="store_true",
                             help="every analyzed night (default: each campaign's newest run)")
    regressions.add_argument("--recompute", action="store_true",
                             help="analyze the runs again first (after annotations or new settings)")
    regressions.add_argument("--fail-on-regression", action="store_true",
                             help=f"exit {EXIT_REGRESSION} if a regression (suspected or confirmed) is listed")
    regressions.add_argument("--format", choices=["table", "json", "markdown"], default="table")
    warehouse_arg(regressions)
    regressions.set_defaults(func=cmd_regressions)

    compare = sub.add_parser("compare", help="per-cell deltas of the main metrics between two runs")
    compare.add_argument("run_a")
    compare.add_argument("run_b")
    compare.add_argument("--format", choices=["table", "json"], default="table")
    compare.add_argument("--alpha", type=float, default=0.05, help="two-sided U-test level (default 0.05)")
    compare.add_argument("--min-effect", type=float, default=0.05, help="smallest relative change that counts")
    warehouse_arg(compare)
    compare.set_defaults(func=cmd_compare)

    annotate = sub.add_parser("annotate", help="accept a change as the new baseline, or exclude a night")
    annotate.add_argument("action", choices=["accept", "exclude"])
    annotate.add_argument("run", help="the night: a run id")
    annotate.add_argument("--note", required=True, help="why (kept with the annotation)")
    annotate.add_argument("--series", help="one series id (default: every series of the run)")
    annotate.add_argument("--metric", help="one metric (default: every metric)")
    annotate.add_argument("--author")
    warehouse_arg(annotate)
    annotate.set_defaults(func=cmd_annotate)


def _since(text: str) -> datetime:
    now = datetime.now(timezone.utc)
    units = {"d": "days", "h": "hours", "w": "weeks"}
    if text[:-1].isdigit() and text[-1] in units:
        return now - timedelta(**{units[text[-1]]: int(text[:-1])})
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--since {text!r}: give a date (2026-11-01) or a span (7d, 24h, 2w)")
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)


def cmd_regressions(args: argparse.Namespace) -> int:
    from servebench.analysis.regression.history import findings, recompute
    from servebench.analysis.regression.summary import COLUMNS, bisect_commands, markdown, table_rows

    con = warehouse.connect(warehouse_path(args), read_only=not args.recompute)
    try:
        if args.recompute:
            analyzed = recompute(con, since=args.since, campaign=args.campaign)
            print(f"analyzed {analyzed} run(s) again", file=sys.stderr)
        rows = findings(con, since=args.since, campaign=args.campaign, latest_only=not args.all_nights)
    finally:
        con.close()
    rows = [r for r in rows if r["kind"] != "noisy"] if args.format != "json" else rows
    if args.format == "json":
        print(json.dumps(rows, default=str, indent=1))
    elif args.format == "markdown":
        print(markdown(rows, ", ".join(sorted({str(r["run_id"]) for r in rows})) or "(none)"))
    else:
        table = Table(*COLUMNS, title="regressions and improvements")
        for row in table_rows(rows):
            table.add_row(*row)
        Console(width=220).print(table if rows else "no regression or improvement found")
        for command in bisect_commands(rows):
            print(f"find the commit: {command}")
    if args.fail_on_regression and any(r["kind"] == "regression" for r in rows):
        return EXIT_REGRESSION
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    from servebench.analysis.regression.compare import compare_runs
    from servebench.analysis.regression.history import point_values

    con = warehouse.connect(warehouse_path(args), read_only=True)
    try:
        sides = []
        for run_id in (args.run_a, args.run_b):
            if not reads.run_exists(con, run_id):
                print(f"servebench: no run {run_id!r} in the warehouse", file=sys.stderr)
                return EXIT_FAILED
            sides.append(point_values(con, run_id))
    finally:
        con.close()
    side_a, side_b = sides  # one per run: run_a, run_b
    deltas = compare_runs(side_a, side_b, alpha=args.alpha, min_effect=args.min_effect)
    if not deltas:
        print(f"servebench: runs {args.run_a} and {args.run_b} share no measured load point", file=sys.stderr)
        return EXIT_FAILED
    if args.format == "json":
        print(json.dumps([d.model_dump() for d in deltas], indent=1))
        return EXIT_OK
    table = Table("cell", "metric", "A", "B", "change", "p", "verdict", title=f"{args.run_a} -> {args.run_b}",
                  caption="A, B: median of repeats ±CV [bootstrap 95% interval]; within noise: no significant "
                          "change and the intervals overlap")
    for d in deltas:
        style = {"worse": "red", "better": "green"}.get(d.verdict, "")
        table.add_row(d.point, d.metric, side_text(d.a, d.cv_a, d.interval_a), side_text(d.b, d.cv_b, d.interval_b),
                      f"{d.change:+.1%}", "" if d.p_value is None else f"{d.p_value:.2g}",
                      f"[{style}]{d.verdict}[/]" if style else d.verdict)
    Console(width=200).print(table)
    return EXIT_OK


def side_text(median: float, cv: float | None, interval: tuple[float, float] | None) -> str:
    """'81.2 ±3% [78.9, 83]' (4 significant digits); the median alone for one repeat."""
    if interval is None:
        return f"{median:.4g}"
    return f"{median:.4g}{'' if cv is None else f' ±{cv:.0%}'} [{interval[0]:.4g}, {interval[1]:.4g}]"


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
