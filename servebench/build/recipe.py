"""What an engine asks the build stage for: a recipe, engine-neutral data.

Today one kind: a Python venv filled by pip: vLLM's CPU wheel and Ray, or llama.cpp's tools
compiled by CMake from the llama-cpp-python sdist (`pip_options` and `build_env` carry its
CMake flags). Source builds for a target CPU (issue 17) add a recipe kind and its builder in
this package; engines only return recipes.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class VenvRecipe(BaseModel):
    """A venv created with pip, its packages pinned; reused while nothing that goes into it changes."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["venv-pip"] = "venv-pip"
    engine: str                                            # the engine kind, the first part of the build key
    packages: list[str] = Field(default_factory=list)      # pinned requirements, installed in one pip call
    remove: list[str] = Field(default_factory=list)        # uninstalled afterwards (broken companions)
    post_install: list[list[str]] = Field(default_factory=list)  # argument lists for the venv's python
    version_distribution: str | None = None                # whose version is the engine version (None: Python's)
    engine_package: bool = True                            # install servebench's engine-side package (engine/)
    pip_options: list[str] = Field(default_factory=list)   # before the packages (--no-binary X, --config-settings)
    build_env: dict[str, str] = Field(default_factory=dict)  # for the install step (CMAKE_ARGS)
    host_cpu_flags: list[str] = Field(default_factory=list)  # part of the key when the build is for this CPU
    version_command: list[str] = Field(default_factory=list)  # relative to the venv: what was built, by what


BuildRecipe = VenvRecipe
