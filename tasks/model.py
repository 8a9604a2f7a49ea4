"""Model stage: a local model directory or GGUF file, or the tiny Llama generated (by the engine's
`default_model`, in the format it serves) and cached."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from servebench.builds.venv import EngineBuild
from servebench.config.campaign import ModelSpec
from servebench.engines import get_engine
from servebench.models.artifact import ensure_model
from servebench.paths import cache_dir


@task(name="prepare-model", cache_policy=NONE)
def prepare_model(spec: ModelSpec, build: EngineBuild, base_dir: str, engine_kind: str) -> str:
    """The model for the engine of that kind: a generated one made by its declared generator."""
    return str(ensure_model(spec, build.python, cache_dir(), Path(base_dir), get_engine(engine_kind).default_model))
