"""Build stage: the engine venv for the campaign's engine, reused when its content key matches."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.build.venv import EngineBuild, ensure_engine_venv
from servebench.paths import cache_dir
from servebench.progress import reporter
from servebench.campaign.schema import EngineSpec


@task(name="build-engine", cache_policy=NONE)
def build_engine(spec: EngineSpec) -> EngineBuild:
    return ensure_engine_venv(spec, cache_dir(), log=reporter().note)
