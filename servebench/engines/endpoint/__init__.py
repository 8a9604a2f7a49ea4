"""A server servebench did not start: one a site runs, or a user's own job script started, measured
like any other (the load sweep, validity, telemetry from its Prometheus /metrics, landing, report and
regression history) with nothing built, placed, measured for a roofline, started or stopped.

Its `engine:` block names the engine whose server it is (`api:`); `for_spec` answers with an engine whose
`api` and gate reading are that engine's, so the load generator, the scraper and the gate read it as they
read a server servebench started. The gate compares it only with a reference the campaign names
(`reference:`, another server's URL); without one its verdict is `unchecked`, never a pass."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable, ClassVar

from servebench.builds.prerequisites import Prerequisite
from servebench.builds.recipe import BuildRecipe
from servebench.builds.venv import BuildError
from servebench.config.campaign import ModeSpec
from servebench.engines.base import (
    Engine,
    EngineAPI,
    EngineSpecError,
    ExternalServer,
    GateChoice,
    LaunchRequest,
    ServerLaunch,
    SharedServices,
)
from servebench.engines.endpoint.spec import EndpointEngineSpec
from servebench.providers.base import Node, Provider

EXECUTOR = "endpoint"
# the executor of the gate's reference mode: the server `reference:` names, never one of the campaign's modes
REFERENCE_EXECUTOR = "reference"
# the gate's verdict then reads "not checked: no reference named (...); the cells run with no reference ..."
NO_REFERENCE = "no reference named (engine.reference: a server whose answers this one's must match)"


class NotServebenchsServer(BuildError):
    """Asked to build or launch a server that servebench does not start (`servebench build` says so)."""


class EndpointEngine(Engine[EndpointEngineSpec, SharedServices]):  # it shares nothing (start_shared)
    kind: ClassVar[str] = "endpoint"
    spec_model: ClassVar[type[EndpointEngineSpec]] = EndpointEngineSpec
    executors: ClassVar[tuple[str, ...]] = (EXECUTOR,)
    model_formats: ClassVar[tuple[str, ...]] = ("hf", "gguf")  # `model:` gives the shape only: nothing is served
    # a plain OpenAI server until `for_spec` names whose it is
    api: ClassVar[EngineAPI] = EngineAPI(metrics={})
    starts_servers: ClassVar[bool] = False
    # the engine whose server answers (set on the class `for_spec` makes; None: not named yet)
    served_by: ClassVar[Engine | None] = None

    def build_recipe(self, spec: EndpointEngineSpec) -> BuildRecipe:
        raise NotServebenchsServer(f"engine endpoint: the server at {spec.url} is not servebench's: nothing is "
                                   "built for it")

    def build_prerequisites(self, spec: EndpointEngineSpec) -> list[Prerequisite]:
        return []

    def mode_problem(self, mode: ModeSpec, server_cpus: list[list[int]], node_names: list[str]) -> str | None:
        """None: every mode measures the server at `url`; what a mode sets to start a server of its own
        (tp, replicas, args...) the campaign check refuses by field (servebench/planning/feasibility.py)."""
        return None

    def reference_mode(self, name: str) -> ModeSpec:
        return ModeSpec(name=name, executor=REFERENCE_EXECUTOR)

    def is_reference(self, mode: ModeSpec) -> bool:
        """Never: a campaign's mode is the server measured, and its own answers prove nothing about it."""
        return False

    def launch(self, request: LaunchRequest) -> ServerLaunch:
        raise NotServebenchsServer(f"engine endpoint: mode {request.mode.name} measures a server servebench did "
                                   "not start: there is nothing to launch")

    def start_shared(self, modes: list[ModeSpec], spec: EndpointEngineSpec, nodes: list[Node], build_dir: str,
                     provider: Provider, run_dir: Path) -> None:
        return None

    def stop_shared(self, services: object, provider: Provider) -> list[str]:
        return []

    def kv_capacity_tokens(self, log_text: str) -> int | None:
        """None: the server's log is not servebench's to read."""
        return None

    def gate_choice(self, choice: dict) -> GateChoice:
        """The answer read as the engine whose server it is reads it (`api:`)."""
        if self.served_by is None:
            raise EngineSpecError("api", "engine endpoint: whose server it is was not resolved (for_spec)")
        return self.served_by.gate_choice(choice)

    def for_spec(self, spec: EndpointEngineSpec, engine_of: Callable[[str], Engine]) -> Engine:
        """An endpoint engine speaking the API of the engine `api:` names: its metrics (none with
        `metrics: false`), token counter, request and gate extensions, its answers' reading; no memory layout
        and no log lines (neither is servebench's to know)."""
        served = served_engine(spec, engine_of)
        api = replace(served.api, memory=None, kv_failure_pattern=None)
        if not spec.metrics:
            api = replace(api, metrics={}, generation_tokens_metric=None, prefix_cache_metrics=None,
                          state_sampler=None)
        bound = type(f"EndpointEngine[{served.kind}]", (EndpointEngine,), {"api": api, "served_by": served})
        return bound()

    def external_server(self, spec: EndpointEngineSpec, mode: ModeSpec) -> ExternalServer | None:
        if mode.executor != REFERENCE_EXECUTOR:
            return ExternalServer(url=spec.url, served_name=spec.served_model, health_path=spec.health_path,
                                  api_key_env=spec.api_key_env)
        reference = spec.reference
        if reference is None:
            return None
        return ExternalServer(url=reference.url, served_name=reference.served_model or spec.served_model,
                              health_path=reference.health_path, api_key_env=reference.api_key_env)

    def reference_problem(self, spec: EndpointEngineSpec) -> str | None:
        return NO_REFERENCE if spec.reference is None else None


def served_engine(spec: EndpointEngineSpec, engine_of: Callable[[str], Engine]) -> Engine:
    """The engine `api:` names, which must be one that starts its own servers (its API is what a server of
    it speaks)."""
    try:
        served = engine_of(spec.api)
    except ValueError as exc:
        raise EngineSpecError("api", f"no engine {spec.api!r} to read the server as: {exc}") from None
    if not served.starts_servers:
        raise EngineSpecError("api", f"engine {spec.api!r} measures servers of other engines: name the engine "
                                     "whose server answers at the URL")
    return served
