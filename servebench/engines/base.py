"""The engine interface: everything servebench knows about one serving engine.

An engine is a folder under `servebench/engines/` and one line in the registry
(`servebench/engines/__init__.py`). It says:

- what a campaign's `engine:` block holds (`spec_model`) and which `executor` values a
  mode may name (`executors`, the first is the default);
- how it is built (`build_recipe`: what goes into its content-addressed build);
- which modes the nodes can hold (`mode_problem`), and which mode is the single-worker
  reference the correctness gate compares every other mode with;
- how a mode's server is launched across the nodes (`launch`): its processes in start
  order, each on its node, the ones to wait for before the next starts, and the API
  process whose health path says the server is ready;
- campaign-wide services its modes share (a Ray cluster), started once and stopped last;
- which engine settings a campaign may sweep (`knobs`: name -> `Knob`), applied by `launch`;
- what it reports: its Prometheus metric names mapped to servebench's columns, the
  counter of generated tokens, its prefix cache's effect (counters on /metrics, or counts in
  each response), the KV-cache capacity it logs at start-up, more server state sampled with the
  metrics (`state_sampler`), and the log line of a KV-cache failure;
- what its OpenAI API needs beyond the standard (request extras of the load generator and
  of the gate, how it returns token ids, and where its streamed chunks say the running count of
  generated tokens: plain data, since the load generator may run on a node with no engine code);
- the model formats it serves, how its default model is generated, and which generated models
  it cannot serve (`model_problem`); whether its spec has a git source for the commit axis is the
  spec's own declaration (`EngineSpecBase.git_source`).

An engine class subclasses `Engine`: the members with a default below are what most engines share
(OpenAI's usage field, a Hugging Face model, no prefix-cache counters or per-response cache
counts), so a minimal engine states only what is its own.

Engines return commands and data; running them is the serving stage's business through
the provider, so an engine is tested without starting anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Protocol

from servebench.builds.model import TINY_LLAMA_HF, ModelGenerator
from servebench.builds.prerequisites import Prerequisite
from servebench.builds.recipe import BuildRecipe
from servebench.spec.campaign import EngineSpecBase, ModelSpec, ModeSpec
from servebench.load.sse import OPENAI_TOKEN_COUNT
from servebench.providers.base import Node, Provider

# The columns a metric map may fill (telemetry's server samples and the warehouse's).
METRIC_COLUMNS = ("kv_usage", "kv_tokens", "running", "waiting", "preemptions_total", "prompt_tokens_total",
                  "generation_tokens_total", "decode_steps_total")


GateChoice = tuple[list[int], list[float], list[list[int]]]  # token ids, their logprobs, top candidate ids


def legacy_logprobs(choice: dict, token_id: Callable[[str], int]) -> GateChoice:
    """An OpenAI legacy-completions choice's logprobs (`tokens`, `token_logprobs`, `top_logprobs`),
    whose token strings `token_id` turns into ids (vLLM: 'token_id:N')."""
    logprobs = choice["logprobs"]
    return ([token_id(t) for t in logprobs["tokens"]], [float(lp) for lp in logprobs["token_logprobs"]],
            [[token_id(t) for t in (candidates or {})] for candidates in logprobs["top_logprobs"]])


@dataclass(frozen=True)
class Knob:
    """An engine setting a campaign may set per mode or sweep (`knobs:`): what it sets on the
    server, and the values it takes (checked when the campaign is read, not at launch)."""

    sets: str                                   # what it sets, for `servebench plan` and the docs
    kind: type                                  # int | float | bool | str
    minimum: float | None = None
    choices: tuple[str, ...] = ()
    numerics: bool = False                      # changes how the model computes, not only how fast: set alike on
                                                # every mode, the TP=1 reference gets it too (the gate then
                                                # compares parallel layouts, not settings)

    def problem(self, value: object) -> str | None:
        """Why `value` is not one this knob takes (None: the engine's default, always fine)."""
        if value is None:
            return None
        accepted = (int, float) if self.kind is float else (self.kind,)
        if isinstance(value, bool) != (self.kind is bool) or not isinstance(value, accepted):
            return f"takes a {self.kind.__name__}, got {value!r}"
        if self.minimum is not None and value < self.minimum:
            return f"must be at least {self.minimum:g}, got {value!r}"
        if self.choices and value not in self.choices:
            return f"one of {', '.join(self.choices)}; got {value!r}"
        return None


@dataclass(frozen=True)
class ProcessLaunch:
    """One process of a server, on one node."""

    node: str                                   # node name
    argv: list[str]
    env: dict[str, str]                         # set on top of the node's environment
    unset_env: list[str] = field(default_factory=list)
    api: bool = False                           # the process serving the OpenAI API (exactly one per server)
    ready_port: int | None = None               # wait until this port accepts before starting the next process
    label: str = ""                             # names its log: <mode>.<label>.log ("" for the API process)


@dataclass(frozen=True)
class ServerLaunch:
    """A mode's server: its processes in start order and where its API answers."""

    processes: list[ProcessLaunch]
    port: int                                   # the API process's port, on its node's address
    health_path: str = "/health"

    @property
    def api(self) -> ProcessLaunch:
        return next(p for p in self.processes if p.api)


@dataclass(frozen=True)
class LaunchRequest:
    """What an engine needs to launch one mode on the provisioned nodes."""

    python: str                                 # the engine build's interpreter
    build_dir: str                              # the engine build's directory
    spec: EngineSpecBase
    mode: ModeSpec
    model_dir: str
    served_name: str
    dtype: str
    nodes: list[Node]
    ports: "PortSource"
    shared: "SharedServices | None" = None      # what start_shared returned, if anything
    planning: bool = False                      # for `servebench plan`: nothing runs, placeholders allowed


class PortSource(Protocol):
    def __call__(self, node: Node) -> int:
        """A TCP port free on that node's address."""


class SharedServices(Protocol):
    """Processes an engine runs for the whole campaign (a Ray cluster)."""

    notes: list[str]  # what starting them had to do beyond the plan (a retried node start), a line each

    def pids_by_node(self) -> dict[str, list[int]]:
        """The services' PIDs on each node, for the node samplers to follow."""

    def repair(self, provider: Provider) -> list[str]:
        """Start again what a fault took down (a lost Ray node) before the next mode starts; what was
        done, a line each (nothing: all was well). Raises if it cannot: that mode fails to start."""


class Engine(Protocol):
    """What every engine says; subclass it (the defaults are inherited) and register the class."""

    kind: ClassVar[str]
    spec_model: ClassVar[type[EngineSpecBase]]
    executors: ClassVar[tuple[str, ...]]
    model_formats: ClassVar[tuple[str, ...]] = ("hf",)  # 'hf' (a Hugging Face directory), 'gguf' (a file)
    # how `model: {generate: tiny-llama}` is made for it (servebench/builds/model.py), in its first format
    default_model: ClassVar[ModelGenerator] = TINY_LLAMA_HF
    # where a streamed chunk says the running count of generated tokens: dotted paths, the first present wins
    stream_token_counts: ClassVar[tuple[str, ...]] = OPENAI_TOKEN_COUNT
    # [queries, hits] prompt-token counters of its prefix cache on /metrics (None: it has none to read)
    prefix_cache_metrics: ClassVar[tuple[str, str] | None] = None
    # else per response: [cached, processed] prompt tokens, dotted paths into the streamed chunk that carries
    # the usage (None: its responses do not say); the cell's hit rate is then cached / (cached + processed)
    prompt_cache_tokens: ClassVar[tuple[str, str] | None] = None
    metrics: ClassVar[dict[str, str]]           # Prometheus sample name -> one of METRIC_COLUMNS
    generation_tokens_metric: ClassVar[str | None]
    state_sampler: ClassVar[str | None]         # 'module:function' (url) -> {column: value}, sampled with the metrics
    kv_failure_pattern: ClassVar[str | None]    # a log line's regex: a batch that found no room in the KV cache
    request_extras: ClassVar[dict[str, Any]]    # merged into every load request body
    gate_extras: ClassVar[dict[str, Any]]       # merged into every correctness-gate request body
    result_formats: ClassVar[dict[str, Callable[[dict], dict]]]  # `servebench load --export NAME=PATH` layouts
    knobs: ClassVar[dict[str, Knob]] = {}       # settings a mode may set or a campaign sweep; `launch` applies them

    def build_recipe(self, spec: EngineSpecBase) -> BuildRecipe:
        """What goes into the engine's content-addressed build."""

    def build_prerequisites(self, spec: EngineSpecBase) -> list[Prerequisite]:
        """What the build host must have before this build starts (servebench/builds/prerequisites.py);
        checked by `servebench build [--dry-run]` and the run before building, every one named."""

    def mode_problem(self, mode: ModeSpec, server_cpus: list[list[int]], node_names: list[str]) -> str | None:
        """Why the nodes (their CPUs for servers, in order) cannot hold this mode, or None."""

    def reference_mode(self, name: str) -> ModeSpec:
        """The single-worker mode whose answers every other mode must match."""

    def is_reference(self, mode: ModeSpec) -> bool:
        """Whether a campaign's own mode can serve as the reference."""

    def launch(self, request: LaunchRequest) -> ServerLaunch:
        """The processes of one mode's server."""

    def start_shared(self, modes: list[ModeSpec], spec: EngineSpecBase, nodes: list[Node], build_dir: str,
                     provider: Provider, run_dir: Path) -> SharedServices | None:
        """Start what the campaign's modes share (None when they share nothing)."""

    def stop_shared(self, services: SharedServices, provider: Provider) -> list[str]:
        """Stop the shared services by PID; return the shared-memory segments removed."""

    def kv_capacity_tokens(self, log_text: str) -> int | None:
        """The KV-cache capacity in tokens the API process logged at start-up, if it did."""

    def gate_choice(self, choice: dict) -> GateChoice:
        """A gate answer's generated token ids, their logprobs and each position's top candidate ids."""

    def model_problem(self, model: ModelSpec) -> str | None:
        """Why it cannot serve this model (a generated one's shape its kernels do not take), or None."""
        return None

