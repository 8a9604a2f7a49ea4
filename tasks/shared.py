"""Shared-services stage: what the engine's modes share for the whole campaign (vLLM's Ray
cluster for its ray modes), started once after the build (stopped at release, a plain call)."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from servebench.builds.venv import EngineBuild
from servebench.config.campaign import EngineSpecBase, ModeSpec
from servebench.engines import Engine
from servebench.engines.base import SharedServices
from servebench.providers import Node, Provider


@task(name="start-shared-services", cache_policy=NONE)
def start_shared_services(engine: Engine, spec: EngineSpecBase, modes: list[ModeSpec], nodes: list[Node],
                          build: EngineBuild, provider: Provider, run_dir: str) -> SharedServices | None:
    """`modes`: the campaign's modes this engine serves."""
    return engine.start_shared(modes, spec, nodes, build.venv_path, provider, Path(run_dir))
