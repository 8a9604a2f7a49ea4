"""vLLM from source for this CPU, or cross-compiled for an aarch64 target profile:
the wheel recipe, and what the build host must have before an hour-long build starts.

What the build needs: vLLM 0.32.0's CMake refuses gcc < 12.3 on x86 (Debian 12 has 12.2: the
shipped patch `gcc-12.2-x86` relaxes the check), needs libnuma's headers and Python's, and fetches
oneDNN (x86 and aarch64) and the Arm Compute Library (aarch64) from GitHub at configure time unless
they are staged locally. A host that cannot reach GitHub stages oneDNN; a host that can (an online
Graviton) stages nothing: the preflight probes the repository and says "fetched at configure time".
cmake and ninja come from pip into the build venv (the sdist's `requirements/build/cpu.txt`, with
the pinned CPU torch). A wheel on 2 cores takes about an hour (docs/builds.md has the measurement).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import sysconfig
from pathlib import Path

from servebench.builds import cross
from servebench.builds.cache import ArtifactCache
from servebench.builds.prerequisites import (
    Prerequisite,
    RemoteSource,
    fetchable_source,
    file_present,
    free_disk,
    github_mirror_env,
    memory_for_jobs,
    staged,
    tool,
)
from servebench.builds.recipe import CrossCompile, VenvRecipe, WheelRecipe
from servebench.builds.venv import BuildError
from servebench.engines.vllm.spec import VllmSourceSpec
from servebench.platform.sysroot import SysrootError, candidate_versions, check_foreign_arch, debian_arch
from servebench.platform.targets import profile

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

# Cross-compiling for aarch64 (docs/builds.md, "vLLM from source for aarch64"): the patch that makes
# vLLM's CMake take the target's CPU (it reads the build host's /proc/cpuinfo) and the target torch's
# libgomp, and hands the toolchain to ACL's own CMake; the patch that builds oneDNN without ACL (opt-in:
# for a host that cannot get ACL's source); the Debian packages the build sysroot adds.
CROSS_PATCH = "aarch64-cross"
WITHOUT_ACL_PATCH = "aarch64-without-acl"
CROSS_SYSROOT_PACKAGES = ("libnuma-dev", "libpython{minor}-dev")
CROSS_PYTHON_MINOR = "3.11"      # the target venv's CPython (PyPI's aarch64 wheels for cp311)


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


def build_arch(source: VllmSourceSpec, arch: str | None = None) -> str:
    """The architecture the wheel is for: the source's target's, else this host's."""
    return profile(source.target).arch if source.target else (arch or platform.machine())


def uses_acl(source: VllmSourceSpec, arch: str) -> bool:
    """vLLM's CMake builds oneDNN on ACL on aarch64, unless the patch `aarch64-without-acl` is applied."""
    return arch == "aarch64" and WITHOUT_ACL_PATCH not in source.patches


def patch_names(source: VllmSourceSpec) -> list[str]:
    """The source's patches, and for a cross build `aarch64-cross` (it cannot build without)."""
    return [*source.patches, *([CROSS_PATCH] if source.target and CROSS_PATCH not in source.patches else [])]


def sysroot_packages(minor: str = CROSS_PYTHON_MINOR) -> list[str]:
    return [name.format(minor=minor) for name in CROSS_SYSROOT_PACKAGES]


def cross_compile_env(source: VllmSourceSpec) -> dict[str, str]:
    """vLLM's compile step for the target (cross.expand fills the places in): CMake's toolchain, the
    target torch's config and the target Python's headers (CMAKE_ARGS, which setup.py passes on), the
    target's cpuinfo and -march, its bf16/i8mm switches (cmake/cpu_extension.cmake's own, for
    cross-compiling), the target torch's directory (its libgomp) and the target's machine (setup.py
    picks the extensions by `platform.machine()`: x86's _C_AVX512 and _C_AVX2 are not targets of an
    aarch64 configure; and it bundles this host's tcmalloc); the last three through patch `aarch64-cross`."""
    assert source.target is not None
    target = profile(source.target)
    cmake_args = ["-DCMAKE_TOOLCHAIN_FILE={files}/toolchain.cmake", "-DTorch_DIR={files}/torch",
                  "-DPython_INCLUDE_DIR={sysroot}/usr/include/python{python_minor}"]
    env = {"CMAKE_ARGS": " ".join(cmake_args), "VLLM_CPU_CPUINFO": "{files}/cpuinfo",
           "VLLM_CPU_ARM_MARCH": cross.march(target), "VLLM_TORCH_PACKAGE_DIR": "{torch_site}/torch",
           "VLLM_CROSS_TARGET_MACHINE": target.arch}
    if "bf16" in target.features:
        env["VLLM_CPU_ARM_BF16"] = "1"
    if "i8mm" in target.features:
        env["VLLM_CPU_ARM_I8MM"] = "1"
    return env


def wheel_recipe(source: VllmSourceSpec, arch: str | None = None,
                 torch_venv: VenvRecipe | None = None) -> WheelRecipe:
    """The sdist compiled for this CPU against the pinned CPU torch, with the staged trees and patches;
    with `source.target`, cross-compiled for that profile against the torch of `torch_venv` (the
    target venv of the prebuilt wheel, whose torch the aarch64 vLLM runs with). A tree that is not
    staged is left out, so vLLM's CMake fetches it (the preflight found its repository reachable);
    then the build's git goes where the probe went (SERVEBENCH_GITHUB_URL's mirror, if set, is in the
    build environment and so in the key)."""
    arch = build_arch(source, arch)
    trees = {"FETCHCONTENT_SOURCE_DIR_ONEDNN": (source.onednn_dir, ONEDNN_MARKER)}
    if uses_acl(source, arch):
        trees["ACL_ROOT_DIR"] = (source.acl_dir, ACL_MARKER)
    staged_sources = {name: str(Path(path)) for name, (path, marker) in trees.items()
                      if path is not None and staged(path, marker)}  # (staged() is False for None too)
    fetched = len(staged_sources) < len(trees)
    cross_compile = None
    if source.target is not None:
        if torch_venv is None:
            raise ValueError("a cross-compiled vLLM needs the target venv whose torch it links")
        cross_compile = CrossCompile(target=source.target, torch_venv=torch_venv, sysroot_packages=sysroot_packages(),
                                     python_minor=CROSS_PYTHON_MINOR, compile_env=cross_compile_env(source))
    return WheelRecipe(engine="vllm", sdist=source.sdist,
                       build_requirements=[source.torch, f"-r {BUILD_REQUIREMENTS}"],
                       build_env={"VLLM_TARGET_DEVICE": "cpu", "MAX_JOBS": str(source.jobs),
                                  **(github_mirror_env(os.environ) if fetched else {})},
                       staged_sources=staged_sources,
                       patches=[str(patch_path(name).resolve()) for name in patch_names(source)],
                       cross=cross_compile)


def debian_packages(name: str, arch: str, packages: list[str]) -> Prerequisite:
    """apt can fetch these packages for `arch` (dpkg knows the architecture, apt has a candidate):
    what a cross build's sysroot adds (nothing is installed on this host)."""
    try:
        check_foreign_arch(arch)
        versions = candidate_versions(packages, f":{debian_arch(arch)}")
    except SysrootError as error:
        return Prerequisite(name=name, met=False, found=str(error)[:300], needed=", ".join(packages),
                            fix=f"dpkg --add-architecture {debian_arch(arch)} && apt-get update")
    return Prerequisite(name=name, met=True, needed=", ".join(packages),
                        found="apt has " + ", ".join(f"{p} {v}" for p, v in versions.items())
                        + " (unpacked into the sysroot)")


def source_prerequisites(source: VllmSourceSpec, cache: Path, arch: str | None = None) -> list[Prerequisite]:
    """Every prerequisite of building `source` on this host, met or not (for its target, when it has one)."""
    arch = build_arch(source, arch)
    floor = compiler_floor(source, arch)
    if source.target is not None:   # Debian's cross compiler; numa.h and Python.h from arm64 .debs
        compiler = cross.compilers(profile(source.target))[1]
        checks = [
            tool("C++ cross compiler", compiler, f"apt-get install g++-{arch.replace('_', '-')}-linux-gnu",
                 [compiler, "-dumpfullversion"], floor),
            debian_packages(f"{arch} headers and libraries (libnuma, Python)", arch, sysroot_packages()),
        ]
    else:
        checks = [
            tool("C++ compiler", "g++", "apt-get install g++ (Debian 12: 12.2; with the patch gcc-12.2-x86 that is "
                 "enough)", ["g++", "-dumpfullversion"], floor),
            file_present("libnuma headers", Path("/usr/include/numa.h"), "apt-get install libnuma-dev"),
            file_present("Python headers", Path(sysconfig.get_paths()["include"]) / "Python.h",
                         "the Python development headers (apt-get install python3-dev, or a full pyenv build)"),
        ]
    checks.append(fetchable_source("oneDNN source", source.onednn_dir, ONEDNN_MARKER,
                                   ONEDNN_AARCH64 if arch == "aarch64" else ONEDNN_X86,
                                   "stage oneDNN v3.13 (x86) or the pinned commit 9c5be1cc (aarch64) and give "
                                   "`source.onednn_dir`"))
    if uses_acl(source, arch):
        checks.append(fetchable_source("Arm Compute Library source", source.acl_dir, ACL_MARKER, ACL,
                                       "stage ComputeLibrary v52.6.0 (oneDNN's pin needs ACL >= 52.4) and give "
                                       f"`source.acl_dir`, or build without ACL (patch {WITHOUT_ACL_PATCH})"))
    checks += [file_present(f"patch {name}", patch_path(name), "a shipped patch name or an existing file")
               for name in patch_names(source)]
    if source.patches:
        checks.append(tool("patch", "patch", "apt-get install patch"))
    checks += [pip_finds("torch pin", source.torch), pip_finds("cmake", "cmake>=3.26.1"), pip_finds("ninja", "ninja"),
               free_disk("free disk", cache, DISK_GIB),
               memory_for_jobs(source.jobs, GIB_PER_JOB)]
    return checks


def target_torch(torch_venv: VenvRecipe, cache: Path) -> Prerequisite:
    """The target venv whose torch a cross build links: found in the cache, or built first (pip resolves
    it for the target's platform: minutes, ~6 GB with PyPI's aarch64 torch and its CUDA wheels)."""
    from servebench.builds import target_venv
    platform = torch_venv.platform
    assert platform is not None, "a target venv's recipe has its platform (VllmEngine.target_torch_recipe)"
    try:
        key = target_venv.inputs_and_key(torch_venv, cache, lambda _: None)[1]
    except (SysrootError, OSError, BuildError) as error:   # BuildError: a way this host cannot take (one line)
        return Prerequisite(name="target torch", met=False, found=str(error)[:300],
                            needed=f"a {platform.arch} venv with {platform.pins.get('torch')}",
                            fix=f"dpkg --add-architecture {debian_arch(platform.arch)} && apt-get update")
    found = ArtifactCache(cache / "engines").get(key) is not None
    venv_dir = cache / "engines" / key
    return Prerequisite(name="target torch", met=True, needed=f"{platform.pins.get('torch')} for "
                        f"{platform.arch}",
                        found=f"{venv_dir} (built)" if found else f"{venv_dir}: built first (the prebuilt wheel's "
                        f"{platform.arch} venv, ~6 GB)")
