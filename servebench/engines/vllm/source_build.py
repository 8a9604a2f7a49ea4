"""vLLM from source for this CPU (seed 004's path): the wheel recipe, and what the build host must
have before an hour-long build starts.

Measured on this machine kind (issue 17): vLLM 0.32.0's CMake refuses gcc < 12.3 on x86 (Debian
12 has 12.2: the shipped patch `gcc-12.2-x86` relaxes the check), needs libnuma's headers and
Python's, and fetches oneDNN (x86 and aarch64) and the Arm Compute Library (aarch64) from GitHub
at configure time unless they are staged locally. These machines cannot reach GitHub, so here
oneDNN is staged; a host that can reach it (an online Graviton, seed 004) stages nothing: the
preflight probes the repository and says "fetched at configure time". cmake and ninja come from
pip into the build venv (the sdist's `requirements/build/cpu.txt`, with the pinned CPU torch). A
wheel on 2 cores takes about an hour (docs/builds.md has the measurement).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import sysconfig
from pathlib import Path

from servebench.build.prerequisites import (Prerequisite, RemoteSource, fetchable_source, file_present, free_disk,
                                            github_mirror_env, memory_for_jobs, staged, tool)
from servebench.build.recipe import WheelRecipe
from servebench.engines.vllm.spec import VllmSourceSpec

PATCH_DIR = Path(__file__).parent / "patches"
GIB_PER_JOB = 2.5        # vLLM's CPU kernels (oneDNN, the AVX-512/AMX files) at -O2: the largest units
BUILD_REQUIREMENTS = "requirements/build/cpu.txt"  # in the sdist: cmake, ninja, setuptools, ...
DISK_GIB = 20.0          # sdist, oneDNN build, torch, the wheel and pip's temporary copies

# What vLLM 0.32.0's cmake/cpu_extension.cmake clones when a source is not staged (FetchContent):
# oneDNN's tag on x86, a pinned commit on aarch64 (a full clone: GIT_SHALLOW FALSE), and ACL's tag.
# Another sdist may pin other refs of the same repositories; the probe is about reaching them.
ONEDNN_X86 = RemoteSource(repository="https://github.com/oneapi-src/oneDNN.git", ref="v3.13")
ONEDNN_AARCH64 = RemoteSource(repository="https://github.com/oneapi-src/oneDNN.git",
                              ref="9c5be1cc59e368aebf0909e6cf20f981ea61462a")
ACL = RemoteSource(repository="https://github.com/ARM-software/ComputeLibrary.git", ref="v52.6.0")
ONEDNN_MARKER = "CMakeLists.txt"
ACL_MARKER = "SConstruct"


def patch_path(name: str) -> Path:
    """A shipped patch by name, or a path."""
    shipped = PATCH_DIR / f"{name}.patch"
    return shipped if shipped.exists() else Path(name)


def compiler_floor(source: VllmSourceSpec, arch: str) -> str:
    """The g++ version vLLM's CMake accepts: 12.3 on x86, 12.2 with the shipped patch."""
    if arch in ("x86_64", "amd64"):
        return "12.2" if "gcc-12.2-x86" in source.patches else "12.3"
    return "12"


def pip_finds(name: str, requirement: str) -> Prerequisite:
    """pip (with this host's index configuration) finds what the build venv installs, without installing."""
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--ignore-installed",
                           "--quiet", "--disable-pip-version-check", requirement], capture_output=True, text=True,
                          timeout=300)
    return Prerequisite(name=name, met=done.returncode == 0,
                        found=f"pip finds {requirement}" if done.returncode == 0
                        else (done.stderr.strip().splitlines() or ["not found"])[-1][:200],
                        needed=requirement, fix="a PyPI mirror or a local wheel directory with it (pip find-links)")


def wheel_recipe(source: VllmSourceSpec, arch: str | None = None) -> WheelRecipe:
    """The sdist compiled for this CPU against the pinned CPU torch, with the staged trees and patches.
    A tree that is not staged is left out, so vLLM's CMake fetches it (the preflight found its
    repository reachable); then the build's git goes where the probe went (SERVEBENCH_GITHUB_URL's
    mirror, if set, is in the build environment and so in the key)."""
    arch = arch or platform.machine()
    trees = {"FETCHCONTENT_SOURCE_DIR_ONEDNN": (source.onednn_dir, ONEDNN_MARKER)}
    if arch == "aarch64":
        trees["ACL_ROOT_DIR"] = (source.acl_dir, ACL_MARKER)
    staged_sources = {name: str(Path(path)) for name, (path, marker) in trees.items() if staged(path, marker)}
    fetched = len(staged_sources) < len(trees)
    return WheelRecipe(engine="vllm", sdist=source.sdist,
                       build_requirements=[source.torch, f"-r {BUILD_REQUIREMENTS}"],
                       build_env={"VLLM_TARGET_DEVICE": "cpu", "MAX_JOBS": str(source.jobs),
                                  **(github_mirror_env(os.environ) if fetched else {})},
                       staged_sources=staged_sources,
                       patches=[str(patch_path(name).resolve()) for name in source.patches])


def source_prerequisites(source: VllmSourceSpec, cache: Path, arch: str | None = None) -> list[Prerequisite]:
    """Every prerequisite of building `source` on this host, met or not."""
    arch = arch or platform.machine()
    floor = compiler_floor(source, arch)
    checks = [
        tool("C++ compiler", "g++", "apt-get install g++ (Debian 12: 12.2; with the patch gcc-12.2-x86 that is enough)",
             ["g++", "-dumpfullversion"], floor),
        file_present("libnuma headers", Path("/usr/include/numa.h"), "apt-get install libnuma-dev"),
        file_present("Python headers", Path(sysconfig.get_paths()["include"]) / "Python.h",
                     "the Python development headers (apt-get install python3-dev, or a full pyenv build)"),
        fetchable_source("oneDNN source", source.onednn_dir, ONEDNN_MARKER,
                         ONEDNN_AARCH64 if arch == "aarch64" else ONEDNN_X86,
                         "stage oneDNN v3.13 (x86) or the pinned commit (aarch64) and give `source.onednn_dir`"),
    ]
    if arch == "aarch64":
        checks.append(fetchable_source("Arm Compute Library source", source.acl_dir, ACL_MARKER, ACL,
                                       "stage ComputeLibrary v52.6.0 and give `source.acl_dir`"))
    checks += [file_present(f"patch {name}", patch_path(name), "a shipped patch name or an existing file")
               for name in source.patches]
    if source.patches:
        checks.append(tool("patch", "patch", "apt-get install patch"))
    checks += [pip_finds("torch pin", source.torch), pip_finds("cmake", "cmake>=3.26.1"), pip_finds("ninja", "ninja"),
               free_disk("free disk", cache, DISK_GIB),
               memory_for_jobs(source.jobs, GIB_PER_JOB)]
    return checks
