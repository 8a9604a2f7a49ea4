"""One entry to the build stage whatever the recipe's kind: its key, the inputs the key covers,
the commands a build would run, and the build itself (reused from the cache when the key matches).

Every recipe names its builder (`recipe.builder`, plain data in servebench/builds/recipe.py) and every
builder has the same three methods (`Builder`), so the stage dispatches in one place, `builder_for`:
a new kind of build is a recipe naming a new builder and one entry in `BUILDERS`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Protocol, TypeVar

from servebench.builds import cmake, git_source, target_venv, venv, wheel
from servebench.builds.recipe import BuildRecipe, CMakeRecipe, VenvRecipe
from servebench.builds.venv import EngineBuild

Log = Callable[[str], None]
Steps = tuple[dict[str, str], list[tuple[str, list[str]]]]  # (environment on top of this one, [(title, argv)])


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr)


Recipe = TypeVar("Recipe", contravariant=True)  # the kind of recipe a builder takes


class Builder(Protocol[Recipe]):
    """What the build stage asks of every kind of build."""

    def ensure(self, recipe: Recipe, cache: Path, log: Log) -> EngineBuild:
        """The build, made unless the cache holds one of the same key."""

    def inputs_and_key(self, recipe: Recipe, cache: Path, log: Log) -> tuple[dict, str]:
        """What the build key covers, and the key (fetching a source to hash it if need be)."""

    def steps(self, recipe: Recipe, cache: Path, key: str, inputs: dict) -> Steps:
        """The environment and commands a build of the recipe runs (for `servebench build --dry-run`)."""


class CMakeBuilder:
    """A CMake project from a pinned sdist or a git commit, for a target CPU (cmake.py)."""

    def ensure(self, recipe: CMakeRecipe, cache: Path, log: Log) -> EngineBuild:
        return cmake.ensure_cmake_build(recipe, cache, log)

    def inputs_and_key(self, recipe: CMakeRecipe, cache: Path, log: Log) -> tuple[dict, str]:
        inputs = cmake.cmake_inputs(recipe, cmake.fetch(recipe, cache, log))
        return inputs, cmake.cmake_key(recipe, inputs)

    def steps(self, recipe: CMakeRecipe, cache: Path, key: str, inputs: dict) -> Steps:
        artifact = cache / "engines" / key
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


class TargetVenvBuilder:
    """A venv for another architecture (and the host's twin it follows), target_venv.py."""

    def ensure(self, recipe: VenvRecipe, cache: Path, log: Log) -> EngineBuild:
        return target_venv.ensure_target_venv(recipe, cache, log)

    def inputs_and_key(self, recipe: VenvRecipe, cache: Path, log: Log) -> tuple[dict, str]:
        return target_venv.inputs_and_key(recipe, cache, log)

    def steps(self, recipe: VenvRecipe, cache: Path, key: str, inputs: dict) -> Steps:
        return {}, target_venv.dry_run_steps(recipe, cache, cache / "engines" / key)


class WheelVenvBuilder:
    """The wheel first (its own key and artifact, wheel.py), then a venv with it."""

    def ensure(self, recipe: VenvRecipe, cache: Path, log: Log) -> EngineBuild:
        assert recipe.wheel is not None
        return venv.ensure_build(wheel.with_built_wheel(recipe, wheel.ensure_wheel(recipe.wheel, cache, log), log),
                                 cache, log)

    def inputs_and_key(self, recipe: VenvRecipe, cache: Path, log: Log) -> tuple[dict, str]:
        """The venv's key follows from the wheel's content: the wheel's key stands for it."""
        assert recipe.wheel is not None
        inputs = wheel.wheel_inputs(recipe.wheel, wheel.fetch_sdist(recipe.wheel.sdist, cache, log))
        return inputs, wheel.wheel_key(recipe.wheel, inputs)

    def steps(self, recipe: VenvRecipe, cache: Path, key: str, inputs: dict) -> Steps:
        assert recipe.wheel is not None
        artifact = cache / "engines" / key
        scratch = Path("<scratch>")
        wheel_file = artifact / "<the built wheel>.whl"
        installed = recipe.model_copy(update={"wheel": None, "local_wheels": [str(wheel_file)],
                                              "packages": ["<the wheel's requirements>", *recipe.packages]})
        return wheel.wheel_env(recipe.wheel, scratch, cache), [
            *wheel.wheel_steps(recipe.wheel, wheel.fetch_sdist(recipe.wheel.sdist, cache), scratch, artifact),
            *venv.build_steps(installed, cache / "engines" / "<engine venv key>", Path("<a copy of engine/>"))]


class TargetWheelVenvBuilder:
    """A wheel cross-compiled for the target first (its own key and artifact, wheel.py with cross.py),
    then the venv for the target with it (target_venv.py)."""

    def ensure(self, recipe: VenvRecipe, cache: Path, log: Log) -> EngineBuild:
        assert recipe.wheel is not None
        built = wheel.ensure_wheel(recipe.wheel, cache, log)
        return target_venv.ensure_target_venv(wheel.with_cross_wheel(recipe, built), cache, log)

    def inputs_and_key(self, recipe: VenvRecipe, cache: Path, log: Log) -> tuple[dict, str]:
        """The venv's key follows from the wheel's content: the wheel's key stands for it."""
        assert recipe.wheel is not None
        inputs = wheel.wheel_inputs(recipe.wheel, wheel.fetch_sdist(recipe.wheel.sdist, cache, log), cache, log)
        return inputs, wheel.wheel_key(recipe.wheel, inputs)

    def steps(self, recipe: VenvRecipe, cache: Path, key: str, inputs: dict) -> Steps:
        assert recipe.wheel is not None and recipe.platform is not None
        artifact = cache / "engines" / key
        scratch = Path("<scratch>")
        paths = wheel.cross_paths(recipe.wheel, cache, scratch, _to_stderr)
        wheel_file = artifact / "<the built wheel>.whl"
        installed = recipe.model_copy(update={"wheel": None, "local_wheels": [str(wheel_file)]})
        venv_dir = cache / "engines" / "<engine venv key>"
        return wheel.wheel_env(recipe.wheel, scratch, cache), [
            *wheel.wheel_steps(recipe.wheel, wheel.fetch_sdist(recipe.wheel.sdist, cache), scratch, artifact, paths),
            *target_venv.dry_run_steps(installed, cache, venv_dir)]


class VenvBuilder:
    """A venv filled by pip on this host (venv.py)."""

    def ensure(self, recipe: VenvRecipe, cache: Path, log: Log) -> EngineBuild:
        return venv.ensure_build(recipe, cache, log)

    def inputs_and_key(self, recipe: VenvRecipe, cache: Path, log: Log) -> tuple[dict, str]:
        return venv.build_inputs(recipe), venv.build_key(recipe)

    def steps(self, recipe: VenvRecipe, cache: Path, key: str, inputs: dict) -> Steps:
        return dict(recipe.build_env), venv.build_steps(recipe, cache / "engines" / key, Path("<a copy of engine/>"))


# a recipe's `builder` -> what builds it; each builder takes the kind of recipe that names it, a pairing
# made by name (`recipe.builder`), not by type: hence Builder[Any]
BUILDERS: dict[str, Builder[Any]] = {"cmake": CMakeBuilder(), "target-venv": TargetVenvBuilder(),
                                     "target-wheel-venv": TargetWheelVenvBuilder(),
                                     "wheel-venv": WheelVenvBuilder(), "venv": VenvBuilder()}


def builder_for(recipe: BuildRecipe) -> Builder[Any]:
    """The one place the build stage picks a builder: the one the recipe names."""
    return BUILDERS[recipe.builder]


def ensure(recipe: BuildRecipe, cache: Path, log: Log = print) -> EngineBuild:
    return builder_for(recipe).ensure(recipe, cache, log)


def inputs_and_key(recipe: BuildRecipe, cache: Path, log: Log = _to_stderr) -> tuple[dict, str]:
    """What the build key covers, and the key (a cmake recipe's source is fetched to hash it)."""
    return builder_for(recipe).inputs_and_key(recipe, cache, log)


def steps(recipe: BuildRecipe, cache: Path, key: str, inputs: dict) -> Steps:
    """(environment on top of this one, [(title, argv)]) a build of the recipe runs."""
    return builder_for(recipe).steps(recipe, cache, key, inputs)
