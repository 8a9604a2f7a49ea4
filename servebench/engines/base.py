"""The engine interface: everything servebench knows about one serving engine.

An engine is a folder under `servebench/engines/` and one line in the registry
(`servebench/engines/__init__.py`), which refuses a class that breaks this contract. It has
two halves:

- `Engine`, an abstract base class: what the engine does. Its abstract methods say how it is
  built (`build_recipe`, `build_prerequisites`), which modes the nodes can hold (`mode_problem`)
  and which mode is the single-worker reference the correctness gate compares every other mode
  with, how a mode's server is launched across the nodes (`launch`: processes in start order,
  the ones to wait for, the API process whose health path says the server is ready), the
  campaign-wide services its modes share (a Ray cluster), the KV-cache capacity it logs at
  start-up and how a gate answer is read. Its class-level declarations say who it is: `kind`,
  the model of its `engine:` block (`spec_model`), its `executors` (the first is the default),
  the model formats it serves and how its default model is generated, and the settings a
  campaign may sweep (`knobs`).
- `EngineAPI`, frozen data held as `Engine.api`: what its server says and wants over HTTP and in
  its log (Prometheus names mapped to servebench's columns, the generated-token counter, request
  extras of the load generator and of the gate, where streamed chunks count tokens, its prefix
  cache's effect, more server state sampled with the metrics, the log line of a KV-cache failure,
  result layouts). Plain data, since the load generator may run on a node with no engine code.

Engines return commands and data; running them is the serving stage's business through
the provider, so an engine is tested without starting anything.

An engine may also measure a server it did not start (`starts_servers` False: a server a site runs, or a
user's own job script): then nothing is built, placed, measured for a roofline, started or stopped, and
`external_server` says where each mode's server answers; its `api` may be another engine's, the one whose
server answers there (`for_spec`).
"""

from __future__ import annotations

import abc
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, ClassVar, Generic, Protocol, TypeVar, cast

from servebench.builds.prerequisites import Prerequisite
from servebench.builds.recipe import BuildRecipe
from servebench.config.campaign import EngineSpecBase, ModelSpec, ModeSpec
from servebench.load.sse import OPENAI_TOKEN_COUNT
from servebench.models.artifact import GENERATED_HF, ModelGenerator
from servebench.providers.base import Node, Provider

# The columns a metric map may fill (telemetry's server samples and the warehouse's); requests_total:
# requests the server finished (vLLM's request_success; llama.cpp counts none), per DP engine or replica too.
METRIC_COLUMNS = ("kv_usage", "kv_tokens", "running", "waiting", "preemptions_total", "prompt_tokens_total",
                  "generation_tokens_total", "decode_steps_total", "requests_total")


GateChoice = tuple[list[int], list[float], list[list[int]]]  # token ids, their logprobs, top candidate ids


def legacy_logprobs(choice: dict, token_id: Callable[[str], int]) -> GateChoice:
    """An OpenAI legacy-completions choice's logprobs (`tokens`, `token_logprobs`, `top_logprobs`),
    whose token strings `token_id` turns into ids (vLLM: 'token_id:N')."""
    logprobs = choice["logprobs"]
    return ([token_id(t) for t in logprobs["tokens"]], [float(lp) for lp in logprobs["token_logprobs"]],
            [[token_id(t) for t in (candidates or {})] for candidates in logprobs["top_logprobs"]])


def stage_layers(layers: int, stages: int, stage: int) -> int:
    """Decoder layers of one pipeline stage when `layers` are split evenly over `stages` (the first stages
    take the remainder)."""
    return layers // stages + (1 if stage < layers % stages else 0)


@dataclass(frozen=True)
class RankShare:
    """What one process of a mode's server holds, and where: its decoder layers (each matrix split `tp`
    ways), the token embedding and output head if it has them, and its KV pool, given as bytes (a size
    the engine reserves whatever the model: vLLM's GiB per rank) or as tokens of its layers (a context
    length: llama.cpp's cells). The neutral code turns a share into bytes with the model's shape
    (servebench/planning/memory.py)."""

    node: str
    label: str                            # 'rank0', 'rpc1', 'server': what `servebench plan` prints
    layers: int
    tp: int = 1
    embedding: bool = False
    head: bool = False
    kv_pool_bytes: int | None = None
    kv_pool_tokens: int | None = None


@dataclass(frozen=True)
class MemoryRequest:
    """What an engine's rank layout is computed from: the mode, the engine block, the server nodes the
    mode runs on (their CPUs for servers) and the model's layers and declared context."""

    mode: ModeSpec
    spec: EngineSpecBase
    node_names: list[str]
    node_cpus: list[list[int]]
    layers: int
    max_position: int
    # what one server process holds of its own before any model, measured on a node for the build (by node name;
    # a node absent from it: the engine's own figure), and what the processes of a node share (its libraries), once
    runtime_bytes: Mapping[str, int] = field(default_factory=dict)
    shared_bytes: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ServerMemory:
    """How a mode's server spends memory: the processes and what each holds (`ranks`), the dtype its KV
    cache is kept in (None: the served dtype) and each process's working set beyond weights and KV
    (interpreter, libraries, compute buffers), measured for a tiny model: see each engine's value."""

    process_overhead_bytes: int
    ranks: Callable[[MemoryRequest], list[RankShare]]
    kv_cache_dtype: str | None = None
    kv_reserved_tokens: int = 0        # tokens of each KV pool the engine keeps for itself (vLLM: its null block)
    # the context a pool must hold whole, or the server refuses to start (None: the engine fits it to its pool)
    served_context: Callable[[MemoryRequest], int] | None = None
    # what the plan says of the per-process figures where no node of a mode was measured for the build
    # (`Engine.runtime_modules`): where they come from
    fallback_note: str | None = None


@dataclass(frozen=True, kw_only=True)
class EngineAPI:
    """What an engine's server reports and needs beyond OpenAI's API, as plain data: read by the
    telemetry scraper, the correctness gate and the load generator (which carries it as flags to a
    node with no engine code). The defaults are OpenAI's: a server that says nothing more."""

    metrics: Mapping[str, str]                  # Prometheus sample name -> one of METRIC_COLUMNS
    generation_tokens_metric: str | None = None  # counter checked against the client's token count
    request_extras: Mapping[str, Any] = field(default_factory=dict)  # merged into every load request body
    gate_extras: Mapping[str, Any] = field(default_factory=dict)     # merged into every gate request body
    # where a streamed chunk says the running count of generated tokens: dotted paths, the first present wins
    stream_token_counts: tuple[str, ...] = OPENAI_TOKEN_COUNT
    # [queries, hits] prompt-token counters of its prefix cache on /metrics (None: it has none to read)
    prefix_cache_metrics: tuple[str, str] | None = None
    # else per response: [cached, processed] prompt tokens, dotted paths into the streamed chunk that carries
    # the usage (None: its responses do not say); the cell's hit rate is then cached / (cached + processed)
    prompt_cache_tokens: tuple[str, str] | None = None
    state_sampler: str | None = None            # 'module:function' (url) -> {column: value}, sampled with the metrics
    kv_failure_pattern: str | None = None       # a log line's regex: a batch that found no room in the KV cache
    # `servebench load --export NAME=PATH` layouts of a load result
    result_formats: Mapping[str, Callable[[dict], dict]] = field(default_factory=dict)
    # what its processes hold in memory, known before anything starts (servebench/planning/memory.py;
    # None: not declared, the plan says unknown)
    memory: ServerMemory | None = None

    def __post_init__(self) -> None:
        # One object serves every instance of the engine class for the whole process: read-only views keep
        # a caller's change to one run's request body from reaching the next.
        for name in ("metrics", "request_extras", "gate_extras", "result_formats"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def problems(self) -> list[str]:
        """What the neutral code could not use: a column telemetry and the warehouse do not have, a
        failure pattern that is no regex."""
        found = [f"metric {name!r} fills {column!r}, not one of METRIC_COLUMNS {METRIC_COLUMNS}"
                 for name, column in self.metrics.items() if column not in METRIC_COLUMNS]
        if self.kv_failure_pattern is not None:
            try:
                re.compile(self.kv_failure_pattern)
            except re.error as error:
                found.append(f"kv_failure_pattern {self.kv_failure_pattern!r} is no regex: {error}")
        return found


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
        # a cast, not a check: only int and float knobs have a minimum, and the isinstance check above let
        # through only values of the knob's kind (mypy cannot narrow `object` by a tuple held in a variable)
        if self.minimum is not None and cast(float, value) < self.minimum:
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
    # variables set from files on the node at start (a secret: its value never on a command line or in `env`)
    env_files: dict[str, str] = field(default_factory=dict)
    # processes of one chain start in order; chains start side by side (a `replicas` mode: a chain a replica)
    chain: int = 0
    # a later stage starts once every process of the earlier ones has started and is ready (the API process
    # that connects to RPC workers started side by side)
    stage: int = 0


@dataclass(frozen=True)
class ServerLaunch:
    """A mode's server: its processes in start order and where its API answers."""

    processes: list[ProcessLaunch]
    port: int                                   # the API process's port, on its node's address
    health_path: str = "/health"
    notes: tuple[str, ...] = ()                 # what the plan says of the placement (NUMA nodes, a line each)

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
    ports: "PortSource"                         # the provider (`servebench plan`: placeholders)
    shared: "SharedServices | None" = None      # what start_shared returned, if anything
    planning: bool = False                      # for `servebench plan`: nothing runs, placeholders allowed
    # the run's token file, at this path on every node of the mode (servebench/load/run_secret.py): the API
    # key its server asks for; None: no key (a server started outside a run, `servebench plan` before one)
    secret_file: str | None = None


@dataclass(frozen=True)
class ExternalServer:
    """A server servebench measures but did not start and never stops: where it answers, the name it serves
    the model under, and the environment variable holding the key it asks for (its name, never the key)."""

    url: str                                    # its base URL, e.g. http://127.0.0.1:8000
    served_name: str                            # the `model` every request names
    health_path: str = "/health"                # answers 200 while it can serve
    api_key_env: str | None = None              # None: it asks for no key

    def describe(self) -> str:
        """One line for the plan and the run's progress: where, under which name, and the key's variable."""
        key = f"key from ${self.api_key_env}" if self.api_key_env else "no key"
        return f"{self.url} (model {self.served_name!r}, {key})"


class EngineSpecError(ValueError):
    """A field of an `engine:` block that cannot work with the engines servebench has (the field, and why)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class PortSource(Protocol):
    """Where a node's ports come from: the provider, which asks the node itself (so a port is free
    where it is bound, not on this host)."""

    def free_port(self, node: Node) -> int:
        """A TCP port free on that node's address."""

    def free_port_range(self, node: Node, size: int) -> int:
        """The first of `size` consecutive TCP ports free on that node's address."""


class SharedServices(Protocol):
    """Processes an engine runs for the whole campaign (a Ray cluster)."""

    notes: list[str]  # what starting them had to do beyond the plan (a retried node start), a line each

    def pids_by_node(self) -> dict[str, list[int]]:
        """The services' PIDs on each node, for the node samplers to follow."""

    def repair(self, provider: Provider) -> list[str]:
        """Start again what a fault took down (a lost Ray node) before the next mode starts; what was
        done, a line each (nothing: all was well). Raises if it cannot: that mode fails to start."""


# An engine's own `engine:` block model (its `spec_model`, what the campaign's block was read into) and
# the shared services its `start_shared` returns: an engine subclasses `Engine[ItsSpec, ItsServices]`.
SpecT = TypeVar("SpecT", bound=EngineSpecBase)
ServicesT = TypeVar("ServicesT", bound=SharedServices)


class Engine(abc.ABC, Generic[SpecT, ServicesT]):
    """What an engine does (its methods: every abstract one is its own to give) and who it is (its
    class-level declarations); what its server says over HTTP is `api`. Subclass it and register
    the class: the registry refuses one with a method left abstract or a declaration missing.
    Its methods take the engine's own spec (`SpecT`, an instance of its `spec_model`) and shared
    services (`ServicesT`); the neutral code holds a plain `Engine`."""

    kind: ClassVar[str]
    spec_model: ClassVar[type[EngineSpecBase]]
    executors: ClassVar[tuple[str, ...]]
    api: ClassVar[EngineAPI]
    model_formats: ClassVar[tuple[str, ...]] = ("hf",)  # 'hf' (a Hugging Face directory), 'gguf' (a file)
    # how `model: {generate: tiny-llama}` is made for it (servebench/models/artifact.py), in its first format
    default_model: ClassVar[ModelGenerator] = GENERATED_HF
    knobs: ClassVar[Mapping[str, Knob]] = MappingProxyType({})  # settings a mode may set or a campaign sweep;
                                                                 # `launch` applies them
    # the parallel fields its modes may set: TP and PP, plus data (`dp`) and expert (`ep`) parallelism
    # where the engine has them (docs/parallel-modes.md); the campaign check refuses the others by name
    parallel_fields: ClassVar[frozenset[str]] = frozenset({"tp", "pp"})
    # False: its modes measure servers it did not start (`external_server`): the run builds, places and starts
    # nothing for it, measures no roofline and predicts nothing; `build_recipe` and `launch` refuse
    starts_servers: ClassVar[bool] = True
    # the modules one of its server processes imports, where those are Python: the run measures what a process
    # holds with them imported on each node, for the build (servebench/planning/runtime_probe.py); () for none
    runtime_modules: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def build_recipe(self, spec: SpecT) -> BuildRecipe:
        """What goes into the engine's content-addressed build."""

    @abc.abstractmethod
    def build_prerequisites(self, spec: SpecT) -> list[Prerequisite]:
        """What the build host must have before this build starts (servebench/builds/prerequisites.py);
        checked by `servebench build [--dry-run]` and the run before building, every one named."""

    @abc.abstractmethod
    def mode_problem(self, mode: ModeSpec, server_cpus: list[list[int]], node_names: list[str]) -> str | None:
        """Why the nodes (their CPUs for servers, in order) cannot hold this mode, or None."""

    @abc.abstractmethod
    def reference_mode(self, name: str) -> ModeSpec:
        """The single-worker mode whose answers every other mode must match."""

    @abc.abstractmethod
    def is_reference(self, mode: ModeSpec) -> bool:
        """Whether a campaign's own mode can serve as the reference."""

    @abc.abstractmethod
    def launch(self, request: LaunchRequest) -> ServerLaunch:
        """The processes of one mode's server."""

    @abc.abstractmethod
    def start_shared(self, modes: list[ModeSpec], spec: SpecT, nodes: list[Node], build_dir: str,
                     provider: Provider, run_dir: Path) -> ServicesT | None:
        """Start what the campaign's modes share (None when they share nothing)."""

    @abc.abstractmethod
    def stop_shared(self, services: ServicesT, provider: Provider) -> list[str]:
        """Stop the shared services by PID; return the shared-memory segments removed."""

    @abc.abstractmethod
    def kv_capacity_tokens(self, log_text: str) -> int | None:
        """The KV-cache capacity in tokens the API process logged at start-up, if it did."""

    @abc.abstractmethod
    def gate_choice(self, choice: dict) -> GateChoice:
        """A gate answer's generated token ids, their logprobs and each position's top candidate ids."""

    def model_problem(self, model: ModelSpec) -> str | None:
        """Why it cannot serve this model (a generated one's shape its kernels do not take), or None.
        By default none: a local model is the user's, and the engine says at start-up what it refuses."""
        return None

    def for_spec(self, spec: SpecT, engine_of: Callable[[str], Engine]) -> Engine:
        """The engine as this `engine:` block has it (`engine_of`: an engine kind -> its Engine). By default
        itself; an engine measuring another engine's server answers with that server's `api` and gate
        reading. Raises EngineSpecError, naming the field, when the block names an engine there is none of."""
        return self

    def external_server(self, spec: SpecT, mode: ModeSpec) -> ExternalServer | None:
        """Where the server of `mode` (a campaign's mode, or the reference mode of `reference_mode`) answers,
        for an engine that starts no servers; None: there is none (by default: servebench starts them)."""
        return None

    def reference_problem(self, spec: SpecT) -> str | None:
        """Why this block's modes have no reference to be judged against, said as the gate's verdict
        (`unchecked`); None: `reference_mode` gives one (by default it always does)."""
        return None


# What a class must declare itself: without a default on `Engine`, and read by the neutral code.
REQUIRED_DECLARATIONS = ("kind", "spec_model", "executors", "api")


def contract_problems(engine_class: type) -> list[str]:
    """Why the neutral code could not use this engine class (nothing: it can). Checked at
    registration, so a broken engine fails at import instead of returning None mid-run."""
    if not (isinstance(engine_class, type) and issubclass(engine_class, Engine)):
        return [f"{engine_class!r} does not subclass servebench.engines.base.Engine"]
    found = [f"{name} is not declared" for name in REQUIRED_DECLARATIONS if getattr(engine_class, name, None) is None]
    if engine_class.__abstractmethods__:
        found.append(f"abstract methods not given: {', '.join(sorted(engine_class.__abstractmethods__))}")
    api = getattr(engine_class, "api", None)
    if isinstance(api, EngineAPI):
        found += api.problems()
    elif api is not None:
        found.append(f"api is a {type(api).__name__}, not an EngineAPI")
    return found
