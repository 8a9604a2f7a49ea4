"""The `cmake` recipe's builder: a CMake project from a pinned sdist or a git commit, compiled for a
target CPU.

The sdist is fetched once from the package index into `<cache>/sources/` (sdist.py) and keyed by its sha256
(the source digest); a git commit is taken with `git archive` and keyed by its full hash
(`git_source.py`). The compiler is the host's for a target of this architecture, Debian's
`<arch>-linux-gnu-gcc` cross compiler for another; its id and version come from the compiler
itself. The artifact is `<key>/bin/<tool>` (static libraries, so a binary needs only libc and
libstdc++: the cross sysroot's under emulation, the node's own on a real ARM host), with a
sha256 of every file in the record so a copy can be verified before use.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from servebench.builds import git_source
from servebench.builds.cache import ArtifactCache, file_sha256
from servebench.builds.recipe import CMakeRecipe
from servebench.builds.sdist import fetch_sdist
from servebench.builds.venv import BuildError, EngineBuild, command_text, run_step
from servebench.config.campaign import sha256_json
from servebench.platform.cpu_features import cpuinfo_features
from servebench.platform.targets import TargetProfile, emulator_argv, is_cross, profile

# what every build of the recipe gets: Release, static, no tests/examples, no network at configure
BASE_CMAKE_ARGS = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF"]


def compiler_names(target: TargetProfile) -> tuple[str, str]:
    """(C, C++) compiler commands for the target: Debian's cross compilers for another architecture."""
    if is_cross(target):
        return f"{target.arch}-linux-gnu-gcc", f"{target.arch}-linux-gnu-g++"
    return "gcc", "g++"


def compiler_identity(command: str) -> dict[str, str]:
    """{'command', 'id', 'version'} as the compiler reports them ('GNU', '12.2.0')."""
    path = shutil.which(command)
    if path is None:
        raise BuildError(f"compiler {command} not found: apt-get install {_package_for(command)} (Debian package)")
    version = subprocess.run([path, "-dumpfullversion"], capture_output=True, text=True).stdout.strip()
    banner = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.splitlines()
    compiler_id = "GNU" if banner and ("gcc" in banner[0].lower() or "g++" in banner[0].lower()) else \
        (banner[0].split()[0] if banner else "unknown")
    return {"command": command, "id": compiler_id, "version": version}


def _package_for(command: str) -> str:
    if "-linux-gnu-" in command:
        arch = command.split("-linux-gnu-")[0]
        return f"g++-{arch.replace('_', '-')}-linux-gnu"
    return "g++"


class FetchedSource(NamedTuple):
    """A recipe's source on disk: the archive a build unpacks, what identifies it, how to name it."""

    archive: Path | None   # the sdist; None for a git commit (archived into the build's scratch directory)
    digest_field: str      # the key's field: 'source_sha256' (an sdist) or 'source_commit' (a git commit)
    digest: str
    label: str             # 'llama-cpp-python==0.3.36', 'git+/src/llama.cpp@<hash>'
    version: str           # the engine version of the build: the sdist's version, a commit's short hash


def fetch(recipe: CMakeRecipe, cache: Path, log: Callable[[str], None] = print) -> FetchedSource:
    if recipe.git is not None:
        commit = git_source.resolve(recipe.git.repo, recipe.git.commit, cache)
        return FetchedSource(None, "source_commit", commit, f"git+{recipe.git.repo}@{commit}", commit[:12])
    assert recipe.source is not None
    sdist = fetch_sdist(recipe.source, cache, log)
    return FetchedSource(sdist, "source_sha256", file_sha256(sdist), recipe.source, recipe.source.partition("==")[2])


def cmake_inputs(recipe: CMakeRecipe, fetched: FetchedSource) -> dict:
    """Everything that goes into the binaries; its hash is the build key. A git source keys on the
    commit, not on where the repository is: the same commit cloned elsewhere is the same build."""
    target = profile(recipe.target)
    c_compiler, cxx_compiler = compiler_names(target)
    return {
        "engine": recipe.engine,
        "recipe": "cmake",
        "source": recipe.source if recipe.git is None else "git",
        fetched.digest_field: fetched.digest,
        "source_subdir": recipe.source_subdir,
        "target": target.name,
        "arch": target.arch,
        "compiler_flags": list(target.compiler_flags),
        "features": list(target.features),
        "compiler": compiler_identity(cxx_compiler) | {"c": compiler_identity(c_compiler)["version"]},
        "options": [*BASE_CMAKE_ARGS, *target.cmake_args, *recipe.cmake_args],
        "build_targets": list(recipe.build_targets),
        "build_host": f"{sys.platform}-{platform.machine()}",
        # -march=native means this CPU: a cache shared by hosts of another CPU must not find the build
        **({"host_cpu_flags": sorted(cpuinfo_features(Path("/proc/cpuinfo").read_text()))}
           if target.name == "native" else {}),
    }


def cmake_key(recipe: CMakeRecipe, inputs: dict) -> str:
    return f"{recipe.engine}-{recipe.target}-{sha256_json(inputs)[:16]}"


PROJECT_DIR = "src"  # where every build's CMake project is, inside its scratch directory


def cmake_steps(recipe: CMakeRecipe, inputs: dict, project: Path, build: Path, artifact: Path,
                jobs: int) -> list[tuple[str, list[str]]]:
    """The build's commands in order (title, argv), from the unpacked CMake project on;
    `servebench build --dry-run` prints them."""
    target = profile(recipe.target)
    c_compiler, cxx_compiler = compiler_names(target)
    configure = ["cmake", "-S", str(project), "-B", str(build), "-G", "Ninja",
                 f"-DCMAKE_C_COMPILER={c_compiler}", f"-DCMAKE_CXX_COMPILER={cxx_compiler}", *inputs["options"]]
    if is_cross(target):
        configure += ["-DCMAKE_SYSTEM_NAME=Linux", f"-DCMAKE_SYSTEM_PROCESSOR={target.arch}"]
    return [
        ("configure", configure),
        ("compile", ["cmake", "--build", str(build), "-j", str(jobs), "--target", *recipe.build_targets]),
        ("install binaries", ["install", "-D", "-t", str(artifact / "bin"),
                              *(str(build / "bin" / name) for name in recipe.build_targets)]),
    ]


def build_jobs() -> int:
    """Parallel compile jobs: this process's CPUs (a 2-core machine builds with 2)."""
    return max(1, len(os.sched_getaffinity(0)))


def ensure_cmake_build(recipe: CMakeRecipe, cache: Path, log: Callable[[str], None] = print) -> EngineBuild:
    """Return the recipe's binaries, building them first if no valid artifact is cached."""
    fetched = fetch(recipe, cache, log)
    inputs = cmake_inputs(recipe, fetched)
    key = cmake_key(recipe, inputs)

    def make(artifact: Path, log_path: Path) -> EngineBuild:
        started = time.monotonic()
        _compile(recipe, inputs, fetched, artifact, log_path, key, log, cache)
        return _record(recipe, fetched, inputs, key, artifact, round(time.monotonic() - started, 1))
    return verified_or_built(cache, key, make, log)


def verified_or_built(cache: Path, key: str, make: Callable[[Path, Path], EngineBuild],
                      log: Callable[[str], None]) -> EngineBuild:
    """The artifact of `key` if its files are still as recorded (sha256), else `make(artifact dir, log
    path)` under the key's lock, its record written once it returns: the cmake and wheel builders' cache."""
    artifacts = ArtifactCache(cache / "engines")
    found = artifacts.get(key)
    if found is not None:
        build = EngineBuild.model_validate_json(found).model_copy(update={"build_seconds": None})
        if not (changed := verify_artifact(build)):
            return build
        log(f"engine build {key}: {', '.join(changed)} not as built (sha256): building again")
        artifacts.invalidate(key)
    with artifacts.building(key, log) as (artifact, found):
        if found is not None:
            return EngineBuild.model_validate_json(found).model_copy(update={"build_seconds": None})
        build = make(artifact, artifacts.log_path(key))
        artifacts.complete(key, build.model_dump_json(indent=2))
    return build


def compiler_cache_env(cache: Path, scratch: str) -> dict[str, str]:
    """ccache (when installed; ggml uses it by itself) in servebench's cache, with paths taken
    relative to the scratch directory: a second target's build of the same source reuses every
    object the target's flags do not touch (libllama, the server; only ggml-cpu gets -march), and
    since every project sits at `<scratch>/src` (an sdist's vendored tree and a git commit's alike),
    a commit whose files equal the sdist's reuses its objects too. It only speeds the build up: the
    output, and so the key, are the same without it."""
    if shutil.which("ccache") is None:
        return {}
    return {"CCACHE_DIR": str(cache / "ccache"), "CCACHE_BASEDIR": scratch, "CCACHE_NOHASHDIR": "1",
            "CCACHE_MAXSIZE": "5G"}


def _compile(recipe: CMakeRecipe, inputs: dict, fetched: FetchedSource, artifact: Path, log_path: Path, key: str,
             log: Callable[[str], None], cache: Path) -> None:
    with open(log_path, "w") as out, build_scratch(cache, log) as scratch:
        if recipe.git is not None:
            log(f"engine build {key}: git archive {fetched.digest}")
            source_archive = git_source.archive(recipe.git.repo, fetched.digest, cache, scratch / "tree")
        else:
            assert fetched.archive is not None
            source_archive = fetched.archive
        log(f"engine build {key}: unpacking {source_archive.name}")
        project = unpack_project(recipe, source_archive, scratch)
        started = time.monotonic()
        ccache = compiler_cache_env(cache, str(scratch))
        for title, argv in cmake_steps(recipe, inputs, project, scratch / "build", artifact, build_jobs()):
            log(f"engine build {key}: {title}")
            returncode = run_step(argv, out, log, title, started, env=ccache)
            if returncode != 0:
                raise BuildError(f"engine build step '{title}' failed (exit {returncode}); see {log_path}")


@contextlib.contextmanager
def build_scratch(cache: Path, log: Callable[[str], None]) -> Iterator[Path]:
    """The directory a cmake build compiles in: the same path for every build of this cache, one
    build at a time. ccache keys llama.cpp's unity-build files on their text, which holds the absolute
    paths of the files they include: in a new temporary directory each time every one of them missed,
    at a fixed path a second target or a further commit finds them. Emptied before a build and
    removed after it (a build killed midway leaves it for the next one to empty)."""
    name = hashlib.sha256(str(cache.resolve()).encode()).hexdigest()[:8]
    scratch = Path(tempfile.gettempdir()) / f"servebench-cmake-{name}"
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / "cmake-scratch.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another cmake build of {cache} to finish (one at a time: they share {scratch})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)


def unpack_project(recipe: CMakeRecipe, source_archive: Path, scratch: Path) -> Path:
    """Unpack the source and return its CMake project, always under `<scratch>/src`: a git commit's
    tree is archived with that prefix; an sdist's project (`source_subdir`, llama-cpp-python's
    `vendor/llama.cpp`) is moved there, so the same file compiles from the same relative path."""
    unpacked = scratch / "unpacked"
    with tarfile.open(source_archive) as archive:
        archive.extractall(unpacked, filter="data")
    roots = [path for path in unpacked.iterdir() if path.is_dir()]
    if len(roots) != 1:
        raise BuildError(f"{source_archive.name} does not hold one top directory")
    if recipe.git is not None:  # src/ is the repository; the project may be a folder inside it
        roots[0].rename(scratch / PROJECT_DIR)
        project = scratch / PROJECT_DIR / recipe.source_subdir if recipe.source_subdir else scratch / PROJECT_DIR
    else:
        inside = roots[0] / recipe.source_subdir if recipe.source_subdir else roots[0]
        if inside.is_dir():
            inside.rename(scratch / PROJECT_DIR)
        project = scratch / PROJECT_DIR
    if not (project / "CMakeLists.txt").is_file():
        raise BuildError(f"{source_archive.name}: no CMakeLists.txt in {recipe.source_subdir or 'its top directory'}")
    return project


def _record(recipe: CMakeRecipe, fetched: FetchedSource, inputs: dict, key: str, artifact: Path,
            seconds: float) -> EngineBuild:
    target = profile(recipe.target)
    files = {str(path.relative_to(artifact)): file_sha256(path)
             for path in sorted(artifact.rglob("*")) if path.is_file()}
    version = None
    if recipe.version_command:
        # `--version` only prints: under emulation it runs on qemu's most capable CPU, whatever the target
        runner = emulator_argv(target.model_copy(update={"emulator_cpu": "max"})) if is_cross(target) else []
        version = command_text(runner + [str(artifact / recipe.version_command[0]), *recipe.version_command[1:]])
    return EngineBuild(
        key=key, engine=recipe.engine, engine_version=fetched.version, packages=[fetched.label],
        python_version="", platform=f"linux-{target.arch}", venv_path=str(artifact), pip_freeze="",
        build_seconds=seconds, created_at=datetime.now(timezone.utc),
        inputs=inputs | {"artifact_sha256": sha256_json(files), "files": files}, tool_version=version)


def verify_artifact(build: EngineBuild) -> list[str]:
    """Files of the artifact whose sha256 is not the recorded one (or that are gone)."""
    files = build.inputs.get("files") or {}
    root = Path(build.venv_path)
    return [name for name, digest in files.items()
            if not (root / name).is_file() or file_sha256(root / name) != digest]
