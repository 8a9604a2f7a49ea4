"""`servebench load`: the load generator on its own, against any OpenAI-compatible server."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Callable

from pydantic import ValidationError

from servebench.cli.load_options import add_load_options, config_from_args, load_flag
from servebench.cli.load_options import steady_flag as _steady_flag  # noqa: F401 (tests import it from here)
from servebench.engines import engine_kinds, get_engine
from servebench.load.config import FLAGS, LoadConfig
from servebench.load.progress_file import progress_file

LOAD_OPTIONS = "what is sent to the server, how long, and what makes the run valid"


def add_load_parser(sub) -> None:
    p = sub.add_parser("load", help="drive load against an OpenAI-compatible server",
                       description="Drive load against an OpenAI-compatible server and measure it.")
    p.add_argument("--rate", **load_flag("--rate", "open loop: requests per second (with --clients, at most that "
                                                   "many in flight at once)"))
    p.add_argument("--clients", **load_flag("--clients", "closed loop: concurrent clients, each sending when its "
                                                         "last answer is complete (with --rate: the cap on requests "
                                                         "in flight)"))
    p.add_argument("--output-json", help="write {config, summary, requests} here")
    p.add_argument("--export", action="append", default=[], metavar="FORMAT=PATH", type=_export,
                   help="also write the run in an engine's own benchmark layout (FORMAT: "
                        f"{', '.join(sorted(result_formats())) or 'none registered'}); repeatable")
    p.add_argument("--requests-csv", help="also write the request rows as CSV (what the warehouse lands)")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")
    p.add_argument("--progress-file", help="keep {sent, done, failed} here while the load runs (20 Hz, atomic): "
                   "what a campaign's `after_requests` fault waits on")
    add_load_options(p, LOAD_OPTIONS)
    p.set_defaults(func=cmd_load)


def result_formats() -> dict[str, Callable[[dict], dict]]:
    """Every registered engine's result layouts (name -> converter of a load result)."""
    return {name: convert for kind in engine_kinds() for name, convert in get_engine(kind).api.result_formats.items()}


def _export(text: str) -> tuple[str, str]:
    name, sep, path = text.partition("=")
    if not sep or not path or name not in result_formats():
        raise argparse.ArgumentTypeError(f"--export {text!r}: give FORMAT=PATH, FORMAT one of "
                                         f"{', '.join(sorted(result_formats()))}")
    return name, path


def cmd_load(args: argparse.Namespace) -> int:
    from servebench.load.runner import LiveCounts, run_load, write_result
    from servebench.load.workload import WorkloadError

    try:
        config = config_from_args(args)
    except ValidationError as exc:
        for err in exc.errors():
            field = next((f for f, n in FLAGS.items() if err["loc"] and n == err["loc"][0]), "arguments")
            print(f"servebench load: {field}: {err['msg'].removeprefix('Value error, ')}", file=sys.stderr)
        return 2
    live = LiveCounts()
    try:
        with progress_file(args.progress_file, live):
            if args.quiet:
                result = run_load(config, live)
            else:
                result = _with_progress(config, live, run_load)
    except WorkloadError as exc:
        print(f"servebench load: {exc}", file=sys.stderr)
        return 2
    formats = result_formats()
    for name, path in args.export:
        Path(path).write_text(json.dumps(formats[name](result), indent=1))
    if args.requests_csv:
        from servebench.load.records import write_requests_csv

        write_requests_csv(result["requests"], Path(args.requests_csv))
    if args.output_json:  # last, and atomically: its presence means every output is complete
        write_result(result, Path(args.output_json))
    if not args.quiet:
        print_summary(result["summary"])
    return 0


def _with_progress(config: LoadConfig, live, run_load) -> dict:
    """A progress bar fed from a separate thread at 4 Hz: nothing is added to the send path."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    stop = threading.Event()
    with Progress(TextColumn("requests"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[failed]} failed"),
                  TimeElapsedColumn(), transient=True, console=Console(stderr=True)) as progress:
        task = progress.add_task("load", total=config.requests, failed=0)

        def refresh() -> None:
            while not stop.wait(0.25):
                progress.update(task, completed=live.done, total=live.total, failed=live.failed)

        thread = threading.Thread(target=refresh, daemon=True)
        thread.start()
        try:
            return run_load(config, live)
        finally:
            stop.set()
            thread.join()


def print_summary(summary: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    def fmt(value) -> str:
        return "-" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)

    head = Table(title="load summary (steady window, after warmup)", show_header=False)
    for name in ("completed", "failed", "duration_s", "offered_rate", "scheduled_rate", "achieved_rate",
                 "request_throughput", "output_throughput", "goodput", "client_output_tokens",
                 "server_output_tokens", "prefix_cache_hit_rate"):
        if name in summary:
            head.add_row(name, fmt(summary.get(name)))
    dist = Table("metric (ms)", "mean", "p50", "p90", "p95", "p99", "p99.9", "count",
                 caption=f"percentiles: {summary['percentile_estimator']}")
    for name in ("ttft_ms", "ttft_from_scheduled_ms", "tpot_ms", "itl_ms", "e2el_ms", "schedule_lag_ms"):
        d = summary[name]
        dist.add_row(name, *(fmt(d[k]) for k in ("mean", "p50", "p90", "p95", "p99", "p999")), str(d["count"]))
    console = Console()
    console.print(head)
    console.print(dist)
    if summary.get("errors"):
        console.print(f"errors: {summary['errors']}")
    console.print("[green]valid[/]" if summary["valid"] else
                  "[red]INVALID[/]: " + "; ".join(summary["invalid_reasons"]))
