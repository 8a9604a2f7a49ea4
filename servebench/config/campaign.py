"""The campaign file's schema: pydantic models, engine- and provider-neutral.

The `engine:` and `provider:` blocks are validated by the models their kind registers
(`servebench/engines/<kind>/spec.py`, `servebench/providers/<kind>/spec.py`), which
extend `EngineSpecBase` and `ProviderSpecBase`; `servebench.campaign.loading` picks them
and reports every problem with its file, line and field. Nothing here reads the host.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from typing import Annotated, Any, ClassVar, Literal, TypeVar, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
    field_validator,
    model_serializer,
    model_validator,
)

from servebench.config.detection import DetectionSettings
from servebench.cpus import parse_cpu_list
from servebench.load.steady import SteadyWarmup
from servebench.load.workload_spec import SessionsWorkload, TraceWorkload, WorkloadSpec
from servebench.models.shapes import PRESETS, ModelShape


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def parse_numa_layout(value: Any) -> Any:
    """A declared NUMA layout, '0-11|12-23' or a list of CPU lists, as each NUMA node's CPU ids (disjoint)."""
    parts = value.split("|") if isinstance(value, str) else value
    if parts is None:
        return None
    layout = [parse_cpu_list(part) if isinstance(part, str) else part for part in parts]
    seen: set[int] = set()
    for index, cpus in enumerate(layout):
        if not cpus:
            raise ValueError(f"NUMA node {index} has no CPUs")
        if seen & set(cpus):
            raise ValueError(f"CPUs {sorted(seen & set(cpus))} are in two NUMA nodes")
        seen |= set(cpus)
    return layout


class NodeSpec(StrictModel):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description=(
        "The node's name, as a mode's `nodes:`, `load.client.node` and faults refer to it and as results "
        "record it; letters, digits, '_', '.', '-'."))
    cpus: list[int] = Field(description="CPU ids this node may use, e.g. [0, 1] or '0-3,8'.")
    emulate: str | None = Field(None, description=(
        "A target CPU profile of another architecture (graviton2, graviton3, graviton4, grace, a64fx, ampere-altra, "
        "armv8-a) "
        "this node *is*: its processes run under qemu-user with that CPU model (docs/builds.md)."))
    memory_gib: float | None = Field(None, gt=0, description=(
        "GiB of memory the node's servers may use: a mode that needs more is refused at plan time (docs/memory.md). "
        "Unset: this host's MemAvailable for local nodes, unknown for other hosts."))
    numa: list[list[int]] | None = Field(None, description=(
        "The node's NUMA nodes, each a CPU list, '|' between them: '0-11|12-23|24-35|36-47' (an A64FX's four "
        "CMGs). vLLM's ranks are bound inside one NUMA node each where they can be, and the plan names a rank "
        "that must span NUMA nodes (docs/parallel-modes.md). Unset: the target profile's published layout "
        "(`emulate`), this host's for local nodes, else one group."))

    @model_serializer(mode="wrap")
    def _without_unset_fields(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A node without `memory_gib` or `numa` dumps as before those fields existed (its campaign's spec hash
        stays)."""
        data = handler(self)
        for name in ("memory_gib", "numa"):
            if data.get(name) is None:
                data.pop(name, None)
        return data

    @field_validator("numa", mode="before")
    @classmethod
    def _parse_numa(cls, value: Any) -> Any:
        return parse_numa_layout(value)

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


SETUP_LINE_PATTERN = r"^[^\n\r\x00]+$"  # one shell line each: a newline would hide a line from the plan's listing
ENV_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*$"


class ProviderSpecBase(StrictModel):
    """What every provider's block has; `servebench/providers/<kind>/spec.py` adds the rest."""

    kind: str
    nodes_field: ClassVar[str] = "nodes"        # the block's list of nodes, for problems' field paths
    nodes_on_this_host: ClassVar[bool] = True   # nodes share the orchestrator's CPUs with the load generator
    # fields left out of the normalized spec while at their defaults: a campaign without them keeps its spec hash
    omitted_at_default: ClassVar[tuple[str, ...]] = ("setup", "env", "placement", "hosts_at_once")
    placement_ways: ClassVar[tuple[str, ...]] = ("copies", "relay")  # a provider with a broadcast adds its own

    setup: list[Annotated[str, Field(pattern=SETUP_LINE_PATTERN)]] = Field(default_factory=list, description=(
        "Shell lines every node command of the run runs first, in order, in `sh` (servers, a load generator on a "
        "node, the node's python for inventory and checks): `[\". /etc/profile.d/lmod.sh\", \"module load "
        "python/3.11\"]`. A line that fails stops the command (exit 125) with the line named. On a remote node "
        "they are in the run's prelude, a file of the run's directory there (mode 0600); `servebench plan` "
        "prints them and a step may carry them on its command line: no secrets here (put those in `env`). "
        "Local nodes: through `sh -c` before each command."))
    env: dict[Annotated[str, Field(pattern=ENV_NAME_PATTERN)], str] = Field(default_factory=dict, description=(
        "Environment every node command of the run gets: `{OMP_WAIT_POLICY: passive}`. Remote nodes read it "
        "from the run's prelude after the `setup` lines, so a value is on no command line and `plan` prints "
        "only the names; local nodes get it in each process's environment. An engine's or a mode's own `env` "
        "wins for its processes."))
    placement: Literal["copies", "relay", "sbcast"] = Field("copies", description=(
        "How the engine build, the model and the node tools reach the nodes (docs/scale.md): `copies`, the "
        "orchestrator sends every node its copy (`hosts_at_once` at a time); `relay`, every node that holds the "
        "verified tree sends it on, ceil(log2(N + 1)) rounds, only the first through the orchestrator's link; "
        "`sbcast`, Slurm's own broadcast (the slurm provider only). Every way verifies each copy by its tree digest on "
        "its node; a path under the provider's shared file systems is used in place whatever the way."))
    hosts_at_once: int = Field(8, ge=1, le=256, description=(
        "At most this many nodes are worked on at once by the per-node stages: inventory and clock check, "
        "the presence checks and copies of placement, starting and stopping the node samplers, fetching "
        "their samples and release. Higher shortens those stages on many nodes; each node in flight holds an "
        "ssh session (or a Slurm step) and a thread of the orchestrator."))

    @field_validator("env", mode="before")
    @classmethod
    def _node_env_strings(cls, value: Any) -> Any:
        return stringify_env(value)

    @field_validator("placement")
    @classmethod
    def _placement_this_provider_has(cls, value: str) -> str:
        if value not in cls.placement_ways:
            raise ValueError(f"placement {value!r} needs a broadcast this provider does not have; "
                             f"it places by {' or '.join(cls.placement_ways)}")
        return value

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """The `omitted_at_default` fields left out while at their defaults (the spec hash stays)."""
        data = handler(self)
        if isinstance(data, dict):
            for name in self.omitted_at_default:
                field_info = type(self).model_fields.get(name)
                if field_info is not None and name in data and \
                        getattr(self, name) == field_info.get_default(call_default_factory=True):
                    data.pop(name)
        return data

    def node_specs(self) -> list[NodeSpec]:
        """The nodes as the campaign declares them (name and CPUs)."""
        return []


class GitSourceSpec(StrictModel):
    """An engine built from a git repository: one commit, or several as a sweep axis (every mode runs
    once per commit, each commit its own build; the first commit's answers are the reference the
    others are gated against). `servebench bisect` sets `commit` itself (docs/builds.md)."""

    git: str = Field(min_length=1, description="A local repository, its absolute path (used in place, never "
                     "changed), or a URL git can clone (mirrored into the cache, fetched once a run).")
    commit: str | None = Field(None, min_length=1, description="A branch, tag or hash; the build keys on "
                               "its full hash.")
    commits: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list, description=(
        "Commits as a sweep axis (mode names get `-<commit>`): instead of `commit`."))
    subdir: str = Field("", description="The CMake project inside the repository ('' for llama.cpp's own).")

    @field_validator("git")
    @classmethod
    def _absolute_or_url(cls, value: str) -> str:
        if "://" not in value and not value.startswith(("git@", "/", "~")):
            raise ValueError(f"{value!r}: give the repository's absolute path or a URL git can clone")
        return value

    @model_validator(mode="after")
    def _one_commit_or_an_axis(self) -> "GitSourceSpec":
        if (self.commit is None) == (not self.commits):
            raise ValueError("give 'commit' (one build) or 'commits' (a sweep axis), not both and not neither")
        if len(set(self.commits)) != len(self.commits):
            raise ValueError(f"commits repeat: {self.commits}")
        labels = [commit_label(c) for c in self.commits]
        if len(set(labels)) != len(labels):
            raise ValueError(f"commits {self.commits} give the same mode name suffixes {labels}: "
                             "write them longer")
        return self

    @property
    def axis(self) -> list[str]:
        return list(self.commits)

    def at(self, commit: str) -> "GitSourceSpec":
        """The same source at one commit (a point of the axis, or a bisect step)."""
        return self.model_copy(update={"commit": commit, "commits": []})


def commit_label(commit: str) -> str:
    """A commit as a mode name suffix: a hash's first 8 characters, a ref with '.' and '/' as '_'."""
    text = commit[:8] if re.fullmatch(r"[0-9a-f]{9,40}", commit) else commit
    return re.sub(r"[^A-Za-z0-9_]", "_", text)


class EngineSpecBase(StrictModel):
    """What every engine's block has; `servebench/engines/<kind>/spec.py` adds the rest."""

    kind: str
    env: dict[str, str] = Field(default_factory=dict, description="Environment of every server process.")
    ready_timeout_s: float = Field(600.0, gt=0, description="Seconds a server may take to answer its health path.")
    # the field holding a `GitSourceSpec` when the engine can be built from a git commit (None: it cannot):
    # what the commit axis sweeps and a bisect steps through
    git_source_field: ClassVar[str | None] = None

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
        return stringify_env(value)

    def describe(self) -> str:
        """One line for `servebench plan` and the run's build line."""
        return self.kind

    def build_target(self) -> str | None:
        """The target CPU profile its build is for (servebench/platform/targets.py), None for this host's: what
        the nodes' architectures are checked against."""
        return None

    def git_source(self) -> GitSourceSpec | None:
        """The git source this block builds from (its declared field, when set), else None: a commit
        axis and a bisect need one."""
        source = getattr(self, self.git_source_field) if self.git_source_field else None
        return source if isinstance(source, GitSourceSpec) else None

    def at_commit(self, commit: str) -> dict:
        """The `build:` fields that build this block at another commit of its git source."""
        source = self.git_source()
        if source is None or self.git_source_field is None:
            raise ValueError(f"engine {self.kind!r}: no git source to build at commit {commit!r}")
        return {self.git_source_field: source.at(commit).model_dump(exclude_defaults=True)}


ServedDtype = Literal["auto", "bfloat16", "float32"]
DTYPE_DESCRIPTION = ("The dtype every server (and the correctness reference) computes in; 'auto' is the "
                     "model's own. float32 keeps sharded kernels from flipping near-ties of a random model.")


ModelPresetName = Literal["tiny-llama", "llama-3.1-8b", "llama-2-7b", "llama-3.2-1b", "qwen2-1.5b", "qwen2.5-0.5b",
                          "deepseek-r1", "qwen3-30b-a3b"]
GgufQuantization = Literal["f32", "f16", "q8_0", "q4_0"]
# Hugging Face quantized formats vLLM's CPU kernels serve (servebench/models/hf_quantized.py, docs/quantization.md)
HfQuantization = Literal["w8a8", "w4a16", "gptq", "awq"]
Quantization = Literal[GgufQuantization, HfQuantization]
QUANTIZATIONS = {"gguf": get_args(GgufQuantization), "hf": get_args(HfQuantization)}  # by model format


def quantization_format(value: str) -> str:
    """The model format a `quantization` value belongs to: 'hf' or 'gguf'."""
    return "hf" if value in QUANTIZATIONS["hf"] else "gguf"
SHAPE_FIELDS = ("architecture", "layers", "hidden", "heads", "kv_heads", "intermediate", "vocab_size", "max_position",
                "head_dim", "tie_embeddings", "attention_bias", "rope_theta", "rope_scaling", "rms_norm_eps",
                "experts", "experts_per_token", "moe_intermediate", "shared_experts", "dense_layers", "expert_groups",
                "expert_groups_used", "routed_scaling_factor", "norm_topk_prob", "q_lora_rank", "kv_lora_rank",
                "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


class GeneratedModelSpec(StrictModel):
    """A random-weight model of a named shape (nothing downloaded: a model's cost on a CPU is its shape, its
    dtype and its tokens), written in the format each engine serves: a Hugging Face directory with a
    tokenizer whose vocabulary matches (vLLM), a GGUF file (llama.cpp). Every dimension the preset sets
    may be overridden (`{generate: llama-3.1-8b, layers: 4}`, `{generate: deepseek-r1, layers: 3, experts: 16}`);
    the shapes are servebench/models/shapes.py."""

    generate: ModelPresetName = Field(description="The shape by name: tiny-llama (under a million parameters, "
                                      "for tests), llama-3.1-8b, llama-2-7b, llama-3.2-1b, qwen2-1.5b "
                                      "(DeepSeek-R1-Distill-Qwen-1.5B's shape), qwen2.5-0.5b; mixture of experts: "
                                      "deepseek-r1 (DeepSeek-R1/V3: MLA, 3 dense layers, 256 routed experts and 1 "
                                      "shared), qwen3-30b-a3b (Qwen3-30B-A3B: 128 experts, 8 a token)")
    dtype: ServedDtype = Field("auto", description=DTYPE_DESCRIPTION)
    seed: int = Field(0, description="Seed of the random weights (the same seed, shape and dtype: the same file)")
    quantization: Quantization | None = Field(
        None, description="The type its matrices are stored in. GGUF (llama.cpp): f32, f16, q8_0, q4_0 (norms stay "
                          "f32; default f32 when dtype is float32, else f16). Hugging Face (vLLM, "
                          "docs/quantization.md): w8a8 (int8 weights and per-token activations), w4a16, gptq, awq "
                          "(int4, groups of 128): the decoder's linear layers, the rest in dtype; default none")
    architecture: Literal["llama", "qwen2", "qwen3_moe", "deepseek_v3"] = Field(description=(
        "The layer layout (qwen2: biases on q, k and v; qwen3_moe: q/k norms and experts in every layer; "
        "deepseek_v3: multi-head latent attention, leading dense layers, routed and shared experts)"))
    layers: int = Field(ge=1, description="Decoder layers")
    hidden: int = Field(ge=32, description="Hidden size")
    heads: int = Field(ge=1, description="Attention heads")
    kv_heads: int = Field(ge=1, description="Key/value heads (grouped-query attention)")
    intermediate: int = Field(ge=1, description="The MLP's intermediate size")
    vocab_size: int = Field(ge=300, le=262144, description="Vocabulary size (the tokenizer made for it matches)")
    max_position: int = Field(ge=64, description="Longest context the model declares")
    head_dim: int | None = Field(None, ge=8, description="Per-head size; null: hidden / heads")
    tie_embeddings: bool = Field(False, description="Output head shares the embedding matrix")
    attention_bias: bool = Field(False, description="Biases on the q, k and v projections")
    rope_theta: float = Field(10000.0, gt=0, description="RoPE base")
    rope_scaling: dict[str, Any] | None = Field(None, description="RoPE scaling as in config.json (llama3, yarn)")
    rms_norm_eps: float = Field(1e-5, gt=0, description="RMSNorm epsilon")
    experts: int = Field(0, ge=0, le=1024, description="Routed experts of each MoE layer (0: a dense model)")
    experts_per_token: int = Field(0, ge=0, description="Routed experts a token goes through (top-k), at most "
                                   "`experts`")
    moe_intermediate: int | None = Field(None, ge=1, description="Each expert's intermediate size; null: "
                                         "`intermediate`")
    shared_experts: int = Field(0, ge=0, description="Experts every token goes through (deepseek_v3), of "
                                "`moe_intermediate` each")
    dense_layers: int = Field(0, ge=0, description=(
        "Leading layers with a dense MLP of `intermediate` (DeepSeek's first_k_dense_replace); the rest have "
        "experts. When `layers` is cut below the preset's and this is not given, it is cut to layers - 1"))
    expert_groups: int = Field(1, ge=1, description="Routing groups (deepseek_v3's n_group): `experts` must "
                               "divide into them")
    expert_groups_used: int = Field(1, ge=1, description="Groups a token's experts may come from (topk_group)")
    routed_scaling_factor: float = Field(1.0, gt=0, description="Scale of the routed experts' output")
    norm_topk_prob: bool = Field(False, description="Renormalize the top-k routing weights to sum to 1")
    q_lora_rank: int | None = Field(None, ge=1, description="MLA: the query's low-rank size (null: a plain "
                                    "query projection)")
    kv_lora_rank: int | None = Field(None, ge=1, description=(
        "MLA: the compressed KV latent's size, what the KV cache keeps with the RoPE key (null: ordinary "
        "attention). vLLM's CPU MLA kernels take only 512 (with qk_rope_head_dim 64)"))
    qk_nope_head_dim: int | None = Field(None, ge=1, description="MLA: the per-head query/key size without RoPE")
    qk_rope_head_dim: int | None = Field(None, ge=2, description="MLA: the RoPE part of a query/key head, "
                                         "shared by all heads in the cache")
    v_head_dim: int | None = Field(None, ge=1, description="MLA: the per-head value size")

    @model_validator(mode="before")
    @classmethod
    def _from_preset(cls, data: Any) -> Any:
        """The preset's dimensions first, then what the campaign overrides. A preset's leading dense layers
        are cut to layers - 1 when `layers` is cut below them and `dense_layers` is not given, so that
        `{generate: deepseek-r1, layers: 3}` still has a layer with experts."""
        if isinstance(data, dict) and isinstance(data.get("generate"), str):
            shape = PRESETS.get(data["generate"])
            if shape is not None:
                merged = {**{name: getattr(shape, name) for name in SHAPE_FIELDS}, **data}
                layers = merged.get("layers")
                if "dense_layers" not in data and isinstance(layers, int) and 1 <= layers <= shape.dense_layers:
                    merged["dense_layers"] = layers - 1
                return merged
        return data

    @model_validator(mode="after")
    def _shape(self) -> "GeneratedModelSpec":
        mla = self.kv_lora_rank is not None
        if self.head_dim is None and not mla and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by heads ({self.heads})")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads ({self.heads}) must be divisible by kv_heads ({self.kv_heads})")
        _check_experts(self)
        _check_latent_attention(self)
        return self  # a shape an engine's kernels do not take is that engine's to say (Engine.model_problem)

    def shape(self) -> ModelShape:
        return ModelShape(**{name: getattr(self, name) for name in SHAPE_FIELDS})

    def served_dtype(self) -> str:
        """The dtype the Hugging Face weights are written in and 'auto' serves: bfloat16, as the real models
        ship (a campaign that wants float32 kernels says `dtype: float32`)."""
        return "bfloat16" if self.dtype == "auto" else self.dtype

    def gguf_type(self) -> GgufQuantization:
        """The GGUF file's matrix type: the campaign's `quantization`, else f32 for float32 and the tiny test
        model (its near-ties), f16 for a real shape."""
        if self.quantization in get_args(GgufQuantization):
            return self.quantization  # type: ignore[return-value]
        return "f32" if self.dtype == "float32" or self.generate == "tiny-llama" else "f16"


MOE_ARCHITECTURES = ("qwen3_moe", "deepseek_v3")
MLA_FIELDS = ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def _check_experts(spec: GeneratedModelSpec) -> None:
    """A MoE shape whose routing can be done: top-k within the experts and their groups; a dense
    architecture without experts."""
    moe = spec.architecture in MOE_ARCHITECTURES
    if not moe:
        if spec.experts:
            raise ValueError(f"experts: {spec.experts} on architecture {spec.architecture}, which has no experts "
                             f"(one of {', '.join(MOE_ARCHITECTURES)} has)")
        return
    if not spec.experts:
        raise ValueError(f"experts: architecture {spec.architecture} needs at least 1 routed expert")
    if not 1 <= spec.experts_per_token <= spec.experts:
        raise ValueError(f"experts_per_token ({spec.experts_per_token}) must be between 1 and experts "
                         f"({spec.experts})")
    if spec.experts % spec.expert_groups:
        raise ValueError(f"experts ({spec.experts}) must be divisible by expert_groups ({spec.expert_groups})")
    if spec.expert_groups_used > spec.expert_groups:
        raise ValueError(f"expert_groups_used ({spec.expert_groups_used}) must be at most expert_groups "
                         f"({spec.expert_groups})")
    if spec.expert_groups > 1:
        reachable = spec.experts // spec.expert_groups * spec.expert_groups_used
        if reachable < spec.experts_per_token:
            raise ValueError(f"experts_per_token ({spec.experts_per_token}) is more than the {reachable} experts in "
                             f"expert_groups_used ({spec.expert_groups_used}) groups of "
                             f"{spec.experts // spec.expert_groups}")
        if spec.expert_groups >= spec.experts:
            raise ValueError(f"expert_groups ({spec.expert_groups}) must be fewer than experts ({spec.experts})")
    if spec.dense_layers >= spec.layers:
        raise ValueError(f"dense_layers ({spec.dense_layers}) must be fewer than layers ({spec.layers}): "
                         "no layer would have experts")
    if spec.architecture == "qwen3_moe" and spec.dense_layers:
        raise ValueError(f"dense_layers ({spec.dense_layers}): qwen3_moe has experts in every layer "
                         "(a qwen3moe GGUF has no dense layer)")
    if spec.architecture == "qwen3_moe" and spec.shared_experts:
        raise ValueError(f"shared_experts ({spec.shared_experts}): qwen3_moe has none")


def _check_latent_attention(spec: GeneratedModelSpec) -> None:
    """deepseek_v3 has MLA with all four sizes; no other architecture has any."""
    given = [name for name in MLA_FIELDS if getattr(spec, name) is not None]
    if spec.architecture != "deepseek_v3":
        if given or spec.q_lora_rank is not None:
            raise ValueError(f"{(given or ['q_lora_rank'])[0]}: multi-head latent attention is deepseek_v3's, "
                             f"not {spec.architecture}'s")
        return
    if missing := [name for name in MLA_FIELDS if getattr(spec, name) is None]:
        raise ValueError(f"{missing[0]}: deepseek_v3 needs {', '.join(MLA_FIELDS)}")
    if spec.kv_heads != spec.heads:
        raise ValueError(f"kv_heads ({spec.kv_heads}) must equal heads ({spec.heads}) for deepseek_v3 "
                         "(MLA expands the latent to every head)")
    if spec.qk_rope_head_dim is not None and spec.qk_rope_head_dim % 2:
        raise ValueError(f"qk_rope_head_dim ({spec.qk_rope_head_dim}) must be even (RoPE rotates pairs)")


class LocalModelSpec(StrictModel):
    """A model directory on the nodes (HF layout with config.json)."""

    path: str = Field(min_length=1, description=(
        "A Hugging Face model directory (with config.json) or a .gguf file on this host, absolute or relative "
        "to the campaign file; every node gets a verified copy unless it already sees the same files."))
    dtype: ServedDtype = Field("auto", description=DTYPE_DESCRIPTION)


def _model_kind(value: Any) -> str | None:
    if isinstance(value, dict):
        return "generated" if "generate" in value else "local"
    return "generated" if isinstance(value, GeneratedModelSpec) else "local"


ModelSpec = Annotated[
    Annotated[GeneratedModelSpec, Tag("generated")] | Annotated[LocalModelSpec, Tag("local")],
    Discriminator(_model_kind),
]


# An engine knob's value (`max_num_seqs: 8`, `chunked_prefill: false`, `kv_cache_gib: 2`); null is the
# engine's own default (the knob is not passed). What each name means is the engine's business
# (`Engine.knobs`, e.g. servebench/engines/vllm/knobs.py); the campaign only carries them.
KnobValue = StrictBool | StrictInt | StrictFloat | StrictStr | None
KNOB_NAME = r"^[a-z][a-z0-9_]*$"


def _check_knob_names(names: Any) -> None:
    for name in names:
        if not re.match(KNOB_NAME, name):
            raise ValueError(f"knob name {name!r}: lower case letters, digits and '_' ({KNOB_NAME})")
        if name == "mode":
            raise ValueError("'mode' is not a knob name: the tuning space's mode axis has it")


class ModeSpec(StrictModel):
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_-]+$", description=(
        "The mode's name: the first part of its cells' keys (`tp2.c4.r0`) and its label in reports; letters, "
        "digits, '_', '-'."))
    engine: str | None = Field(None, description="The engine kind serving this mode: one of the campaign's "
                               "`engines:` (side by side with the campaign's `engine:`); the campaign's engine "
                               "when left out.")
    tp: int = Field(1, ge=1, description="Tensor-parallel size: workers that each hold a slice of every layer "
                    "(vLLM's --tensor-parallel-size); 1: none. llama.cpp has no tensor parallelism.")
    pp: int = Field(1, ge=1, description="Pipeline-parallel size: workers that each hold a share of the layers "
                    "(vLLM's stages, llama.cpp's RPC workers); 1: none. A mode runs dp x tp x pp workers.")
    dp: int = Field(1, ge=1, description=(
        "Data-parallel size (vLLM's --data-parallel-size): dp engines of tp x pp workers each, behind one API "
        "server that spreads the requests over them (executor mp: on one node; mp-multinode: engines spread "
        "over the nodes, the others --headless; ray: vLLM's Ray DP backend). On a dense model each engine is a "
        "whole replica; on an MoE model the engines' MoE layers gather each other's tokens. 1: none. llama.cpp "
        "has no data "
        "parallelism (docs/parallel-modes.md)."))
    ep: bool = Field(False, description=(
        "Expert parallel (vLLM's --enable-expert-parallel): the MoE layers' routed experts split over the "
        "dp x tp ranks instead of each expert's matrices TP ways; needs an MoE model, dp x tp >= 2 dividing its "
        "experts. vLLM 0.32's CPU backend serves it with servebench's engine-side fill-ins "
        "(docs/parallel-modes.md)."))
    replicas: int = Field(1, ge=1, description=(
        "Independent servers of this mode (its engine, executor and tp/pp/dp each), every one on its own nodes, "
        "the requests balanced over them by nginx on the load generator's host or by the load generator itself "
        "(`balanced_by`, `balancing`). The mode's "
        "nodes (all server nodes when `nodes:` is left out) are split in order, the same number to each "
        "replica (replicas: 2 on [h1, h2]: r0 on h1, r1 on h2). 1: one server, no balancer "
        "(docs/parallel-modes.md)."))
    balancer: Literal["least-connections", "round-robin"] | None = Field(None, description=(
        "How the balancer of a `replicas` mode picks a replica: least-connections (nginx's least_conn, or the "
        "load generator's own count: the replica with the fewest requests in flight; the default) or "
        "round-robin (in turn). Only with replicas > 1."))
    balanced_by: Literal["nginx", "client"] | None = Field(None, description=(
        "Who spreads a `replicas` mode's requests over its replicas: nginx, one endpoint in front of them where "
        "the load generator runs; or client, the load generator itself, each request to the replica with the "
        "fewest requests in flight (ties in turn; round-robin: in turn), its replica in its record. Null: the "
        "campaign's `balancing.by`. Only with replicas > 1 (docs/parallel-modes.md)."))
    executor: str = Field(min_length=1, description="How the engine runs the mode's workers: one of the "
                          "engine's executors; its first when left out.")
    oversubscribe: bool = Field(False, description="Allow more workers than a node's server CPUs (ranks then "
                                "share cores): a smoke test of a distributed mode on a small host, never a "
                                "number to compare.")
    args: list[str] = Field(default_factory=list, description="Extra arguments for the server.")
    env: dict[str, str] = Field(default_factory=dict, description="Environment of this mode's server processes, "
                                "added over the engine block's `env` (values become strings).")
    knobs: dict[str, KnobValue] = Field(default_factory=dict, description=(
        "Engine knobs of this mode (`max_num_seqs: 8`): names the engine knows (`servebench plan` lists "
        "them); recorded with every cell and part of its series. The campaign's `knobs:` axes add to these."))
    nodes: list[str] | None = Field(None, description=(
        "The server nodes this mode runs on, in order (its first is the API server's); all of them when "
        "left out."))
    build: dict[str, Any] = Field(default_factory=dict, description=(
        "Fields of the engine block this mode's build differs in (`{target: graviton3}`): a build of its "
        "own, keyed and cached like the engine's."))
    model: dict[str, str] = Field(default_factory=dict, description=(
        "Fields of the campaign's `model:` this mode's model differs in (`{quantization: q4_0}`): its model "
        "variant, prepared apart and gated against a reference of the same variant. Set by `model_axes`."))

    @field_validator("env", mode="before")
    @classmethod
    def _env_strings(cls, value: Any) -> Any:
        return stringify_env(value)

    @field_validator("knobs")
    @classmethod
    def _knob_names(cls, value: dict[str, KnobValue]) -> dict[str, KnobValue]:
        _check_knob_names(value)
        return value

    @field_validator("model")
    @classmethod
    def _variant_fields(cls, value: dict[str, str]) -> dict[str, str]:
        if unknown := sorted(set(value) - {"dtype", "quantization"}):
            raise ValueError(f"a model variant sets dtype or quantization, not {', '.join(unknown)}")
        return value

    @model_validator(mode="after")
    def _balancer_needs_replicas(self) -> "ModeSpec":
        if self.balancer is not None and self.replicas == 1:
            raise ValueError(f"mode {self.name}: balancer: {self.balancer} needs replicas > 1 (one server has "
                             "nothing to balance)")
        if self.balanced_by is not None and self.replicas == 1:
            raise ValueError(f"mode {self.name}: balanced_by: {self.balanced_by} needs replicas > 1 (one server "
                             "has nothing to balance)")
        return self

    @property
    def balancer_policy(self) -> str | None:
        """The balancer's policy of a `replicas` mode (least-connections unless given); None for one server."""
        return None if self.replicas == 1 else self.balancer or "least-connections"

    @property
    def world_size(self) -> int:
        """Every worker of one server of the mode: dp engines of tp x pp workers (a `replicas` mode runs
        `replicas` such servers)."""
        return self.dp * self.tp * self.pp

    @property
    def engine_size(self) -> int:
        """The workers of one data-parallel engine (tp x pp): vLLM's world size."""
        return self.tp * self.pp

    @property
    def ep_size(self) -> int:
        """The ranks the routed experts are split over: dp x tp with `ep`, else 1 (vLLM flattens TP across DP)."""
        return self.dp * self.tp if self.ep else 1


T = TypeVar("T")


def split_for_replicas(items: list[T], replicas: int) -> list[list[T]]:
    """A `replicas` mode's nodes split in order, the same number to each replica ([h1, h2, h3, h4] over 2:
    [[h1, h2], [h3, h4]]); the campaign's validation refuses a count that does not divide."""
    if replicas < 1 or len(items) < replicas or len(items) % replicas:
        raise ValueError(f"{len(items)} nodes do not split into {replicas} equal shares")
    size = len(items) // replicas
    return [items[index * size:(index + 1) * size] for index in range(replicas)]


class ModelAxes(StrictModel):
    """The model as a sweep axis: every configuration once per combination of these values (in file order,
    dtype before quantization), named by them (`tp1-fp32`, `local-q4_0`), each with its own model
    (generated and cached by spec) and its own correctness reference."""

    dtype: list[ServedDtype] = Field(default_factory=list, description=(
        "Values of `model.dtype` (auto, bfloat16, float32): mode names get fp32, bf16, auto."))
    quantization: list[Quantization] = Field(default_factory=list, description=(
        "Values of `model.quantization`: GGUF types (f32, f16, q8_0, q4_0) for an engine serving GGUF (llama.cpp), "
        "Hugging Face formats (w8a8, w4a16, gptq, awq) for one serving Hugging Face directories (vLLM); mode "
        "names get the value."))

    @model_validator(mode="after")
    def _values(self) -> "ModelAxes":
        if not self.dtype and not self.quantization:
            raise ValueError("give 'dtype' or 'quantization' values (model_axes: {quantization: [f32, q4_0]})")
        for name in ("dtype", "quantization"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise ValueError(f"model_axes.{name}: values repeat: {values}")
        return self

    def variants(self) -> list[dict[str, str]]:
        """Every combination as a mode's `model:` (dtype first), in file order."""
        axes = [[(name, value) for value in getattr(self, name)] for name in ("dtype", "quantization")
                if getattr(self, name)]
        return [dict(combination) for combination in itertools.product(*axes)]


DTYPE_LABELS = {"float32": "fp32", "bfloat16": "bf16", "auto": "auto"}


def variant_label(variant: dict[str, str]) -> str:
    """A model variant in a mode's name: {dtype: float32, quantization: q4_0} -> 'fp32-q4_0'."""
    parts = [DTYPE_LABELS[variant["dtype"]]] if "dtype" in variant else []
    return "-".join(parts + ([variant["quantization"]] if "quantization" in variant else []))


class ClientSpec(StrictModel):
    """Where the load generator runs (the orchestrator's host, or a node of the provider that then
    serves nothing) and at which priority."""

    node: str | None = Field(None, min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description=(
        "A node of the provider (by name) the load generator runs on, reaching the servers over the "
        "network; that node serves nothing. Unset: the orchestrator's host (with the ssh and slurm "
        "providers, itself a machine apart from the nodes)."))
    cpus: list[int] | Literal["auto", "shared"] = Field(
        "auto", description="CPUs of the generator's own, taken away from every server process: a list ('1', "
                            "'2-3'); 'auto' = the host's CPUs that no node uses (else 'shared'), or all of "
                            "the client node's; 'shared' = no CPU of its own (the generator competes with the "
                            "servers; its CPU use still counts). On a client node the ids are that node's.")
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


class RooflineSpec(StrictModel):
    """When a node's cached roofline (docs/roofline.md) is measured again."""

    max_age_days: float = Field(7.0, gt=0, description=(
        "A node's roofline measured longer ago than this is measured again (a kernel, firmware or BIOS "
        "setting changes a node's bandwidth without changing its hostname, CPU model or build)."))
    max_busy: float = Field(0.25, gt=0, le=1, description=(
        "A roofline measured while other processes kept more than this share of its cores busy (sampled just "
        "before the measurement) is used for this run but measured again on the next."))


class ValiditySpec(StrictModel):
    """When a cell's measurement is not to be trusted, and what that does to the run's exit code."""

    on_invalid: Literal["fail", "warn"] = Field(
        "fail", description="'fail': an invalid cell makes the run 'invalid' (exit 1); 'warn': reported only.")
    max_schedule_lag_ms: float = Field(10.0, gt=0, description="Open loop: schedule lag p99 above this is invalid.")
    min_achieved_fraction: float = Field(0.99, gt=0, le=1, description="Open loop: an achieved rate below this "
                                                                        "share of the scheduled rate is invalid.")
    max_client_cpu: float = Field(0.8, gt=0, le=1, description="The generator busier than this share of one core "
                                                                "is invalid (it may be the bottleneck).")
    max_foreign_cpu: float = Field(0.1, ge=0, le=1, description=(
        "A cell whose server nodes' cores gave more than this share of their time to processes that are neither "
        "the server's nor servebench's (from /proc, by the node sampler) is invalid, naming the node, cores and "
        "the busiest such process."))
    retries: int = Field(1, ge=0, description="A cell whose measurement is invalid is measured again right away, "
                                              "on the same server, up to this many times; every attempt lands "
                                              "(cell_attempts), the last one is the cell's.")
    errors_are_measurements: bool = Field(
        False, description="A cell whose every request failed while the server stayed up lands as completed with "
                           "zero throughput (and 'no request completed' among its invalid reasons), not as a failed "
                           "cell: for studies that drive a server past its limit (campaigns/kv-saturation.yaml).")


class LoadSpec(StrictModel):
    rates: list[Annotated[float, Field(gt=0)]] = Field(default_factory=list, description="Open-loop req/s.")
    clients: list[Annotated[int, Field(ge=1)]] = Field(default_factory=list, description="Closed-loop clients.")
    arrival: Literal["poisson", "constant"] = Field("poisson", description=(
        "Open loop: how send times are spaced at a rate: 'poisson' (random exponential gaps, from the cell's "
        "seed) or 'constant' (exactly 1/rate apart). Closed loop ignores it."))
    input_len: int = Field(64, ge=1, description="Prompt tokens of every request (random token ids) when there "
                           "is no `workload` block.")
    output_len: int = Field(32, ge=1, description="Tokens generated for every answer (the request's max_tokens, "
                            "end-of-sequence ignored) when there is no `workload` block.")
    requests: int | None = Field(None, ge=1, description="Requests sent per cell, warm-up ones included; give "
                                 "this or `duration`, not both.")
    duration: float | None = Field(None, gt=0, description="Seconds of sending per cell.")
    warmup: int = Field(0, ge=0, description="Leading requests left out of steady-state metrics.")
    warm_until_steady: SteadyWarmup | None = Field(None, description=(
        "Before each cell, warm-up requests at its concurrency until TTFT and TPOT stop drifting (two windows' "
        "medians within a tolerance), bounded in time; landed per cell (docs/load-generator.md). {} for the "
        "defaults."))
    repeats: int = Field(1, ge=1, description="How many times each load point is measured per mode (cells r0, "
                         "r1, ...), each with its own seed; 1: once.")
    seed: int = Field(0, description="Base of every cell's seed (prompts, lengths, send times): a load point and "
                      "repeat get the same requests in every mode; another seed gives other requests.")
    timeout_s: float = Field(300.0, gt=0, description="Per-request timeout.")
    hang_after_s: float | None = Field(30.0, gt=0, description=(
        "A server whose health path does not answer for this long during a cell is hung: the cell's load stops "
        "then (not after every request's timeout), requests in flight are error rows 'hung', the cell fails "
        "saying so, the server is restarted for the next. null: no probe during cells."))
    client: ClientSpec = Field(default_factory=ClientSpec, description="Where the load generator runs, on which "
                               "CPUs and at which priority.")
    workload: list[WorkloadSpec] = Field(default_factory=list, description=(
        "What the requests ask (docs/workloads.md): one block, or a list of them as a sweep axis (every "
        "mode's load points run once per workload; cell keys `tp1.<name>.c4.r0`). Kinds: synthetic (length "
        "distributions), dataset (local ShareGPT or JSONL file), shared-prefix, trace (Mooncake or Azure "
        "replay: at each of `rates` as its mean rate, or without rates at its own), sessions (multi-turn: at "
        "each of `clients` as conversations at once). Instead of input_len/output_len."))

    @field_validator("workload", mode="before")
    @classmethod
    def _one_or_more(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @model_validator(mode="after")
    def _check(self) -> "LoadSpec":
        own_points = bool(self.workload) and all(isinstance(w, (TraceWorkload, SessionsWorkload))
                                                  for w in self.workload)
        if not self.rates and not self.clients and not own_points:
            raise ValueError("give at least one of 'rates' (open loop) or 'clients' (closed loop)")
        if self.workload and {"input_len", "output_len"} & self.model_fields_set:
            raise ValueError("give the lengths in the workload block, not input_len/output_len beside it")
        names = [w.label for w in self.workload]
        if len(set(names)) != len(names):
            raise ValueError(f"workload names repeat ({', '.join(names)}): give each block a distinct 'name'")
        for workload in self.workload:
            if isinstance(workload, TraceWorkload) and not self.rates and workload.own_rate() is None:
                raise ValueError(f"workload {workload.label}: a trace replayed at its own rate needs two requests "
                                 "at different times (or give 'rates')")
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
        "close", description="'close' (the near-tie criterion of docs/correctness.md): greedy answers may part "
                             "from the TP=1 reference only at a near-tie (each side's token in the other's top "
                             "candidates), after which that prompt is not compared. 'equal': every token must be "
                             "equal (float32 campaigns). 'near-ties' is the old name of 'close'.")


# The bounds of a link setting, wherever one is made (a campaign's network axis, `servebench testbed
# link`) and wherever it is carried out (the testbed's delay line is started with MAX_LINK_DELAY_MS).
MAX_LINK_DELAY_MS = 1000.0
MIN_LINK_RATE_MBIT, MAX_LINK_RATE_MBIT = 0.01, 100_000.0


class LinkSetting(StrictModel):
    """One network condition: added one-way delay and a rate cap on host links (a campaign's
    network axis; the testbed's link knob sets and records the same)."""

    delay_ms: float = Field(0.0, ge=0, le=MAX_LINK_DELAY_MS, description="Added to every frame crossing each "
                            "chosen host's link, each way (a ping between two such hosts gains 4x).")
    rate_mbit: float | None = Field(None, ge=MIN_LINK_RATE_MBIT, le=MAX_LINK_RATE_MBIT, description=(
        "Each direction of each chosen link at most this (Ethernet frames); none: no cap."))
    hosts: list[str] | None = Field(None, description="The testbed hosts whose links get it (default: every "
                                    "node of the campaign).")
    name: str | None = Field(None, pattern=r"^[a-z][a-z0-9-]{0,23}$", description=(
        "The setting's label (cell keys, the cells' `link`, its series) instead of the one made from its values: "
        "lets a setting be given twice, e.g. the first one measured again after the others (`plain-again`)."))

    @property
    def label(self) -> str:
        """'plain', 'd5ms', 'r100mbit', 'd1ms-r100mbit' (or its `name`): part of the cell key."""
        if self.name is not None:
            return self.name
        parts = ([f"d{self.delay_ms:g}ms"] if self.delay_ms else []) + \
                ([f"r{self.rate_mbit:g}mbit"] if self.rate_mbit is not None else [])
        return "-".join(parts) or "plain"

    @property
    def plain(self) -> bool:
        """No delay and no cap: the link as the testbed built it."""
        return self.delay_ms == 0 and self.rate_mbit is None

    def describe(self) -> str:
        """'delay 5 ms each way, rate 10 Mbit/s each way', or 'plain'."""
        parts = ([f"delay {self.delay_ms:g} ms each way"] if self.delay_ms else []) + \
                ([f"rate {self.rate_mbit:g} Mbit/s each way"] if self.rate_mbit is not None else [])
        return ", ".join(parts) or "plain"


class NetworkSpec(StrictModel):
    """The network as a sweep axis: every mode's load points run under each link setting in turn
    (the server keeps running; the links change between cells). Acts on the project's testbed
    (docs/testbed.md), whose kernel-level delay and rate it sets and reads back."""

    testbed: str = Field(pattern=r"^[a-z][a-z0-9]{0,9}$", description="The testbed whose links are set.")
    links: list[LinkSetting] = Field(min_length=1, description=(
        "The link settings of the axis, measured in this order: every mode's load points run under each "
        "(`{}` is the plain network)."))


class FaultSpec(StrictModel):
    """A fault injected into one cell: to rehearse what a cluster's faults cost, and to
    test that they cost only the cells they touch. Landed in the `faults` table when done."""

    cell: str = Field(min_length=1, description="The cell's key, as `servebench plan` lists it.")
    at_s: float = Field(1.0, ge=0, le=86400, description="Seconds after the cell's load starts.")
    after_requests: int | None = Field(None, ge=1, description=(
        "Instead of at a time: once this many of the cell's requests have finished (answered or failed), "
        "read from the load generator's progress file; the generator runs on the orchestrator's host."))
    action: Literal["kill", "stop", "cancel-allocation", "cut-host", "fill-shm"] = Field(description=(
        "'kill': SIGKILL the matching processes (a crash, an OOM kill); 'stop': SIGSTOP them (a hang: "
        "they hold their sockets and answer nothing); 'cancel-allocation': cancel the run's allocation "
        "(a Slurm job: scancel, as an operator or a preemption would; `node` and `match` unused); "
        "'cut-host': cut the node off the network of the project's testbed (`testbed`) for `duration_s`, "
        "or until the cell ends; 'fill-shm': fill the node's /dev/shm with `size_mb` MiB (or what is free) "
        "until the cell ends."))
    testbed: str | None = Field(None, pattern=r"^[a-z][a-z0-9]{0,9}$", description=(
        "cut-host: the testbed whose switch the node's port is on (docs/testbed.md)."))
    duration_s: float = Field(5.0, gt=0, le=3600, description="cut-host: how long the node stays cut off.")
    size_mb: int = Field(1024, ge=1, description=(
        "fill-shm: MiB written into the node's /dev/shm (tmpfs: memory), fewer if it fills up first; removed "
        "when the cell ends."))
    node: str | None = Field(None, description="The node it acts on (default: the node of the mode's API server).")
    match: str = Field(".", description="kill/stop: a regular expression over the command lines of this run's "
                       "processes on the node (only processes carrying the run's mark, and none that names "
                       "another node, are candidates): a worker's process title, the API server's module, "
                       "a name all of a node's engine daemons share (docs/faults-and-resume.md).")

    @model_validator(mode="after")
    def _cut_needs_a_testbed(self) -> "FaultSpec":
        if self.action == "cut-host" and self.testbed is None:
            raise ValueError("a cut-host fault names the testbed whose network it cuts: testbed: NAME")
        return self

    @field_validator("match")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a regular expression: {exc}") from None
        return value


class SearchSpec(StrictModel):
    """Capacity under the campaign's SLO, searched per mode after its load points:
    bracket from `start`, then bisect (servebench/analysis/capacity.py); every probe is a cell.
    `tune`: the same search for every configuration (mode x knob values), then the best one is
    named and set against the default (the first mode with each knob axis's first value)."""

    kind: Literal["capacity", "tune"] = "capacity"
    over: Literal["rate", "clients"] = Field("rate", description="Open-loop rate (req/s), or closed-loop clients.")
    start: float = Field(1.0, gt=0, description="The first point probed: a guess. 8 probes reach 5 % when the "
                         "capacity is within about 0.25x-7x of it.")
    precision: float = Field(0.05, gt=0, lt=1, description="Stop when (hi - lo) / hi is at most this.")
    max_probes: int = Field(8, ge=2, le=64, description="At most this many points probed per mode or "
                            "configuration (each run `repeats` times); then the search stops, its capacity the "
                            "highest point that met the SLO.")
    max_value: float = Field(1024.0, gt=0, description="Never probe above this.")
    repeats: int = Field(1, ge=1, le=10, description="Each probe is run this many times (cells r0, r1, ...); "
                         "it meets the SLO only if every repeat does (a verdict that survives noise).")
    strategy: Literal["grid", "optuna"] = Field("grid", description=(
        "tune: 'grid' searches every configuration; 'optuna' only `trials` of them, the default first, "
        "each next one chosen by Optuna's TPE sampler from the capacities found so far (large spaces)."))
    trials: int | None = Field(None, ge=2, le=1000, description="optuna: configurations launched, the "
                               "default's included.")
    seed: int = Field(0, description="optuna: the sampler's seed (the same seed and capacities, the same choices).")

    @model_validator(mode="after")
    def _strategy(self) -> "SearchSpec":
        if self.strategy == "optuna" and (self.kind != "tune" or self.trials is None):
            raise ValueError("strategy 'optuna' is for kind 'tune' and needs 'trials' (configurations to launch)")
        if self.strategy == "grid" and self.trials is not None:
            raise ValueError("'trials' is for strategy 'optuna' (a grid launches every configuration)")
        return self


class BalancingSpec(StrictModel):
    """Who balances the campaign's `replicas` modes, and which nginx: a cluster user often has none at
    /usr/sbin/nginx and cannot install one, so the choice is said by `servebench plan` before anything starts."""

    by: Literal["nginx", "client"] | None = Field(None, description=(
        "nginx (one endpoint in front of each replicas mode's servers) or client (the load generator spreads "
        "the requests itself, least requests in flight first) for every replicas mode that does not set "
        "`balanced_by`. Null: nginx where one is found (the `nginx` field's binary, else `nginx` on PATH, else "
        "/usr/sbin/nginx), "
        "else client; `servebench plan` says which."))
    nginx: str | None = Field(None, min_length=1, description=(
        "The nginx binary, an absolute path where the balancer runs (a site module's, your own build); null: "
        "`nginx` on PATH there, else /usr/sbin/nginx."))

    @field_validator("nginx")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ValueError(f"nginx: {value!r} is not an absolute path (the balancer may start on another node)")
        return value


class Campaign(StrictModel):
    schema_version: Literal[1] = Field(1, description="The campaign file format's version; 1 is the only one "
                                       "(may be left out).")
    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$", description=(
        "The campaign's name: its runs are recorded under it and its measurements' history (regression "
        "detection) is kept by it, so a new name starts a new history; letters, digits, '_', '.', '-'."))
    description: str = Field("", description="Free text for people reading the file; nothing acts on it, but it "
                             "is part of the spec hash (a run resumes only under the same spec).")
    provider: ProviderSpecBase = Field(description="Where the nodes come from and how they are reached: `kind` "
                                       "local (CPU sets of this host), ssh or slurm (below).")
    engine: EngineSpecBase = Field(description="The inference server the modes run (unless a mode names one of "
                                   "`engines:`): `kind` vllm or llamacpp, with its version or build (below).")
    engines: list[EngineSpecBase] = Field(default_factory=list, description=(
        "More engines, side by side with `engine:` on the same nodes, model shape and load: a mode names "
        "one with `engine: KIND` (campaigns/side-by-side.yaml)."))
    model: ModelSpec = Field(description="The model served: `generate: PRESET` for random weights of a real "
                             "model's shape (nothing downloaded), or `path:` to a model of your own.")
    modes: list[ModeSpec] = Field(min_length=1, description="The serving configurations compared (parallelism, "
                                  "executor, nodes, knobs): each gets its own server and runs every load point.")
    load: LoadSpec = Field(description="The load every mode is measured under: load points (`rates` or "
                           "`clients`), requests or duration per cell, prompt and answer lengths, repeats.")
    telemetry: TelemetrySpec = Field(default_factory=TelemetrySpec, description=(
        "How often the nodes are sampled and the engine's /metrics scraped while cells run."))
    correctness: CorrectnessSpec = Field(default_factory=CorrectnessSpec, description=(
        "How closely each mode's greedy answers must match a single-worker (TP=1) reference before its cells "
        "are measured; a mode that fails gets failed cells."))
    validity: ValiditySpec = Field(default_factory=ValiditySpec, description=(
        "When a cell's measurement is not trusted (e.g. the load generator fell behind its schedule) and what "
        "that does to the run's exit code."))
    roofline: RooflineSpec = Field(default_factory=RooflineSpec, description=(
        "How old, and measured on how busy cores, a node's cached roofline may be before it is measured again."))
    detection: DetectionSettings = Field(default_factory=DetectionSettings, description=(
        "Regression detection after each run: how its cells are tested against earlier runs of the campaign."))
    network: NetworkSpec | None = Field(None, description="Network conditions as a sweep axis on the project's "
                                        "testbed (added delay, rate caps); null: the network as it is.")
    faults: list[FaultSpec] = Field(default_factory=list, description="Faults injected into named cells.")
    slo: dict[str, float] = Field(default_factory=dict, description="Limits on the load generator's percentiles, "
                                  "METRIC_PCT_ms: 500 (ttft, tpot, itl, e2el; p50, p90, p95, p99): a cell meets the "
                                  "SLO if every one holds and it is valid (cells.slo_met).")
    search: SearchSpec | None = Field(None, description="A capacity search (or a tuning) under `slo`, per mode "
                                      "after its load points; null: none.")
    knobs: dict[str, list[KnobValue]] = Field(default_factory=dict, description=(
        "Engine knobs as sweep axes: every mode runs once per combination of values (its own server; "
        "mode names get the values, `tp1-mns8`); null = the engine's default. The first value of each "
        "axis with the first mode is the campaign's default configuration (`search: tune`)."))
    model_axes: ModelAxes | None = Field(None, description=(
        "The model's dtype and GGUF quantization as sweep axes, beside `knobs:` (every configuration once per "
        "combination, mode names get the values: `local-q4_0`); each variant its own model and gate reference "
        "(docs/llamacpp.md). null: the one `model:`."))
    balancing: BalancingSpec = Field(default_factory=BalancingSpec, description=(
        "Who balances the `replicas` modes (nginx or the load generator) and where nginx is "
        "(docs/parallel-modes.md); each mode's `balanced_by` overrides `by`."))

    @field_validator("knobs")
    @classmethod
    def _knob_axes(cls, value: dict[str, list[KnobValue]]) -> dict[str, list[KnobValue]]:
        _check_knob_names(value)
        for name, values in value.items():
            if not values:
                raise ValueError(f"knob {name!r}: give at least one value")
            if len({json.dumps(v) for v in values}) != len(values):
                raise ValueError(f"knob {name!r}: values repeat: {values}")
        return value

    @field_validator("slo")
    @classmethod
    def _slo_keys(cls, value: dict[str, float]) -> dict[str, float]:
        from servebench.config.slo import parse_slo

        return parse_slo(value)

    def engine_specs(self) -> dict[str, EngineSpecBase]:
        """Every engine block by kind, the campaign's `engine:` first."""
        return {self.engine.kind: self.engine, **{spec.kind: spec for spec in self.engines}}

    def engine_kind(self, mode: ModeSpec) -> str:
        return mode.engine or self.engine.kind

    def commit_axis(self, mode: ModeSpec) -> list[str]:
        """The commits the mode is run at (its engine's `source: {commits: [...]}`), or [] (also for a
        mode whose `build:` is not a valid engine block: feasibility names its problem)."""
        try:
            source = self.engine_spec_for(mode).git_source()
        except ValueError:
            return []
        return source.axis if source is not None else []

    def engine_spec_for(self, mode: ModeSpec) -> EngineSpecBase:
        """The engine block this mode is built from: its engine's, with the mode's `build` fields."""
        spec = self.engine_specs()[self.engine_kind(mode)]
        if not mode.build:
            return spec
        return type(spec).model_validate({**spec.model_dump(exclude_unset=True), **mode.build})

    @model_validator(mode="after")
    def _search_needs_slo(self) -> "Campaign":
        if self.search is not None and not self.slo:
            raise ValueError("a capacity search needs the campaign's 'slo' (e.g. slo: {ttft_p99_ms: 500})")
        if self.search is not None and self.search.kind == "tune":
            configurations = len(self.modes) * (len(self.model_axes.variants()) if self.model_axes else 1)
            for values in self.knobs.values():
                configurations *= len(values)
            if configurations < 2:
                raise ValueError("'search: {kind: tune}' compares configurations: give two modes or a knob "
                                 "axis with two values (knobs: {max_num_seqs: [null, 8]})")
        return self

    @model_validator(mode="after")
    def _model_axes(self) -> "Campaign":
        for mode in self.modes:
            try:
                self.model_for(mode)
            except ValueError as exc:  # pydantic's ValidationError too
                raise ValueError(f"mode {mode.name}: model {mode.model}: {exc}") from None
        if self.model_axes is None:
            return self
        if self.model_axes.quantization and not isinstance(self.model, GeneratedModelSpec):
            raise ValueError("model_axes.quantization: a GGUF type of a generated model, or a Hugging Face format of "
                             "one (`generate:`); a model of your own is served as it is")
        for name in ("dtype", "quantization"):
            if getattr(self.model_axes, name) and name in self.model.model_fields_set:
                raise ValueError(f"model.{name} is set and swept by model_axes.{name}: give it in one place")
        return self

    def model_for(self, mode: ModeSpec) -> ModelSpec:
        """The model `mode` serves: the campaign's, with the mode's variant (`model:`) fields."""
        return self.model_variant(mode.model)

    def model_variant(self, variant: dict[str, str]) -> ModelSpec:
        """The campaign's model with these fields ({quantization: q4_0}); itself for {}."""
        if not variant:
            return self.model
        return type(self.model).model_validate({**self.model.model_dump(), **variant})

    @model_validator(mode="after")
    def _workloads_fit_the_context(self) -> "Campaign":
        """A workload whose prompt and answer can exceed a generated model's context is refused here, not
        by every cell's server."""
        context = self.model.max_position if isinstance(self.model, GeneratedModelSpec) else None
        for index, workload in enumerate(self.load.workload):
            longest_in, longest_out = workload.upper_input(), workload.upper_output()
            if context and longest_in and (longest_out or 0) + longest_in > context:
                raise ValueError(f"load.workload[{index}] ({workload.label}): prompts up to {longest_in} and answers "
                                 f"up to {longest_out or 0} tokens exceed the model's context (max_position "
                                 f"{context})")
        return self

    @field_validator("model", mode="before")
    @classmethod
    def _model_kind(cls, value: Any) -> Any:
        if isinstance(value, dict) and "generate" in value and "path" in value:
            raise ValueError("give either 'generate' or 'path', not both")
        if isinstance(value, dict) and "generate" not in value and "path" not in value:
            raise ValueError("give 'generate: tiny-llama' or 'path: /a/model/dir'")
        return value

    def normalized(self) -> dict[str, Any]:
        """The spec with every default filled in, as plain JSON data (a campaign without a network
        axis keeps the layout, and so the hash, it had before the axis existed)."""
        data = self.model_dump(mode="json")
        if data.get("network") is None:
            data.pop("network", None)
        if data["load"]["client"].get("node") is None:  # likewise a campaign without a client node
            data["load"]["client"].pop("node", None)
        if data["load"].get("hang_after_s") == 30.0:  # and one with the default hang limit
            data["load"].pop("hang_after_s")
        if not data["load"].get("workload"):  # and one without a workload block
            data["load"].pop("workload", None)
        if data["load"].get("warm_until_steady") is None:  # or without a warm-up until steady
            data["load"].pop("warm_until_steady", None)
        for optional in ("faults", "slo", "search", "knobs", "model_axes"):  # or without faults, an SLO, a search, axes
            if not data.get(optional):
                data.pop(optional, None)
        if not data.get("engines"):  # a campaign of one engine, as before there could be more
            data.pop("engines", None)
        if not data["validity"].get("errors_are_measurements"):
            data["validity"].pop("errors_are_measurements", None)
        if data["validity"].get("max_foreign_cpu") == 0.1:  # and one with the default foreign CPU limit
            data["validity"].pop("max_foreign_cpu")
        if data.get("roofline") == RooflineSpec().model_dump(mode="json"):  # and the default roofline ages
            data.pop("roofline")
        if data.get("balancing") == BalancingSpec().model_dump(mode="json"):  # and the default balancing
            data.pop("balancing")
        for mode in data["modes"]:
            if not mode.get("knobs"):
                mode.pop("knobs", None)
            if mode.get("engine") is None:
                mode.pop("engine", None)
            if not mode.get("model"):
                mode.pop("model", None)
            if mode.get("dp") == 1:  # a mode without data or expert parallelism, as before they existed
                mode.pop("dp", None)
            if not mode.get("ep"):
                mode.pop("ep", None)
            if mode.get("replicas") == 1:  # one server, as before replicas existed
                mode.pop("replicas", None)
            if mode.get("balancer") is None:
                mode.pop("balancer", None)
            if mode.get("balanced_by") is None:  # and without a balancing choice
                mode.pop("balanced_by", None)
        for link in (data.get("network") or {}).get("links", []):
            if link.get("name") is None:  # a link setting without a name, as before it could have one
                link.pop("name", None)
        search = data.get("search") or {}
        for name, default in (("repeats", 1), ("strategy", "grid"), ("trials", None), ("seed", 0)):
            if name in search and search[name] == default:  # a search as it was before these existed
                search.pop(name)
        return data

    def spec_hash(self) -> str:
        """Content hash of the normalized spec: equal campaigns hash equal whatever their YAML layout."""
        return sha256_json(self.normalized())[:16]


def sha256_json(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def pinned_requirement(value: str) -> str:
    """An engine block's pip requirement, pinned with '==' (a build key must say exactly what went in)."""
    if "==" not in value:
        raise ValueError(f"the engine package must be pinned with '==' (got {value!r})")
    return value


def stringify_env(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in value.items()}
    return value
