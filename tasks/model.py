"""Model stage: a local model directory, or the tiny Llama generated and cached."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from servebench.build.venv import EngineBuild
from servebench.build.model import ensure_model
from servebench.paths import cache_dir
from servebench.campaign.schema import ModelSpec


@task(name="prepare-model", cache_policy=NONE)
def prepare_model(spec: ModelSpec, build: EngineBuild, base_dir: str) -> str:
    return str(ensure_model(spec, build.python, cache_dir(), Path(base_dir)))
