"""`servebench capacity`: the highest open-loop rate (or, with --clients-search, the most closed-loop
clients) at which a running server meets an SLO, found with few probes (docs/capacity.md). Each
probe is one run of the load generator; latency is measured from each request's scheduled time, so
a request sent late still counts its wait. A probe the server made invalid counts as a miss; one
the generator alone made invalid (its schedule, its rate, its core) is measured again, and stops
the search if it stays so."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pydantic import ValidationError

from servebench.analysis.capacity import (
    MAX_PROBE_S,
    SearchSettings,
    judge,
    observed_from_summary,
    probe_floor,
    search_capacity,
)
from servebench.cli.load_options import add_load_options, config_from_args
from servebench.config.slo import SLO_METRICS, SLO_PERCENTILES, parse_slo

DESCRIPTION = " ".join(__doc__.split())
LOAD_OPTIONS = ("each probe's load, as `servebench load` takes it: what is sent, how long, and what makes a probe "
                "valid (the search sets the rate, or the clients)")


def add_capacity_parser(sub) -> None:
    p = sub.add_parser("capacity", help="find the highest rate (or most clients) a running server serves within "
                       "an SLO", description=DESCRIPTION)
    p.add_argument("--slo", action="append", required=True, metavar="METRIC_PCT_ms=LIMIT",
                   help=f"a limit, e.g. ttft_p99_ms=500: METRIC one of {', '.join(SLO_METRICS)}, PCT one of "
                        f"{', '.join(SLO_PERCENTILES)} (repeatable; every one must hold)")
    p.add_argument("--clients-search", action="store_true", help="search closed-loop clients instead of the rate")
    p.add_argument("--start", type=float, default=1.0, help="the first rate (or clients) probed: your guess; "
                   "with the defaults, 8 probes reach 5%% when the capacity is within about 0.25x-7x of it "
                   "(default: %(default)s)")
    p.add_argument("--precision", type=float, default=0.05,
                   help="stop when (hi - lo) / hi is at most this (default: %(default)s)")
    p.add_argument("--max-probes", type=int, default=8, help="stop after this many probes, converged or not; a "
                   "probe measured again counts (default: %(default)s)")
    p.add_argument("--max-value", type=float, default=1024.0,
                   help="never probe above this rate or client count (default: %(default)s)")
    p.add_argument("--max-probe-s", type=float, default=MAX_PROBE_S, help="never probe a rate so low that its "
                   "--requests would take longer than this (seconds): the search's lowest rate; with --duration, "
                   "no such floor (default: %(default)s)")
    p.add_argument("--output-json", help="write the probes and the result here")
    add_load_options(p, LOAD_OPTIONS)
    p.set_defaults(func=cmd_capacity)


def cmd_capacity(args: argparse.Namespace) -> int:
    try:
        slo = parse_slo({key: float(value) for key, _, value in (item.partition("=") for item in args.slo)})
        args.rate, args.clients = (None, 1) if args.clients_search else (args.start, None)
        base = config_from_args(args)
        floor = {} if args.clients_search else {"min_value": probe_floor(base.requests, base.duration,
                                                                        args.max_probe_s)}
        settings = SearchSettings(start=args.start, precision=args.precision, max_probes=args.max_probes,
                                  max_value=args.max_value, integer=args.clients_search, **floor)
    except (ValueError, ValidationError) as exc:
        print(f"servebench capacity: {exc}", file=sys.stderr)
        return 2
    result = find_capacity(base, slo, settings, say=lambda line: print(line, file=sys.stderr))
    unit = "clients" if args.clients_search else "req/s"
    if result.capacity is None:
        print(f"no {unit} probed met the SLO {slo} ({result.why})")
    else:
        print(f"capacity: {result.capacity:g} {unit} met the SLO {slo}; {result.upper if result.upper else '-'} did "
              f"not; {len(result.probes)} probes ({result.why})")
    if args.output_json:
        Path(args.output_json).write_text(json.dumps({"slo": slo, "settings": settings.model_dump(),
                                                      "result": result.model_dump()}, indent=1))
    return 0 if result.capacity is not None else 1


def find_capacity(base, slo: dict[str, float], settings: SearchSettings, say=print):
    """Probe the server with `base` (a LoadConfig) at each point the search asks for."""
    from servebench.load.runner import run_load

    def probe(point: float):
        update = {"clients": int(point), "rate": None} if settings.integer else {"rate": point, "clients": None}
        summary = run_load(base.model_copy(update=update))["summary"]
        verdict = judge(point, observed_from_summary(summary, slo), slo, valid=bool(summary.get("valid", True)),
                        reasons=summary.get("invalid_reasons", []),
                        client_lag_ms=(summary.get("schedule_lag_ms") or {}).get("p99"))
        outcome = "client-limited" if verdict.client_limited else "met" if verdict.met else "missed"
        say(f"probe {point:g}: {outcome} "
            + ", ".join(f"{k} {v:.1f}" if v is not None else f"{k} -" for k, v in verdict.observed.items())
            + ("" if verdict.valid else f" (invalid: {'; '.join(verdict.reasons)})"))
        return verdict
    return search_capacity(probe, settings)

