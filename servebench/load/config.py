"""What one load run is asked to do (the `servebench load` flags, as a model)."""

from __future__ import annotations

import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from servebench.load.credentials import KeySource, use_key
from servebench.load.sse import OPENAI_TOKEN_COUNT
from servebench.load.steady import SteadyWarmup
from servebench.load.workload_spec import SessionsWorkload, TraceWorkload, WorkloadSpec


class LoadConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base_url: str
    model: str
    # the server's API key: where it is, never the key (a config travels as flags and as JSON on a command line)
    api_key_file: str | None = Field(None, description=(
        "A file holding the server's API key (sent as `Authorization: Bearer <key>`): a run's token file, or "
        "the user's own; None: no key (or api_key_env)."))
    api_key_env: str | None = Field(None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description=(
        "The name of an environment variable holding the server's API key (the variable's name, never its "
        "value); None: no key (or api_key_file)."))
    endpoint: Literal["completions", "chat"] = "completions"
    # arrivals
    rate: float | None = Field(None, gt=0, description="Open loop: offered requests per second.")
    arrival: Literal["poisson", "constant", "gamma"] = "poisson"
    burstiness: float = Field(1.0, gt=0, description="Gamma shape: 1 is Poisson, < 1 burstier, > 1 smoother.")
    clients: int | None = Field(None, ge=1, description="Closed loop: concurrent clients (with rate: a cap).")
    # workload
    input_len: int = Field(64, ge=1)
    output_len: int = Field(32, ge=1)
    vocab_size: int = Field(1024, ge=16, description="Random token ids are drawn below this (no tokenizer).")
    tokenizer: str | None = Field(None, description="tokenizer.json (or its directory) for exact-length text.")
    prompts: str | None = Field(None, description="JSONL file of prompts.")
    sharegpt: str | None = Field(None, description="ShareGPT JSON file.")
    workload: WorkloadSpec | None = Field(None, description=(
        "A workload block (docs/workloads.md): length distributions, a dataset, shared prefixes or a trace; "
        "instead of input_len/output_len, prompts and sharegpt."))
    max_context: int | None = Field(None, ge=2, description="The model's context: a prompt and answer longer than "
                                    "this is refused before anything is sent.")
    # extent
    requests: int | None = Field(None, ge=1)
    duration: float | None = Field(None, gt=0)
    warmup: int = Field(0, ge=0, description="Leading requests left out of the steady-state summary.")
    warm_until_steady: SteadyWarmup | None = Field(None, description=(
        "Before measuring, warm-up requests at the cell's concurrency until TTFT and TPOT stop drifting "
        "(servebench/load/steady.py); None: no such phase."))
    seed: int = 0
    data_seed: int | None = Field(None, description="Prompts; defaults to seed.")
    schedule_seed: int | None = Field(None, description="Arrivals; defaults to one derived from seed.")
    timeout_s: float = Field(300.0, gt=0)
    # judgement
    slo_ttft_ms: float | None = Field(None, gt=0)
    slo_tpot_ms: float | None = Field(None, gt=0)
    slo_e2el_ms: float | None = Field(None, gt=0)
    max_schedule_lag_ms: float = Field(10.0, gt=0, description="Validity: schedule lag p99 above this is invalid.")
    min_achieved_fraction: float = Field(0.99, gt=0, le=1,
                                         description="Validity: achieved rate below this share of the scheduled "
                                                     "rate is invalid.")
    max_client_cpu: float = Field(0.8, gt=0, le=1, description="Validity: the generator busier than this share "
                                                                "of one core is invalid (it may be the bottleneck).")
    # where the generator runs
    cpus: str | None = Field(None, description="Pin the generator to these CPUs ('1', '2-3'), apart from the server.")
    nice: int | None = Field(None, ge=-20, le=19, description="Run at this nice value (negative needs root).")
    idle_poll: Literal["auto", "off"] = Field("auto", description=(
        "'auto': while measuring, the generator's own CPUs (pinned apart from the rest) poll when idle instead of "
        "halting, so a halted core's wake-up is not stamped into TTFT (needs root; the summary's client block says "
        "whether it held); 'off': the machine's idle behaviour."))
    # what the engine needs (a campaign passes its engine's; `servebench load --engine KIND` too)
    token_counter: str | None = Field(None, description="Server counter of generated tokens on /metrics, "
                                                        "checked against the client's count; None: no check.")
    prefix_cache_counters: list[str] | None = Field(None, min_length=2, max_length=2, description=(
        "The server's prefix-cache counters on /metrics, [queries, hits] (tokens looked up, tokens found), read "
        "before and after: the summary's prefix_cache_hit_rate; None: not read."))
    prompt_cache_tokens: list[str] | None = Field(None, min_length=2, max_length=2, description=(
        "Where a response's usage chunk says its prompt tokens [cached, processed] (dotted paths, the engine's "
        "`prompt_cache_tokens`): per request, and without prefix_cache_counters the summary's "
        "prefix_cache_hit_rate = cached / (cached + processed); None: not read."))
    metrics_urls: list[str] = Field(default_factory=list, description=(
        "The servers whose /metrics hold the token and prefix-cache counters, summed: a `replicas` mode's "
        "replicas behind its balancer (which has no /metrics); empty: those of replica_urls, else base_url's."))
    replica_urls: dict[str, str] = Field(default_factory=dict, description=(
        "A `replicas` mode balanced by the load generator: its replicas' URLs by name ({r0: URL, r1: URL}); each "
        "request goes to one of them (`replica_policy`) and its record names it. Empty: every request to "
        "base_url (one server, or a balancer in front of several)."))
    replica_policy: Literal["least-connections", "round-robin"] = Field("least-connections", description=(
        "With replica_urls: least-connections (the replica with the fewest requests in flight, ties in turn) or "
        "round-robin (in turn)."))
    health_url: str | None = Field(None, description="The server's health path, probed during the load to catch a "
                                   "hung server (with hang_after_s).")
    hang_after_s: float | None = Field(None, gt=0, description="The server is hung when its health path has not "
                                       "answered for this long: the load stops, requests in flight are error rows "
                                       "'hung', the summary says when.")
    request_extras: dict[str, Any] = Field(default_factory=dict,
                                           description="Merged into every request body (the engine's extensions: "
                                                       "exact output length, usage in every chunk).")
    stream_token_counts: list[str] = Field(
        default_factory=lambda: list(OPENAI_TOKEN_COUNT), min_length=1, description=(
            "Where a streamed chunk says the running count of generated tokens: dotted paths into the chunk, the "
            "first present wins (the engine's `stream_token_counts`; plain data, it travels as a flag)."))

    @field_validator("metrics_urls", mode="before")
    @classmethod
    def _urls_text(cls, value: Any) -> Any:
        """'URL,URL' (the flag's form) is the list; '' is none."""
        if isinstance(value, str):
            return [url.strip() for url in value.split(",") if url.strip()]
        return value

    @field_validator("replica_urls", mode="before")
    @classmethod
    def _replicas_text(cls, value: Any) -> Any:
        """'NAME=URL,NAME=URL' or a JSON object (the flag's forms) is the mapping; '' is none."""
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("{"):
                return json.loads(text)
            pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
            if any(len(pair) != 2 for pair in pairs):
                raise ValueError(f"replica URLs {value!r}: give NAME=URL[,NAME=URL]")
            return {name.strip(): url.strip() for name, url in pairs}
        return value

    @field_validator("prefix_cache_counters", "prompt_cache_tokens", mode="before")
    @classmethod
    def _counters_text(cls, value: Any) -> Any:
        """'QUERIES,HITS' or 'CACHED,PROCESSED' (the flags' form) is the pair; '' is none."""
        if isinstance(value, str):
            return [name.strip() for name in value.split(",")] if value.strip() else None
        return value

    @field_validator("stream_token_counts", mode="before")
    @classmethod
    def _paths_text(cls, value: Any) -> Any:
        """'A.B,C.D' (the flag's form) is the list of paths."""
        if isinstance(value, str):
            return [path.strip() for path in value.split(",") if path.strip()]
        return value

    @field_validator("workload", mode="before")
    @classmethod
    def _workload_text(cls, value: Any) -> Any:
        """The block as JSON text (what `to_argv` writes) is the block."""
        return json.loads(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _check(self) -> "LoadConfig":
        replay, sessions = isinstance(self.workload, TraceWorkload), isinstance(self.workload, SessionsWorkload)
        if self.rate is None and self.clients is None and not (replay or sessions):
            raise ValueError("give a rate (open loop), clients (closed loop) or both")
        if sessions and self.rate is not None:
            raise ValueError("a sessions workload is closed loop, each turn sent after the one before is answered: "
                             "give clients (conversations at once), not a rate")
        if (replay or sessions) and self.requests is not None and self.duration is not None:
            kind = "trace" if replay else "sessions"  # the workload's kind
            raise ValueError(f"give at most one of requests or duration (a {kind} workload has its own length)")
        if not (replay or sessions) and (self.requests is None) == (self.duration is None):
            raise ValueError("give exactly one of requests or duration")
        if sum(x is not None for x in (self.prompts, self.sharegpt, self.workload)) > 1:
            raise ValueError("give at most one of prompts, sharegpt and workload")
        if self.requests is not None and self.warmup >= self.requests:
            raise ValueError(f"warmup ({self.warmup}) must be fewer than requests ({self.requests})")
        if self.api_key_file is not None and self.api_key_env is not None:
            raise ValueError("give at most one of api_key_file and api_key_env")
        if self.key_source is not None:   # read when a request is first sent: a plan names a file not made yet
            use_key(self.server_urls, self.key_source)
        return self

    @property
    def key_source(self) -> KeySource | None:
        """Where the server's API key is (None: it has none)."""
        if self.api_key_file is None and self.api_key_env is None:
            return None
        return KeySource(file=self.api_key_file, env=self.api_key_env)

    @property
    def server_urls(self) -> list[str]:
        """Every server this config's requests go to: the base URL, the replicas', the metrics URLs and the
        health URL."""
        return [self.base_url, *self.replica_urls.values(), *self.metrics_urls,
                *([self.health_url] if self.health_url else [])]

    @property
    def replay(self) -> bool:
        """Sends on a trace's own schedule (open loop, with `clients` a cap)."""
        return isinstance(self.workload, TraceWorkload)

    @property
    def sessions(self) -> SessionsWorkload | None:
        """Multi-turn conversations, `clients` of them at once (default: all)."""
        return self.workload if isinstance(self.workload, SessionsWorkload) else None

    @property
    def effective_data_seed(self) -> int:
        return self.seed if self.data_seed is None else self.data_seed

    @property
    def effective_schedule_seed(self) -> int:
        # A separate stream: changing the rate must not change the prompts, and vice versa.
        return (self.seed * 7919 + 104729) % (2**31) if self.schedule_seed is None else self.schedule_seed

    @property
    def slos(self) -> dict[str, float]:
        return {name: value for name, value in (("ttft_ms", self.slo_ttft_ms), ("tpot_ms", self.slo_tpot_ms),
                                                ("e2el_ms", self.slo_e2el_ms)) if value is not None}


# flag name -> field name; the CLI and to_argv both use this table
FLAGS: dict[str, str] = {
    "--base-url": "base_url", "--model": "model", "--endpoint": "endpoint", "--rate": "rate",
    "--arrival": "arrival", "--burstiness": "burstiness", "--clients": "clients", "--input-len": "input_len",
    "--output-len": "output_len", "--vocab-size": "vocab_size", "--tokenizer": "tokenizer", "--prompts": "prompts",
    "--sharegpt": "sharegpt", "--workload": "workload", "--max-context": "max_context", "--requests": "requests",
    "--duration": "duration", "--warmup": "warmup",
    "--warm-until-steady": "warm_until_steady",
    "--seed": "seed", "--data-seed": "data_seed", "--schedule-seed": "schedule_seed", "--timeout": "timeout_s",
    "--slo-ttft-ms": "slo_ttft_ms", "--slo-tpot-ms": "slo_tpot_ms", "--slo-e2el-ms": "slo_e2el_ms",
    "--max-schedule-lag-ms": "max_schedule_lag_ms", "--min-achieved-fraction": "min_achieved_fraction",
    "--max-client-cpu": "max_client_cpu", "--token-counter": "token_counter", "--cpus": "cpus", "--nice": "nice",
    "--idle-poll": "idle_poll",
    "--request-extras": "request_extras", "--health-url": "health_url", "--hang-after-s": "hang_after_s",
    "--prefix-cache-counters": "prefix_cache_counters", "--prompt-cache-tokens": "prompt_cache_tokens",
    "--stream-token-counts": "stream_token_counts", "--metrics-urls": "metrics_urls",
    "--replica-urls": "replica_urls", "--replica-policy": "replica_policy",
    "--api-key-file": "api_key_file", "--api-key-env": "api_key_env",
}


def to_argv(config: LoadConfig) -> list[str]:
    """The `servebench load` flags that reproduce this config (the CLI parses them back)."""
    argv: list[str] = []
    for flag, name in FLAGS.items():
        value = getattr(config, name)
        if name == "token_counter":
            argv += [flag, value or ""]
        elif name == "request_extras":
            argv += [flag, json.dumps(value, sort_keys=True)] if value else []
        elif name in ("workload", "warm_until_steady"):
            argv += [flag, value.model_dump_json()] if value is not None else []
        elif name in ("prefix_cache_counters", "prompt_cache_tokens"):
            argv += [flag, ",".join(value) if value else ""]
        elif name == "stream_token_counts":
            argv += [flag, ",".join(value)]
        elif name == "metrics_urls":
            argv += [flag, ",".join(value)] if value else []
        elif name == "replica_urls":
            argv += [flag, json.dumps(value)] if value else []
        elif value is not None:
            argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return argv


HANG_MARGIN_S = 60.0


def deadline_s(config: LoadConfig) -> float:
    """How long a load run may take before it is called hung and stopped: its sending time (a
    duration; requests at the rate; or, closed loop, every client's share of requests each taking
    the full per-request timeout), one more request timeout, and a margin for start and writing."""
    if isinstance(config.workload, TraceWorkload):  # config.replay
        from servebench.load.traces import replay_offsets

        offsets = replay_offsets(config.workload.window(), config.workload.time_scale, config.rate)
        sending = offsets[min(len(offsets), config.requests or len(offsets)) - 1]
        if config.duration is not None:
            sending = min(sending, config.duration)
    elif config.sessions is not None:
        spec = config.sessions
        at_once = config.clients or spec.sessions
        sending = math.ceil(spec.sessions / at_once) * spec.turns * (config.timeout_s + spec.think_bound_s())
        if config.duration is not None:
            sending = min(sending, config.duration)
    elif config.duration is not None:
        sending = config.duration
    else:
        assert config.requests is not None  # `_check`: exactly one of requests or duration here
        sending = config.requests / config.rate if config.rate else 0.0
        if config.clients:
            sending = max(sending, math.ceil(config.requests / config.clients) * config.timeout_s)
    return sending + config.timeout_s + HANG_MARGIN_S
