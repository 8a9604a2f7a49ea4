"""Model stage: a local model directory or GGUF file, or the tiny Llama generated (in the format the
engine serves) and cached."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from servebench.build.model import ensure_model
from servebench.build.venv import EngineBuild
from servebench.campaign.schema import ModelSpec
from servebench.paths import cache_dir


@task(name="prepare-model", cache_policy=NONE)
def prepare_model(spec: ModelSpec, build: EngineBuild, base_dir: str, fmt: str = "hf") -> str:
    return str(ensure_model(spec, build.python, cache_dir(), Path(base_dir), fmt))
