"""`servebench load`: the load generator on its own, against any OpenAI-compatible server."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from pathlib import Path
from typing import Callable

from pydantic import ValidationError

from servebench.cli.common import ContentError
from servebench.engines import engine_kinds, get_engine
from servebench.load.config import FLAGS, LoadConfig
from servebench.load.progress_file import progress_file

# from --engine unless given
ENGINE_DEFAULTS = {"token_counter", "request_extras", "prefix_cache_counters", "prompt_cache_tokens",
                   "stream_token_counts"}

HELP = {
    "--base-url": "server URL, e.g. http://127.0.0.1:8000",
    "--model": "the served model name",
    "--endpoint": "completions (/v1/completions) or chat (/v1/chat/completions)",
    "--rate": "open loop: requests per second (with --clients: a concurrency cap)",
    "--arrival": "open-loop arrival process",
    "--burstiness": "gamma shape: 1 = Poisson, < 1 burstier, > 1 smoother",
    "--clients": "closed loop: concurrent clients, each sending when its last answer is complete",
    "--input-len": "random prompts of exactly N tokens",
    "--output-len": "output tokens per request (exactly, with an --engine that can enforce it)",
    "--vocab-size": "random token ids are drawn below this (when no --tokenizer)",
    "--tokenizer": "tokenizer.json or its directory: random text of exact length (needed for chat)",
    "--prompts": "JSONL: {\"prompt\": ...} or {\"messages\": [...]}, optional \"output_len\"",
    "--sharegpt": "ShareGPT JSON: first human turn as prompt",
    "--workload": "a workload block (docs/workloads.md), inline ('{kind: shared-prefix, groups: 2, prefix_len: 256}') "
                  "or a YAML/JSON file holding it: synthetic (length distributions), dataset, shared-prefix, trace, "
                  "sessions",
    "--max-context": "the model's context in tokens: longer prompt + answer is refused before anything is sent",
    "--requests": "number of requests", "--duration": "seconds of sending",
    "--warmup": "leading requests left out of the steady-state summary",
    "--warm-until-steady": "before measuring, warm up at the run's concurrency until TTFT and TPOT stop drifting: "
                           "'{}' for the defaults, or '{window: 4, tolerance: 0.1, max_s: 60, max_requests: 200}'",
    "--seed": "base seed", "--data-seed": "prompt seed (default: --seed)",
    "--schedule-seed": "arrival seed (default: derived from --seed)",
    "--timeout": "per-request timeout, seconds",
    "--slo-ttft-ms": "goodput SLO on TTFT", "--slo-tpot-ms": "goodput SLO on TPOT",
    "--slo-e2el-ms": "goodput SLO on end-to-end latency",
    "--max-schedule-lag-ms": "validity: schedule lag p99 above this marks the run invalid",
    "--min-achieved-fraction": "validity: achieved rate below this share of the scheduled rate is invalid",
    "--max-client-cpu": "validity: the generator busier than this share of one core is invalid",
    "--token-counter": "generated-token counter on the server's /metrics ('' to skip the check; default: "
                       "the --engine's)",
    "--request-extras": "JSON object merged into every request body (default: the --engine's extensions)",
    "--prefix-cache-counters": "QUERIES,HITS: the server's prefix-cache counters on /metrics, read before and "
                               "after (summary: prefix_cache_hit_rate); default: the --engine's; '' for none",
    "--prompt-cache-tokens": "CACHED,PROCESSED: where a response's usage chunk says its prompt tokens reused from "
                             "the prefix cache and processed, dotted paths (per request; without counters the "
                             "summary's prefix_cache_hit_rate); default: the --engine's; '' for none",
    "--metrics-urls": "URL[,URL]: the servers whose /metrics hold the token and prefix-cache counters, summed "
                      "(replicas behind a balancer); default: --base-url's",
    "--stream-token-counts": "PATH[,PATH]: where a streamed chunk says the running count of generated tokens, "
                             "dotted paths tried in order (default: the --engine's, else usage.completion_tokens)",
    "--cpus": "pin the generator to these CPUs (e.g. 1 or 2-3), apart from the server's",
    "--nice": "run the generator at this nice value (negative raises its priority; needs root)",
    "--idle-poll": "auto: while measuring, the generator's own CPUs (pinned with --cpus or taskset, apart from the "
                   "server's) poll when idle instead of halting (root); off: leave them halting",
}


def add_load_parser(sub) -> None:
    p = sub.add_parser("load", help="drive load against an OpenAI-compatible server",
                       description="Drive load against an OpenAI-compatible server and measure it.")
    add_load_flags(p)
    p.add_argument("--output-json", help="write {config, summary, requests} here")
    p.add_argument("--export", action="append", default=[], metavar="FORMAT=PATH", type=_export,
                   help="also write the run in an engine's own benchmark layout (FORMAT: "
                        f"{', '.join(sorted(result_formats())) or 'none registered'}); repeatable")
    p.add_argument("--requests-csv", help="also write the request rows as CSV (what the warehouse lands)")
    p.add_argument("--quiet", action="store_true", help="no progress bar, no summary table")
    p.add_argument("--progress-file", help="keep {sent, done, failed} here while the load runs (20 Hz, atomic): "
                   "what a campaign's `after_requests` fault waits on")
    p.set_defaults(func=cmd_load)


def add_load_flags(p: argparse.ArgumentParser, skip: tuple[str, ...] = ()) -> None:
    """The load generator's flags (LoadConfig's fields) and --engine, on a parser."""
    fields = LoadConfig.model_fields
    for flag, name in FLAGS.items():
        if flag in skip:
            continue
        field = fields[name]
        kwargs: dict = {"dest": name, "help": HELP.get(flag)}
        annotation = str(field.annotation)
        choices = getattr(field.annotation, "__args__", None) if "Literal" in annotation else None
        if name == "workload":
            kwargs["type"] = _workload_flag
        elif name == "warm_until_steady":
            kwargs["type"] = _steady_flag
        elif choices:
            kwargs["choices"] = list(choices)
        elif "dict" in annotation:
            kwargs["type"] = json.loads
        elif "float" in annotation:
            kwargs["type"] = float
        elif "int" in annotation:
            kwargs["type"] = int
        if field.is_required():
            kwargs["required"] = True
        elif field.default is not None and name not in ENGINE_DEFAULTS:
            kwargs["default"] = field.default
        p.add_argument(flag, **kwargs)
    p.add_argument("--engine", choices=engine_kinds(),
                   help="the server's engine: its request extensions (exact output length, usage in every chunk) "
                        "and its generated-token counter; without it, plain OpenAI requests and no counter check")


def config_from_args(args: argparse.Namespace) -> LoadConfig:
    """Flags -> LoadConfig; the --engine's extras, counters, stream token count and per-response cache counts
    unless given; an empty --token-counter means no counter check."""
    values = {name: getattr(args, name, None) for name in FLAGS.values()}
    values = {k: v for k, v in values.items() if v is not None}
    engine = get_engine(args.engine) if getattr(args, "engine", None) else None
    if engine is not None:
        values.setdefault("request_extras", dict(engine.api.request_extras))
        values.setdefault("token_counter", engine.api.generation_tokens_metric)
        values.setdefault("prefix_cache_counters", engine.api.prefix_cache_metrics)
        values.setdefault("prompt_cache_tokens", engine.api.prompt_cache_tokens)
        values.setdefault("stream_token_counts", list(engine.api.stream_token_counts))
    values["token_counter"] = values.get("token_counter") or None
    values["prefix_cache_counters"] = values.get("prefix_cache_counters") or None
    values["prompt_cache_tokens"] = values.get("prompt_cache_tokens") or None
    return LoadConfig(**values)


def result_formats() -> dict[str, Callable[[dict], dict]]:
    """Every registered engine's result layouts (name -> converter of a load result)."""
    return {name: convert for kind in engine_kinds() for name, convert in get_engine(kind).api.result_formats.items()}


def _workload_flag(text: str):
    """A workload that is not one is a content error: one line naming the field, not the usage."""
    from servebench.load.distributions import WorkloadError
    from servebench.load.workload_spec import parse_workload_option

    try:
        return parse_workload_option(text)
    except WorkloadError as exc:
        raise ContentError(str(exc)) from None


def _steady_flag(text: str):
    import yaml
    from pydantic import ValidationError

    from servebench.load.steady import SteadyWarmup

    try:
        return SteadyWarmup.model_validate(yaml.safe_load(text) or {})
    except (yaml.YAMLError, ValidationError, TypeError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None


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
