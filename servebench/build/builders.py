"""One entry to the build stage whatever the recipe's kind: its key, the inputs the key covers,
the commands a build would run, and the build itself (reused from the cache when the key matches)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from servebench.build import cmake, git_source, target_venv, venv, wheel
from servebench.build.recipe import BuildRecipe, CMakeRecipe
from servebench.build.venv import EngineBuild


def ensure(recipe: BuildRecipe, cache: Path, log: Callable[[str], None] = print) -> EngineBuild:
    if isinstance(recipe, CMakeRecipe):
        return cmake.ensure_cmake_build(recipe, cache, log)
    if recipe.platform is not None:  # a venv for another architecture (and the host's twin it follows)
        return target_venv.ensure_target_venv(recipe, cache, log)
    if recipe.wheel is not None:  # the wheel first (its own key and artifact), then a venv with it
        recipe = wheel.with_built_wheel(recipe, wheel.ensure_wheel(recipe.wheel, cache, log), log)
    return venv.ensure_build(recipe, cache, log)


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr)


def inputs_and_key(recipe: BuildRecipe, cache: Path, log: Callable[[str], None] = _to_stderr) -> tuple[dict, str]:
    """What the build key covers, and the key (a cmake recipe's source is fetched to hash it)."""
    if isinstance(recipe, CMakeRecipe):
        inputs = cmake.cmake_inputs(recipe, cmake.fetch(recipe, cache, log))
        return inputs, cmake.cmake_key(recipe, inputs)
    if recipe.platform is not None:
        return target_venv.inputs_and_key(recipe, cache, log)
    if recipe.wheel is not None:  # the venv's key follows from the wheel's content: the wheel's key stands for it
        inputs = wheel.wheel_inputs(recipe.wheel, wheel.fetch_sdist(recipe.wheel.sdist, cache, log))
        return inputs, wheel.wheel_key(recipe.wheel, inputs)
    return venv.build_inputs(recipe), venv.build_key(recipe)


def steps(recipe: BuildRecipe, cache: Path, key: str,
          inputs: dict) -> tuple[dict[str, str], list[tuple[str, list[str]]]]:
    """(environment on top of this one, [(title, argv)]) a build of the recipe runs."""
    artifact = cache / "engines" / key
    if isinstance(recipe, CMakeRecipe):
        fetched = cmake.fetch(recipe, cache)
        project = Path("<scratch>") / cmake.PROJECT_DIR
        if recipe.git is not None:
            tree = f"<scratch>/tree/{fetched.digest}.tar"
            where = str(git_source.repository(recipe.git.repo, cache))  # a URL's mirror in the cache
            unpack = [("archive the commit", ["git", "-C", where, "archive", "--format=tar",
                                              f"--prefix={cmake.PROJECT_DIR}/", "-o", tree, fetched.digest]),
                      ("unpack", ["tar", "xf", tree, "-C", "<scratch>"])]
            project = project / recipe.source_subdir if recipe.source_subdir else project
        else:
            assert fetched.archive is not None
            top = Path("<scratch>/unpacked") / fetched.archive.name.removesuffix(".tar.gz")
            unpack = [("unpack", ["tar", "xf", str(fetched.archive), "-C", "<scratch>/unpacked"]),
                      ("move the project to src/", ["mv", str(top / recipe.source_subdir if recipe.source_subdir
                                                              else top), str(project)])]
        return {}, [*unpack, *cmake.cmake_steps(recipe, inputs, project, Path("<scratch>/build"),
                                                artifact, cmake.build_jobs())]
    if recipe.platform is not None:
        sysroot = target_venv.ensure_sysroot(recipe.platform.arch, recipe.platform.python_minor, cache)
        return {}, [("write the venv's layout (pyvenv.cfg, bin/python -> the sysroot's CPython, the hooks)",
                     ["<written by servebench>", str(artifact)]),
                    *target_venv.build_steps(recipe, artifact, Path("<scratch>"), Path("<a copy of engine/>"),
                                             target_venv.build_runner(sysroot))]
    if recipe.wheel is not None:
        scratch = Path("<scratch>")
        wheel_file = artifact / "<the built wheel>.whl"
        installed = recipe.model_copy(update={"wheel": None, "local_wheels": [str(wheel_file)],
                                              "packages": ["<the wheel's requirements>", *recipe.packages]})
        return wheel.wheel_env(recipe.wheel, scratch, cache), [
            *wheel.wheel_steps(recipe.wheel, wheel.fetch_sdist(recipe.wheel.sdist, cache), scratch, artifact),
            *venv.build_steps(installed, cache / "engines" / "<engine venv key>", Path("<a copy of engine/>"))]
    return dict(recipe.build_env), venv.build_steps(recipe, artifact, Path("<a copy of engine/>"))
