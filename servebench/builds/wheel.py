"""The `wheel` recipe's builder: a Python sdist compiled into a wheel on this host, for this CPU.

This is how vLLM is built from source (its CPU kernels are compiled for the build host's ISA, so a
wheel is keyed on that CPU's flags too): a build venv holds the pinned build requirements (the
CPU torch the extension is compiled against, cmake, ninja), the sdist is unpacked and patched in
a scratch directory, source trees that the project's CMake would clone from the network are
passed in as staged local directories (`FETCHCONTENT_SOURCE_DIR_ONEDNN`), and
`pip wheel --no-build-isolation` builds. The wheel is the artifact (`<cache>/engines/<key>/`),
sha256-verified before use; the engine venv installs it (`venv.py`) with its requirements, less
the ones pinned to a direct URL (the network those need is not the one this build had).

The key covers the sdist's sha256, every build requirement, the build environment, each patch's
and each staged tree's content, the compiler's id and version, Python, the architecture and the
host's CPU flags. ccache (when installed) keeps compiled objects across builds with paths taken
relative to the scratch directory, so a build that was interrupted, or that differs in one
patch, recompiles only what changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import sys
import tempfile
import time
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from servebench.builds import cross as cross_build
from servebench.builds import target_venv
from servebench.builds.cache import file_sha256
from servebench.builds.cmake import compiler_cache_env, compiler_identity, verified_or_built
from servebench.builds.recipe import CrossCompile, VenvRecipe, WheelRecipe
from servebench.builds.sdist import fetch_sdist
from servebench.builds.venv import BuildError, EngineBuild, run_step
from servebench.config.campaign import sha256_json
from servebench.platform.cpu_features import cpuinfo_features
from servebench.platform.sysroot import Sysroot, ensure_sysroot, sysroot_in_use
from servebench.platform.targets import profile


def tree_digest(root: Path) -> str:
    """sha256 over a source tree's relative paths and file contents (a staged oneDNN: ~90 MB, ~1 s)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and ".git" not in p.parts):
        digest.update(str(path.relative_to(root)).encode() + b"\0")
        digest.update(file_sha256(path).encode())
    return digest.hexdigest()


def cross_inputs(cross: CrossCompile, cache: Path, log: Callable[[str], None] = print) -> dict:
    """What a cross build adds to the key: the target (name, architecture, flags, features), the cross
    compiler, the sysroot's package list, and the key of the target venv whose torch it links (that
    venv is not built to compute this: its key follows from its own inputs)."""
    target = profile(cross.target)
    c_compiler, cxx_compiler = cross_build.compilers(target)
    sysroot = ensure_sysroot(target.arch, cross.python_minor, cache, log, tuple(cross.sysroot_packages))
    return {"target": target.name, "arch": target.arch, "compiler_flags": list(target.compiler_flags),
            "features": list(target.features),
            "compiler": compiler_identity(cxx_compiler) | {"c": compiler_identity(c_compiler)["version"]},
            "python": sysroot.python_version, "sysroot": {"key": sysroot.key, "packages": sysroot.packages},
            "torch_from": target_venv.inputs_and_key(cross.torch_venv, cache, log)[1],
            "compile_env": dict(cross.compile_env),
            "build_host": f"{sys.platform}-{platform.machine()}"}


def wheel_inputs(recipe: WheelRecipe, sdist: Path, cache: Path | None = None,
                 log: Callable[[str], None] = print) -> dict:
    """Everything that goes into the wheel; its hash is the key. A cross build's target, cross compiler,
    sysroot and target torch replace this host's compiler, Python and CPU flags (it does not depend
    on this host's CPU)."""
    for variable, directory in recipe.staged_sources.items():
        if not Path(directory).is_dir():
            raise BuildError(f"staged source {variable}={directory}: no such directory")
    common = {
        "engine": recipe.engine,
        "recipe": "wheel",
        "sdist": recipe.sdist,
        "source_sha256": file_sha256(sdist),
        "build_requirements": list(recipe.build_requirements),
        "build_env": dict(recipe.build_env),
        "staged_sources": {variable: tree_digest(Path(directory))
                           for variable, directory in sorted(recipe.staged_sources.items())},
        "patches": {Path(patch).name: file_sha256(Path(patch)) for patch in recipe.patches},
    }
    if recipe.cross is not None:
        if cache is None:
            raise BuildError("a cross-compiled wheel's key needs the cache (its sysroot and target venv)")
        return common | cross_inputs(recipe.cross, cache, log)
    return common | {
        "compiler": compiler_identity("g++") | {"c": compiler_identity("gcc")["version"]},
        "python": platform.python_version(),
        "arch": platform.machine(),
        # the CPU extension is compiled for the build host's ISA: a cache shared by another CPU must miss
        "host_cpu_flags": sorted(cpuinfo_features(Path("/proc/cpuinfo").read_text())),
    }


def wheel_key(recipe: WheelRecipe, inputs: dict) -> str:
    target = f"{recipe.cross.target}-" if recipe.cross is not None else ""
    return f"{recipe.engine}-wheel-{target}{sha256_json(inputs)[:16]}"


def wheel_env(recipe: WheelRecipe, scratch: Path, cache: Path) -> dict[str, str]:
    """The build's environment on top of this one: the build venv first on PATH (its cmake and
    ninja), the recipe's variables, the staged source trees, ccache."""
    return {"PATH": f"{scratch / 'venv' / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
            "VIRTUAL_ENV": str(scratch / "venv"), **recipe.build_env, **recipe.staged_sources,
            **compiler_cache_env(cache, str(scratch))}


def wheel_steps(recipe: WheelRecipe, sdist: Path, scratch: Path, artifact: Path,
                cross_paths: cross_build.CrossPaths | None = None) -> list[tuple[str, list[str]]]:
    """The build's commands in order (title, argv); `servebench build --dry-run` prints them. A cross
    build first writes its toolchain, torch config and target cpuinfo, and its compile step alone gets
    the cross environment (`env ...`: pip installing the build venv must resolve for this host)."""
    python = str(scratch / "venv" / "bin" / "python")
    pip = [python, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    source = scratch / "src"
    requirements = [arg for requirement in recipe.build_requirements
                    for arg in (["-r", str(source / requirement.removeprefix("-r").strip())]
                                if requirement.startswith("-r") else [requirement])]
    build = [*pip, "wheel", "--no-build-isolation", "--no-deps", "-v", "-w", str(artifact), str(source)]
    cross_steps: list[tuple[str, list[str]]] = []
    if recipe.cross is not None:
        assert cross_paths is not None, "a cross build's steps need its paths"
        target = profile(recipe.cross.target)
        cross_steps = [(f"write {path.relative_to(scratch)}", cross_build.write_file_argv(path, text))
                       for path, text in cross_build.cross_files(target, cross_paths).items()]
        build = cross_build.env_argv(cross_build.compile_env(target, cross_paths, recipe.cross.compile_env), build)
    return [
        ("create the build venv", [sys.executable, "-m", "venv", str(scratch / "venv")]),
        ("make the source directory", ["mkdir", "-p", str(source)]),
        ("unpack the sdist", ["tar", "xzf", str(sdist), "-C", str(source), "--strip-components=1"]),
        *([("install the build requirements", [*pip, "install", *requirements])] if requirements else []),
        *[(f"apply {Path(patch).name}", ["patch", "-p1", "--forward", "--batch", "-d", str(source), "-i", patch])
          for patch in recipe.patches],
        *cross_steps,
        ("build the wheel", build),
    ]


def scratch_root(cache: Path) -> Path:
    """Where wheel builds unpack and compile: on the cache's disk (gigabytes), not a tmpfs."""
    root = cache / "scratch"
    root.mkdir(parents=True, exist_ok=True)
    return root


def cross_paths(recipe: WheelRecipe, cache: Path, scratch: Path, log: Callable[[str], None] = print,
                torch_build: EngineBuild | None = None, sysroot: Sysroot | None = None) -> cross_build.CrossPaths:
    """Where a cross build finds its sysroot (the one the build holds, or found by its package list)
    and target torch (the target venv built first unless given); for the dry run, `torch_build` None
    and the venv not built, its place named by key."""
    assert recipe.cross is not None
    if sysroot is None:
        target = profile(recipe.cross.target)
        sysroot = ensure_sysroot(target.arch, recipe.cross.python_minor, cache, log,
                                 tuple(recipe.cross.sysroot_packages))
    torch_platform = recipe.cross.torch_venv.platform
    assert torch_platform is not None  # the torch it compiles against is the target's: a target venv
    if torch_build is not None:
        site = target_venv.site_packages(Path(torch_build.venv_path), torch_platform)
        version = target_venv.installed_version(site, "torch")
    else:
        key = target_venv.inputs_and_key(recipe.cross.torch_venv, cache, log)[1]
        site = target_venv.site_packages(cache / "engines" / key, torch_platform)
        version = next((p.split("==")[1] for p in torch_platform.pins.values()
                        if p.startswith("torch==")), "<torch's version>")
    return cross_build.CrossPaths(sysroot=sysroot.path, torch_site=str(site), torch_version=version,
                                  python_minor=recipe.cross.python_minor, scratch=str(scratch))


def ensure_wheel(recipe: WheelRecipe, cache: Path, log: Callable[[str], None] = print) -> EngineBuild:
    """The recipe's wheel, built first if no verified one is cached (a cross build's target venv, whose
    torch it links, first)."""
    sdist = fetch_sdist(recipe.sdist, cache, log)
    inputs = wheel_inputs(recipe, sdist, cache, log)
    key = wheel_key(recipe, inputs)
    torch_build = None
    if recipe.cross is not None:
        torch_build = target_venv.ensure_target_venv(recipe.cross.torch_venv, cache, log)

    def make(artifact: Path, log_path: Path) -> EngineBuild:
        started = time.monotonic()
        artifact.mkdir(parents=True)
        with open(log_path, "w") as out, contextlib.ExitStack() as held, \
                tempfile.TemporaryDirectory(prefix="servebench-wheel-", dir=scratch_root(cache)) as scratch:
            env = wheel_env(recipe, Path(scratch), cache)
            paths = None
            if recipe.cross is not None:   # its sysroot held: `builds gc` leaves it alone meanwhile
                arch = profile(recipe.cross.target).arch
                sysroot = held.enter_context(sysroot_in_use(arch, recipe.cross.python_minor, cache, log,
                                                            tuple(recipe.cross.sysroot_packages)))
                paths = cross_paths(recipe, cache, Path(scratch), log, torch_build, sysroot)
            for title, argv in wheel_steps(recipe, sdist, Path(scratch), artifact, paths):
                log(f"engine build {key}: {title}")
                if run_step(argv, out, log, title, started, env=env) != 0:
                    raise BuildError(f"engine build step '{title}' failed; see {log_path}")
        return wheel_record(recipe, inputs, key, artifact, round(time.monotonic() - started, 1))
    return verified_or_built(cache, key, make, log)


def built_wheel(build: EngineBuild) -> Path:
    """The wheel file of a wheel build."""
    wheels = sorted(Path(build.venv_path).glob("*.whl"))
    if len(wheels) != 1:
        raise BuildError(f"{build.venv_path}: expected one wheel, found {len(wheels)}")
    return wheels[0]


def wheel_record(recipe: WheelRecipe, inputs: dict, key: str, artifact: Path, seconds: float) -> EngineBuild:
    files = {path.name: file_sha256(path) for path in sorted(artifact.glob("*.whl"))}
    if len(files) != 1:
        raise BuildError(f"{recipe.sdist}: pip wheel left {len(files)} wheels in {artifact}, expected one")
    (name,) = files
    return EngineBuild(  # its own lineage for `builds gc --keep N`: a wheel never pushes out a venv
        key=key, engine=f"{recipe.engine}-wheel", engine_version=name.split("-")[1], packages=[recipe.sdist],
        python_version=inputs["python"], platform=f"linux-{inputs['arch']}", venv_path=str(artifact),
        pip_freeze="", build_seconds=seconds, created_at=datetime.now(timezone.utc),
        inputs=inputs | {"artifact_sha256": sha256_json(files), "files": files})


def wheel_requirements(wheel: Path, leave_out: Iterable[str] = ()) -> tuple[list[str], list[str]]:
    """(what to install with the wheel, what is left out and why) from its METADATA: the
    requirements that apply here (no extras, markers true), less the packages in `leave_out` and
    those pinned to a direct URL (vLLM's CPU wheel asks for triton-cpu from GitHub)."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(metadata).decode()
    keep, left_out = [], []
    excluded = {canonicalize_name(name) for name in leave_out}
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        raw = line.partition(":")[2].strip()
        try:
            requirement = Requirement(raw)
        except InvalidRequirement as error:
            raise BuildError(f"{wheel.name}: unreadable requirement {raw!r}: {error}") from error
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        if requirement.url:
            left_out.append(f"{raw} (a direct URL)")
        elif canonicalize_name(requirement.name) in excluded:
            left_out.append(f"{raw} (left out by the engine)")
        else:
            requirement.marker = None
            keep.append(str(requirement))
    return keep, left_out


def with_built_wheel(recipe: VenvRecipe, build: EngineBuild, log: Callable[[str], None] = print) -> VenvRecipe:
    """The engine venv's recipe once its wheel is built: the wheel's own requirements first, then
    the wheel itself (without resolving again), then the recipe's other packages (Ray)."""
    assert recipe.wheel is not None  # the recipe whose wheel `build` is
    wheel = built_wheel(build)
    keep, left_out = wheel_requirements(wheel, recipe.remove)
    for line in left_out:
        log(f"engine build: not installed with {wheel.name}: {line}")
    made = {name: build.inputs[name] for name in ("source_sha256", "compiler", "artifact_sha256", "patches",
                                                   "staged_sources", "build_env") if name in build.inputs}
    return recipe.model_copy(update={"wheel": None, "local_wheels": [str(wheel)],
                                     "packages": [*keep, *recipe.packages],
                                     "built_from": {"wheel_key": build.key, "sdist": recipe.wheel.sdist, **made}})


def with_cross_wheel(recipe: VenvRecipe, build: EngineBuild) -> VenvRecipe:
    """The target venv's recipe once its cross-compiled wheel is built: the wheel in place of the
    platform's main wheel (its METADATA says what the rest is, resolved for the target by
    target_venv.py), the wheel build's key parts as `built_from` (in the venv's key and its row)."""
    assert recipe.wheel is not None  # the recipe whose wheel `build` is
    parts = ("source_sha256", "compiler", "artifact_sha256", "patches", "staged_sources", "target", "compiler_flags")
    made = {name: build.inputs[name] for name in parts if name in build.inputs}
    return recipe.model_copy(update={"wheel": None, "local_wheels": [str(built_wheel(build))],
                                     "built_from": {"wheel_key": build.key, "sdist": recipe.wheel.sdist, **made}})
