"""`servebench compare RUN_A RUN_B`: per load point, the main metrics of two runs side by side, each
change judged against the runs' own noise (`servebench.analysis.regression.compare`)."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table

from servebench import warehouse
from servebench.cli.common import EXIT_FAILED, EXIT_OK, format_arg, warehouse_arg, warehouse_path
from servebench.warehouse import reads


def add_compare_parser(sub: argparse._SubParsersAction) -> None:
    compare = sub.add_parser("compare", help="per load point, the main metrics of two runs side by side, each "
                             "change judged against the runs' own noise")
    compare.add_argument("run_a", help="run A, the one compared against: a run id")
    compare.add_argument("run_b", help="run B: each change is B's against A's")
    format_arg(compare, ("table", "json"))
    compare.add_argument("--alpha", type=float, default=0.05, help="two-sided U-test level (default 0.05)")
    compare.add_argument("--min-effect", type=float, default=0.05,
                         help="smallest relative change that counts (default 0.05)")
    warehouse_arg(compare)
    compare.set_defaults(func=cmd_compare)


def cmd_compare(args: argparse.Namespace) -> int:
    from servebench.analysis.regression.compare import compare_runs, side_text
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

