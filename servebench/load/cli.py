"""`servebench load`: the load generator on its own, against any OpenAI-compatible server."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pydantic import ValidationError


def add_load_parser(sub) -> None:
    p = sub.add_parser("load", help="drive load against an OpenAI-compatible server")
    p.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000")
    p.add_argument("--model", required=True, help="the served model name")
    p.add_argument("--endpoint", choices=["completions"], default="completions")
    p.add_argument("--rate", type=float, help="open loop: requests per second")
    p.add_argument("--arrival", choices=["poisson", "constant"], default="poisson")
    p.add_argument("--clients", type=int, help="closed loop: concurrent clients (with --rate: a cap)")
    p.add_argument("--input-len", type=int, default=64, help="prompt tokens (random token ids)")
    p.add_argument("--output-len", type=int, default=32, help="output tokens (enforced with ignore_eos)")
    p.add_argument("--vocab-size", type=int, default=1024, help="prompt ids are drawn below this")
    p.add_argument("--requests", type=int)
    p.add_argument("--duration", type=float, help="seconds of sending")
    p.add_argument("--warmup", type=int, default=0, help="leading requests left out of the summary")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=300.0, help="per-request timeout, seconds")
    p.add_argument("--token-counter", default="vllm:generation_tokens_total",
                   help="counter of generated tokens on the server's /metrics ('' to skip the check)")
    p.add_argument("--output-json", help="write config, summary and every request here")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")
    p.set_defaults(func=cmd_load)


def cmd_load(args: argparse.Namespace) -> int:
    from servebench.load.config import LoadConfig
    from servebench.load.runner import run_load, write_result

    try:
        config = LoadConfig(
            base_url=args.base_url, model=args.model, endpoint=args.endpoint, rate=args.rate, arrival=args.arrival,
            clients=args.clients, input_len=args.input_len, output_len=args.output_len, vocab_size=args.vocab_size,
            requests=args.requests, duration=args.duration, warmup=args.warmup, seed=args.seed,
            timeout_s=args.timeout, token_counter=args.token_counter or None,
        )
    except ValidationError as exc:
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "arguments"
            print(f"servebench load: {field}: {err['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        return 2
    if args.quiet:
        result = run_load(config)
    else:
        result = _run_with_progress(config, run_load)
    if args.output_json:
        write_result(result, Path(args.output_json))
    if not args.quiet:
        print_summary(result["summary"])
    return 0


def _run_with_progress(config, run_load) -> dict:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("requests"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  transient=True) as progress:
        task = progress.add_task("load", total=config.requests)
        return run_load(config, lambda done, total: progress.update(task, completed=done))


def print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    def fmt(value) -> str:
        return "-" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)

    head = Table(title="load summary (steady window)", show_header=False)
    for name in ("completed", "failed", "duration_s", "offered_rate", "achieved_rate", "request_throughput",
                 "output_throughput"):
        head.add_row(name, fmt(summary.get(name)))
    dist = Table("metric (ms)", "mean", "p50", "p90", "p95", "p99", "p999", "count",
                 caption=f"percentiles: {summary['percentile_estimator']}")
    for name in ("ttft_ms", "tpot_ms", "e2el_ms", "schedule_lag_ms"):
        d = summary[name]
        dist.add_row(name, *(fmt(d[k]) for k in ("mean", "p50", "p90", "p95", "p99", "p999")), str(d["count"]))
    console = Console()
    console.print(head)
    console.print(dist)
    if summary.get("errors"):
        console.print(f"errors: {summary['errors']}")
