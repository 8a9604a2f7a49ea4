"""llama.cpp on CPU, its two tools compiled by CMake (build.py): executors local (one
`llama-server`) and rpc (`ggml-rpc-server` workers on the nodes holding the layers).
Models are GGUF files (a campaign's own, or the tiny one servebench generates)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from servebench.builds.prerequisites import Prerequisite
from servebench.builds.recipe import BuildRecipe
from servebench.config.campaign import ModeSpec
from servebench.engines.base import Engine, EngineAPI, GateChoice, Knob, LaunchRequest, ServerLaunch, SharedServices
from servebench.engines.llamacpp.build import build_prerequisites, build_recipe
from servebench.engines.llamacpp.knobs import KNOBS
from servebench.engines.llamacpp.launch import launch_mode
from servebench.engines.llamacpp.memory import SERVER_MEMORY
from servebench.engines.llamacpp.spec import LlamaCppEngineSpec
from servebench.models.artifact import GENERATED_GGUF, ModelGenerator
from servebench.providers.base import Node, Provider

EXECUTORS = ("local", "rpc")
# libllama's own line (at -lv 4 and up), else the server's
KV_CELLS = re.compile(r"llama_context: n_ctx\s+=\s+(\d+)")
SLOTS_LINE = re.compile(r"n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(true|false)'")

MAX_RPC_WORKERS = 15   # GGML_SCHED_MAX_BACKENDS (16) less the head's own CPU backend


class LlamaCppEngine(Engine[LlamaCppEngineSpec, SharedServices]):  # it shares nothing (start_shared)
    kind: ClassVar[str] = "llamacpp"
    spec_model: ClassVar[type[LlamaCppEngineSpec]] = LlamaCppEngineSpec
    executors: ClassVar[tuple[str, ...]] = EXECUTORS
    model_formats: ClassVar[tuple[str, ...]] = ("gguf",)
    default_model: ClassVar[ModelGenerator] = GENERATED_GGUF  # a GGUF file, written by servebench itself
    api: ClassVar[EngineAPI] = EngineAPI(
        metrics={
            "llamacpp:requests_processing": "running",
            "llamacpp:requests_deferred": "waiting",
            "llamacpp:prompt_tokens_total": "prompt_tokens_total",
            "llamacpp:tokens_predicted_total": "generation_tokens_total",
            "llamacpp:n_decode_total": "decode_steps_total",
        },
        generation_tokens_metric="llamacpp:tokens_predicted_total",
        # /slots gives the KV tokens in use (this version has no KV gauge among its metrics)
        state_sampler="servebench.engines.llamacpp.slots:sample_slots",
        # libllama's line when a batch finds no room in the KV cache (then the server retries smaller)
        kv_failure_pattern=r"failed to find a memory slot for batch",
        # exactly max_tokens tokens; `timings.predicted_n` in every streamed chunk is the running token
        # count (usage comes only in the last chunk, and a token ending inside a UTF-8 character is
        # streamed with the next one)
        request_extras={"ignore_eos": True, "timings_per_token": True},
        # usage first (the last chunk's total), then the running count of every chunk
        stream_token_counts=("usage.completion_tokens", "timings.predicted_n"),
        # the prefix cache's effect per request (no queries/hits counters): the last chunk's timings say the
        # prompt tokens reused from a slot's cache (`cache_n`, the longest common prefix with what the slot or
        # the prompt cache held) and those processed (`prompt_n`); together they are usage.prompt_tokens
        prompt_cache_tokens=("timings.cache_n", "timings.prompt_n"),
        gate_extras={"ignore_eos": True},
        memory=SERVER_MEMORY,  # the server, its RPC workers, their KV cells and working set: memory.py
    )
    knobs: ClassVar[Mapping[str, Knob]] = KNOBS

    def build_recipe(self, spec: LlamaCppEngineSpec) -> BuildRecipe:
        return build_recipe(spec, self.kind)

    def build_prerequisites(self, spec: LlamaCppEngineSpec) -> list[Prerequisite]:
        return build_prerequisites(spec)

    def mode_problem(self, mode: ModeSpec, server_cpus: list[list[int]], node_names: list[str]) -> str | None:
        if mode.tp > 1:
            return "llama.cpp splits a model by layers over RPC workers (pp with executor 'rpc'); it has no tp"
        if mode.executor == "local" and mode.pp > 1:
            return "executor 'local' is one llama-server; split layers over workers with executor 'rpc'"
        if mode.executor == "rpc" and mode.pp > MAX_RPC_WORKERS:
            return (f"pp={mode.pp} RPC workers: llama.cpp schedules at most 16 backends, the head's CPU and "
                    f"{MAX_RPC_WORKERS} RPC workers (ggml-backend.cpp: 'GGML_ASSERT(n_backends <= "
                    f"GGML_SCHED_MAX_BACKENDS) failed' at 16), and its --tensor-split takes at most "
                    f"{MAX_RPC_WORKERS} values")
        if mode.executor == "rpc" and mode.pp > len(node_names) and not mode.oversubscribe:
            return (f"pp={mode.pp} RPC workers on {len(node_names)} nodes would share cores: give as many nodes "
                    f"or set oversubscribe: true")
        return None

    def reference_mode(self, name: str) -> ModeSpec:
        return ModeSpec(name=name, executor="local")

    def is_reference(self, mode: ModeSpec) -> bool:
        return mode.executor == "local"

    def launch(self, request: LaunchRequest) -> ServerLaunch:
        return launch_mode(request)

    def start_shared(self, modes: list[ModeSpec], spec: LlamaCppEngineSpec, nodes: list[Node], build_dir: str,
                     provider: Provider, run_dir: Path) -> None:
        """Nothing is shared: every mode's server starts (and restarts) its own RPC workers."""
        return None

    def stop_shared(self, services: object, provider: Provider) -> list[str]:
        return []

    def kv_capacity_tokens(self, log_text: str) -> int | None:
        """The KV cells of all slots (ctx_size rounded up to 256): libllama's 'llama_context: n_ctx = N'
        when logged, else from the server's 'n_slots = S, n_ctx_slot = C, kv_unified = U' (one pool
        of C cells when unified, S pools of C otherwise)."""
        if match := KV_CELLS.search(log_text):
            return int(match.group(1))
        if match := SLOTS_LINE.search(log_text):
            slots, per_slot, unified = int(match.group(1)), int(match.group(2)), match.group(3) == "true"
            return per_slot if unified else slots * per_slot
        return None

    def gate_choice(self, choice: dict) -> GateChoice:
        """`logprobs.content[i]`: {id, logprob, top_logprobs: [{id, ...}]} per generated token."""
        content = (choice.get("logprobs") or {}).get("content") or []
        return ([int(entry["id"]) for entry in content], [float(entry["logprob"]) for entry in content],
                [[int(c["id"]) for c in entry.get("top_logprobs") or []] for entry in content])
