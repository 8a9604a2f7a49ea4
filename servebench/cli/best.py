"""`servebench best`: the best known configuration for a cluster and a model, with its capacity
under each SLO it was searched for, from the warehouse's history (`servebench.analysis.best`).
A run without a capacity search answers from its cells: per load point the best mode under the
campaign's SLO, its margin over the next mode and the modes that missed (`best_per_point`)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import timezone

from servebench import warehouse
from servebench.analysis.best import PointBest, best_per_cluster, best_per_point
from servebench.analysis.capacity_report import server_command
from servebench.cli.common import EXIT_FAILED, EXIT_OK, format_arg, warehouse_arg, warehouse_path
from servebench.warehouse.history import capacity_history, finished_runs, point_cells, run_identity

# `servebench compare`'s verdict on the margin over the next mode, as said of a margin
MARGIN_WORDS = {"better": "significant", "within noise": "within noise", "same": "not significant",
                "untested": "one repeat: untested"}


def add_best_parser(sub) -> None:
    p = sub.add_parser("best", help="the best known configuration (highest capacity under an SLO) per cluster "
                       "fingerprint and model, from every capacity search in the warehouse; for a run without "
                       "one, the best mode per load point under the campaign's SLO")
    p.add_argument("--fingerprint", help="only this hardware fingerprint (runs.hardware_fingerprint)")
    p.add_argument("--model", help="only models whose path contains this")
    p.add_argument("--campaign", help="only capacities measured by this campaign (and its latest run)")
    p.add_argument("--run", help="answer for this run (default: each campaign's latest finished run)")
    format_arg(p, ("table", "json"))
    warehouse_arg(p)
    p.set_defaults(func=cmd_best)


def cmd_best(args: argparse.Namespace) -> int:
    from servebench.analysis.runs_index import run_slo

    con = warehouse.connect(warehouse_path(args), read_only=True)
    try:
        if args.run and run_identity(con, args.run) is None:
            print(f"servebench: no run {args.run!r} in the warehouse", file=sys.stderr)
            return EXIT_FAILED
        history = [r for r in capacity_history(con) if matches(args, r) and (not args.run or r["run_id"] == args.run)]
        runs = [run for run_id in ([args.run] if args.run else finished_runs(con, campaign=args.campaign,
                                                                              latest_only=True))
                if (run := run_identity(con, run_id)) is not None and matches(args, run)
                and not run["has_capacity"]]
        slos = [run_slo(con, run["run_id"]) for run in runs]
        per_point = [(run, slo, best_per_point(point_cells(con, run["run_id"]), slo)) for run, slo in zip(runs, slos)]
    finally:
        con.close()
    best = best_per_cluster(history)
    if not best and not per_point:
        print("servebench: no capacity search and no finished run in the warehouse matches (run a campaign; "
              "`search:` for a capacity)", file=sys.stderr)
        return EXIT_FAILED
    if args.format == "json":
        print(json.dumps({"capacity": [{**r, "server_command": server_command(r)} for r in best],
                          "per_point": [{"run_id": run["run_id"], "campaign": run["campaign"], "slo": slo,
                                         "points": [point.model_dump() for point in points]}
                                        for run, slo, points in per_point]}, default=str, indent=1))
        return EXIT_OK
    print_capacities(best)
    said_nothing = not best
    for run, slo, points in per_point:
        said_nothing &= not print_points(run, slo, points)
    return EXIT_FAILED if said_nothing else EXIT_OK


def matches(args: argparse.Namespace, row: dict) -> bool:
    return ((not args.fingerprint or row["hardware_fingerprint"] == args.fingerprint)
            and (not args.model or args.model in (row["model_path"] or ""))
            and (not args.campaign or row["campaign"] == args.campaign))


def print_capacities(best: list[dict]) -> None:
    for r in best:
        unit = "clients" if r["search_over"] == "clients" else "req/s"
        print(f"cluster {r['hardware_fingerprint'] or 'unknown'}  model {r['model_path']}  SLO {r['slo']}  "
              f"in{r.get('input_len')}/out{r.get('output_len')}")
        print(f"  best   {r['mode']}  knobs {r['knobs'] or '{}'}  capacity {r['capacity']:.4g} {unit}"
              + (f" (missed at {r['upper']:.4g})" if r["upper"] is not None else "")
              + (f", TPOT p50 {r['tpot_p50_ms']:.1f} ms" if r["tpot_p50_ms"] is not None else ""))
        print(f"  from   run {r['run_id']} ({r['campaign']}, {r['started_at']}); "
              f"best of {r['candidates']} capacities in {r['runs']} runs")
        print(f"  serve  {server_command(r)}")


def print_points(run: dict, slo: dict[str, float], points: list[PointBest]) -> bool:
    """A run's best mode per load point; False (said on stderr) when it has no valid cell."""
    started = f"{run['started_at'].astimezone(timezone.utc):%Y-%m-%d %H:%M} UTC"
    if not any(mode.valid for point in points for mode in point.modes):
        print(f"servebench: run {run['run_id']} ({run['campaign']}, {run['status']}) has no valid cell: no best "
              "mode to name", file=sys.stderr)
        return False
    under = "SLO " + ", ".join(f"{key} {limit:g}" for key, limit in slo.items()) if slo else \
        "no SLO in the campaign (every valid cell counts)"
    print(f"run {run['run_id']} ({run['campaign']}, {started}): best mode per load point, {under}; "
          "no capacity search")
    width = max(len(point.load) for point in points)
    for point in points:
        print(f"  {point.load.ljust(width)}  {point_text(point, 'missed the SLO' if slo else 'not counted')}")
    return True


def point_text(point: PointBest, missing: str) -> str:
    """'tp1  100 tok/s, +50% over tp2-ray (better); missed the SLO: tp2-ray (ttft_p99_ms 612 > 500)'."""
    if point.best is None:
        said = "no mode met the SLO"
    else:
        said = f"{point.best}  {point.throughput:.4g} tok/s"
        if point.slo_headroom is not None:
            said += f", SLO headroom {point.slo_headroom:.0%}"
        if point.runner_up is not None and point.margin is not None:
            said += f", {point.margin:+.1%} over {point.runner_up} ({MARGIN_WORDS.get(point.margin_verdict or '', '')})"
        elif not point.missed:
            said += ", the only mode measured here"
        else:
            said += ", the only mode that met it"
    missed = [f"{mode.mode} ({'; '.join(mode.missed) or 'no valid cell'})" for mode in point.missed]
    return said + (f"; {missing}: {', '.join(missed)}" if missed else "")
