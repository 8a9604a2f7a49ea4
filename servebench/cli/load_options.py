"""The load generator's flags as one argument group, "load": what `servebench load` and `servebench
capacity` both take (LoadConfig's fields, `servebench.load.config.FLAGS`, and --engine), so the two
commands cannot drift apart, and the LoadConfig the flags give. The load point (--rate, --clients)
is not in it: `load` takes it, `capacity` searches for it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from pydantic_core import PydanticUndefined

from servebench.cli.common import ContentError
from servebench.engines import engine_kinds, get_engine
from servebench.load.config import FLAGS, LoadConfig

POINT_FLAGS = ("--rate", "--clients")

# from --engine unless given
ENGINE_DEFAULTS = {"token_counter", "request_extras", "prefix_cache_counters", "prompt_cache_tokens",
                   "stream_token_counts"}

HELP = {
    "--base-url": "server URL, e.g. http://127.0.0.1:8000",
    "--model": "the served model name",
    "--endpoint": "completions (/v1/completions) or chat (/v1/chat/completions)",
    "--arrival": "open-loop arrival process",
    "--burstiness": "with --arrival gamma, its shape: 1 = Poisson, < 1 burstier, > 1 smoother",
    "--input-len": "random prompts of exactly this many tokens",
    "--output-len": "output tokens per request, exactly with an --engine that can enforce it",
    "--vocab-size": "random token ids are drawn below this, when no --tokenizer",
    "--tokenizer": "tokenizer.json or its directory: random text of exact length (chat with random prompts "
                   "needs it)",
    "--prompts": "JSONL: {\"prompt\": ...} or {\"messages\": [...]}, optional \"output_len\"",
    "--sharegpt": "ShareGPT JSON: first human turn as prompt",
    "--workload": "a workload block (docs/workloads.md), inline ('{kind: shared-prefix, groups: 2, prefix_len: 256}') "
                  "or a YAML/JSON file holding it: synthetic (length distributions), dataset, shared-prefix, trace, "
                  "sessions",
    "--max-context": "the model's context in tokens: longer prompt + answer is refused before anything is sent",
    "--requests": "number of requests (this or --duration; a trace or sessions workload has a length of its own)",
    "--duration": "seconds of sending (this or --requests)",
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
    "--health-url": "the server's health URL (e.g. http://127.0.0.1:8000/health), probed during the load to "
                    "catch a hung server (with --hang-after-s)",
    "--hang-after-s": "with --health-url: the server is hung once neither its health URL nor any request has "
                      "answered for this many seconds; the load then stops, and the requests in flight become "
                      "error rows of kind 'hung'",
    "--prefix-cache-counters": "QUERIES,HITS: the server's prefix-cache counters on /metrics, read before and "
                               "after (summary: prefix_cache_hit_rate); default: the --engine's; '' for none",
    "--prompt-cache-tokens": "CACHED,PROCESSED: where a response's usage chunk says its prompt tokens reused from "
                             "the prefix cache and processed, dotted paths (per request; without counters the "
                             "summary's prefix_cache_hit_rate); default: the --engine's; '' for none",
    "--metrics-urls": "URL[,URL]: the servers whose /metrics hold the token and prefix-cache counters, summed "
                      "(replicas behind a balancer); default: --base-url's",
    "--replica-urls": "'{\"r0\": URL, \"r1\": URL}': several servers of one model (a replicas mode's), each "
                      "request sent to one of them by --replica-policy and its record naming it, their /metrics "
                      "summed for the token check (--base-url is still required: one of them)",
    "--replica-policy": "with --replica-urls: least-connections (the fewest requests in flight first, ties in "
                        "turn) or round-robin",
    "--stream-token-counts": "PATH[,PATH]: where a streamed chunk says the running count of generated tokens, "
                             "dotted paths tried in order (default: the --engine's, else usage.completion_tokens)",
    "--cpus": "pin the generator to these CPUs (e.g. 1 or 2-3), apart from the server's",
    "--nice": "run the generator at this nice value (negative raises its priority; needs root)",
    "--api-key-file": "a file holding the server's API key, sent as 'Authorization: Bearer KEY' (the key never "
                      "on a command line); or --api-key-env",
    "--api-key-env": "the name of an environment variable holding the server's API key (e.g. MY_API_KEY); or "
                     "--api-key-file",
    "--idle-poll": "auto: while measuring, the generator's own CPUs (pinned with --cpus or taskset, apart from the "
                   "server's) poll when idle instead of halting (root); off: leave them halting",
}
ENGINE_HELP = ("the server's engine: its request extensions (exact output length, usage in every chunk), its "
               "generated-token counter, and where it reports prefix-cache use and streamed token counts; without "
               "it, plain OpenAI requests and no counter check")


def add_load_options(parser: argparse.ArgumentParser, description: str) -> None:
    """The "load" group on a command's parser: every LoadConfig flag but the load point, and --engine."""
    group = parser.add_argument_group("load", description)
    for flag in FLAGS:
        if flag not in POINT_FLAGS:
            group.add_argument(flag, **load_flag(flag, HELP[flag]))
    group.add_argument("--engine", choices=engine_kinds(), help=ENGINE_HELP)


def load_flag(flag: str, help: str) -> dict[str, Any]:
    """`add_argument`'s keywords for one LoadConfig flag: its field as dest, a type or choices from the
    field's annotation, required or its default as the field has it (left to the --engine for
    ENGINE_DEFAULTS), and the default said in the help unless the help says one."""
    name = FLAGS[flag]
    field = LoadConfig.model_fields[name]
    kwargs: dict[str, Any] = {"dest": name}
    annotation = str(field.annotation)
    choices = getattr(field.annotation, "__args__", None) if "Literal" in annotation else None
    if name == "workload":
        kwargs["type"] = workload_flag
    elif name == "warm_until_steady":
        kwargs["type"] = steady_flag
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
    elif field.default is not None and field.default is not PydanticUndefined and name not in ENGINE_DEFAULTS:
        kwargs["default"] = field.default
        if "default" not in help:
            help += " (default: %(default)s)"
    kwargs["help"] = help
    return kwargs


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


def workload_flag(text: str):
    """A workload that is not one is a content error: one line naming the field, not the usage."""
    from servebench.load.distributions import WorkloadError
    from servebench.load.workload_spec import parse_workload_option

    try:
        return parse_workload_option(text)
    except WorkloadError as exc:
        raise ContentError(str(exc)) from None


def steady_flag(text: str):
    import yaml
    from pydantic import ValidationError

    from servebench.load.steady import SteadyWarmup

    try:
        return SteadyWarmup.model_validate(yaml.safe_load(text) or {})
    except (yaml.YAMLError, ValidationError, TypeError) as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from None
