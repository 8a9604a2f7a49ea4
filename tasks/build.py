"""Build stage: the engine's content-addressed build, reused when its key matches."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.builds.builders import ensure
from servebench.builds.recipe import BuildRecipe
from servebench.builds.venv import EngineBuild
from servebench.paths import cache_dir
from servebench.progress import reporter


@task(name="build-engine", cache_policy=NONE)
def build_engine(recipe: BuildRecipe) -> EngineBuild:
    return ensure(recipe, cache_dir(), log=reporter().note)
