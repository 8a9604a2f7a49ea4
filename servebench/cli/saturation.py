"""`servebench saturation`: a run's KV-cache saturation per mode, the measured knee
against the theoretical point (`servebench.analysis.saturation`)."""

from __future__ import annotations

import argparse
import json
import sys

from servebench import warehouse
from servebench.analysis.saturation import MISS_THRESHOLD, run_saturation
from servebench.cli.common import (
    EXIT_FAILED,
    EXIT_OK,
    chosen_run_or_say_why,
    format_arg,
    run_choice_args,
    warehouse_arg,
    warehouse_path,
)


def add_saturation_parser(sub) -> None:
    p = sub.add_parser("saturation", help="KV-cache saturation of a run's closed-loop cells: the measured knee "
                       "(most clients without KV misses) against capacity / tokens per sequence (a sessions "
                       "workload: per session at its longest)")
    run_choice_args(p)
    format_arg(p, ("table", "json"))
    p.add_argument("--miss-threshold", type=float, default=MISS_THRESHOLD, metavar="P",
                   help=f"a client count whose cache-miss probability exceeds P is past the knee (default "
                        f"{MISS_THRESHOLD:g}; 0: the first miss at all, for an engine whose misses are rare per step)")
    warehouse_arg(p)
    p.set_defaults(func=cmd_saturation)


def cmd_saturation(args: argparse.Namespace) -> int:
    con = warehouse.connect(warehouse_path(args), read_only=True)
    try:
        run_id = chosen_run_or_say_why(con, args)
        if run_id is None:
            return EXIT_FAILED
        found = run_saturation(con, run_id, args.miss_threshold)
    finally:
        con.close()
    if not found:
        print(f"servebench: no completed closed-loop cells in run {run_id}", file=sys.stderr)
        return EXIT_FAILED
    if args.format == "json":
        print(json.dumps([{**s.model_dump(), "series": s.series, "knee_gap": s.knee_gap} for s in found], indent=1))
        return EXIT_OK
    print(f"run {run_id}: knee = the most clients with cache-miss probability <= {args.miss_threshold:g}")
    for s in found:
        unit = "sessions" if s.workload_kind == "sessions" else "clients"
        per = "a session's peak context" if s.workload_kind == "sessions" else "per sequence"
        theory = f"{s.theoretical_clients:.2f}" if s.theoretical_clients is not None else "?"
        knee = "not reached" if s.first_miss_clients is None else str(s.measured_knee)
        gap = f" ({s.knee_gap:+.2f} {unit})" if s.knee_gap is not None else ""
        past = (f"; throughput past it {s.mean_normalized_throughput_past_knee:.0%} of the peak on average, "
                f"{s.peak_normalized_throughput_past_knee:.0%} at best"
                if s.peak_normalized_throughput_past_knee is not None else "")
        per_client = s.tokens_per_sequence if s.tokens_per_sequence is not None else "?"
        shape = "" if s.shape_kv_capacity_tokens is None else f" (by the model's shape {s.shape_kv_capacity_tokens})"
        print(f"  {s.series}: KV capacity {s.kv_capacity_tokens} tokens{shape} / {per_client} {per} = "
              f"{theory} {unit}; measured knee {knee}{gap}{past}")
    return EXIT_OK
