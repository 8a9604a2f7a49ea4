"""The `echo` engine: a test-only second engine, to prove an engine is a folder plus one
registry line. Its server is `server.py` (standard library only); its build is a bare venv
(a recipe with no packages). Executors:

- `local`: one API process on the first node;
- `split`: a worker process on the last node, started first and waited on until it accepts
  (the readiness order llama.cpp's RPC workers need), then the API process on the first
  node, which checks the worker before it serves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from servebench.builds.recipe import VenvRecipe
from servebench.config.campaign import EngineSpecBase, ModeSpec
from servebench.engines.base import (
    Engine,
    EngineAPI,
    GateChoice,
    Knob,
    LaunchRequest,
    MemoryRequest,
    ProcessLaunch,
    RankShare,
    ServerLaunch,
    ServerMemory,
    legacy_logprobs,
)
from servebench.providers.base import Node, Provider

SERVER = Path(__file__).with_name("server.py")
CAPACITY = re.compile(r"capacity (\d+) tokens")


def echo_ranks(request: MemoryRequest) -> list[RankShare]:
    """The echo server loads no model and keeps no KV cache: one process of plain Python."""
    return [RankShare(node=request.node_names[0], label="server", layers=0, kv_pool_bytes=0)]


# a standard-library HTTP server: ~20 MB RSS, bounded generously
ECHO_MEMORY = ServerMemory(process_overhead_bytes=64 * 1024 ** 2, ranks=echo_ranks)


class EchoEngineSpec(EngineSpecBase):
    kind: Literal["echo"] = "echo"
    token_delay_ms: float = Field(2.0, ge=0, description="Delay before each streamed token.")
    prefill_ms: float = Field(0.0, ge=0, description="Each request's prefill, one at a time (0: none): a "
                              "server whose capacity is 1000 / prefill_ms requests per second.")


class EchoEngine(Engine):
    kind: ClassVar[str] = "echo"
    spec_model: ClassVar[type[EchoEngineSpec]] = EchoEngineSpec
    executors: ClassVar[tuple[str, ...]] = ("local", "split")
    model_formats: ClassVar[tuple[str, ...]] = ("hf",)
    # the rest is EngineAPI's defaults, OpenAI's: usage.completion_tokens, no gate extras, no prefix-cache counts
    api: ClassVar[EngineAPI] = EngineAPI(
        metrics={"echo_kv_usage": "kv_usage", "echo_requests_running": "running",
                 "echo_prompt_tokens_total": "prompt_tokens_total",
                 "echo_generation_tokens_total": "generation_tokens_total"},
        generation_tokens_metric="echo_generation_tokens_total",
        request_extras={"stream_options": {"include_usage": True, "continuous_usage_stats": True}},
        memory=ECHO_MEMORY)
    knobs: ClassVar[Mapping[str, Knob]] = {
        "prefill_ms": Knob("--prefill-ms: each request's one-at-a-time prefill (the server's capacity)", float,
                           minimum=0),
        "token_delay_ms": Knob("--token-delay-ms: the delay before each streamed token", float, minimum=0)}

    def build_recipe(self, spec: EchoEngineSpec) -> VenvRecipe:
        return VenvRecipe(engine=self.kind, engine_package=False)

    def build_prerequisites(self, spec: EchoEngineSpec) -> list:
        return []

    def mode_problem(self, mode: ModeSpec, server_cpus: list[list[int]], node_names: list[str]) -> str | None:
        if mode.executor == "split" and len(node_names) < 2:
            return "executor 'split' puts its worker on another node: it needs two nodes"
        return None

    def reference_mode(self, name: str) -> ModeSpec:
        return ModeSpec(name=name, executor="local")

    def is_reference(self, mode: ModeSpec) -> bool:
        return mode.executor == "local" and mode.world_size == 1

    def launch(self, request: LaunchRequest) -> ServerLaunch:
        """The server's source goes on the command line (`python -c`): a node on another host,
        which cannot see this checkout, runs it with the build's bare venv as well."""
        api_node = request.nodes[0]
        port = request.ports.free_port(api_node)
        argv = [request.python, "-c", SERVER.read_text(), "--host", api_node.address, "--port", str(port),
                "--model-dir", request.model_dir, "--served-name", request.served_name,
                "--token-delay-ms", f"{_knob(request, 'token_delay_ms'):g}",
                "--prefill-ms", f"{_knob(request, 'prefill_ms'):g}"]
        env = {**request.spec.env, **request.mode.env}
        processes = []
        if request.mode.executor == "split":
            worker_node = request.nodes[-1]
            worker_port = request.ports.free_port(worker_node)
            processes.append(ProcessLaunch(
                node=worker_node.name, env=env, label=f"worker.{worker_node.name}", ready_port=worker_port,
                argv=[request.python, "-c", SERVER.read_text(), "--serve-worker", "--host", worker_node.address,
                      "--port", str(worker_port)]))
            argv += ["--worker", f"{worker_node.address}:{worker_port}"]
        processes.append(ProcessLaunch(node=api_node.name, argv=argv, env=env, api=True))
        return ServerLaunch(processes=processes, port=port)

    def start_shared(self, modes: list[ModeSpec], spec: EchoEngineSpec, nodes: list[Node], build_dir: str,
                     provider: Provider, run_dir: Path) -> None:
        return None

    def stop_shared(self, services: object, provider: Provider) -> list[str]:
        return []

    def kv_capacity_tokens(self, log_text: str) -> int | None:
        match = CAPACITY.search(log_text)
        return int(match.group(1)) if match else None

    def gate_choice(self, choice: dict) -> GateChoice:
        return legacy_logprobs(choice, int)




def _knob(request: LaunchRequest, name: str) -> float:
    """A knob of the mode, else the engine block's setting of the same name."""
    value = request.mode.knobs.get(name)
    return float(getattr(request.spec, name) if value is None else value)
