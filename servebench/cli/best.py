"""`servebench best`: the best known configuration for a cluster and a model, with its capacity
under each SLO it was searched for, from the warehouse's history (`servebench.analysis.best`)."""

from __future__ import annotations

import argparse
import json

from servebench import warehouse
from servebench.analysis.best import best_per_cluster
from servebench.analysis.capacity_report import server_command
from servebench.cli.common import EXIT_FAILED, EXIT_OK, format_arg, warehouse_arg, warehouse_path
from servebench.warehouse.history import capacity_history


def add_best_parser(sub) -> None:
    p = sub.add_parser("best", help="the best known configuration (highest capacity under an SLO) per cluster "
                       "fingerprint and model, from every capacity search in the warehouse")
    p.add_argument("--fingerprint", help="only this hardware fingerprint (runs.hardware_fingerprint)")
    p.add_argument("--model", help="only models whose path contains this")
    p.add_argument("--campaign", help="only capacities measured by this campaign")
    format_arg(p, ("table", "json"))
    warehouse_arg(p)
    p.set_defaults(func=cmd_best)


def cmd_best(args: argparse.Namespace) -> int:
    con = warehouse.connect(warehouse_path(args), read_only=True)
    try:
        history = capacity_history(con)
    finally:
        con.close()
    history = [r for r in history if (not args.fingerprint or r["hardware_fingerprint"] == args.fingerprint)
               and (not args.model or args.model in (r["model_path"] or ""))
               and (not args.campaign or r["campaign"] == args.campaign)]
    best = best_per_cluster(history)
    if not best:
        print("servebench: no capacity search in the warehouse matches (run a campaign with `search:`)")
        return EXIT_FAILED
    if args.format == "json":
        print(json.dumps([{**r, "server_command": server_command(r)} for r in best], default=str, indent=1))
        return EXIT_OK
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
    return EXIT_OK
