"""How llama.cpp's tools are built: an ordinary pip install of the llama-cpp-python sdist, compiled
by CMake through scikit-build-core, with the tools (llama-server, ggml-rpc-server) installed into
the venv's bin (../shared/docs/vllm-cpu-facts.md, "llama.cpp"). With a `target:` CPU profile, the
same sdist's vendored llama.cpp is compiled by CMake directly for that CPU (by the aarch64 cross
compiler for an ARM target): static binaries, no venv. With a git `source:`, a commit of a llama.cpp
repository is compiled the same way (for this CPU unless a target is given).

Every CMake flag is in the recipe's `build_env`, so it is part of the build key: a changed flag
builds anew, the same flags reuse the cache. A native build also keys on this host's CPU flags.
"""

from __future__ import annotations

from pathlib import Path

from servebench.build.cmake import compiler_names
from servebench.build.cpu_features import cpuinfo_features
from servebench.build.prerequisites import Prerequisite, tool
from servebench.build.recipe import CMakeRecipe, GitSource, VenvRecipe
from servebench.build.targets import is_cross, profile
from servebench.engines.llamacpp.spec import LlamaCppEngineSpec

# Tools are off when llama.cpp is a subproject (it is, in llama-cpp-python); LLAVA_BUILD=OFF avoids a
# configure clash; the prebuilt web UI would be a download; RPATH makes the tools find libllama/libggml.
BASE_CMAKE_ARGS = ["-DGGML_RPC=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_SERVER=ON",
                   "-DLLAMA_TOOLS_INSTALL=ON", "-DLLAVA_BUILD=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
                   "-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib"]
# pip's wheel cache ignores CMAKE_ARGS, so it must not be used; the data dir puts bin/ in the venv's bin.
PIP_OPTIONS = ["--no-binary", "llama-cpp-python", "--no-cache-dir",
               "--config-settings=wheel.install-dir=${SKBUILD_DATA_DIR}"]
TOOLS = ("llama-server", "ggml-rpc-server")
# On a node that is not this host the node sampler (servebench/telemetry/node_sampler.py) runs with the
# engine build's python, and needs psutil, which llama-cpp-python does not bring (vLLM does).
SAMPLER_PACKAGE = "psutil==7.2.2"


def cmake_args(spec: LlamaCppEngineSpec) -> list[str]:
    args = [*BASE_CMAKE_ARGS, f"-DGGML_NATIVE={'ON' if spec.cpu == 'native' else 'OFF'}"]
    if spec.blas:
        args += ["-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=OpenBLAS"]
    return args + list(spec.cmake_args)


def host_cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """This CPU's feature flags (x86 'flags', aarch64 'Features'), sorted."""
    return sorted(cpuinfo_features(cpuinfo.read_text()))


# a static build of the two tools: no tests, examples, web UI download or TLS library to link
TARGET_CMAKE_ARGS = ["-DGGML_RPC=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                     "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF"]


def build_recipe(spec: LlamaCppEngineSpec, kind: str) -> VenvRecipe | CMakeRecipe:
    if spec.build_target is not None:
        blas = ["-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=OpenBLAS"] if spec.blas else []
        if spec.source is not None:  # a commit of a repository (the first of a commit axis for the engine's own)
            where = {"git": GitSource(repo=spec.source.git, commit=spec.source.commit or spec.source.commits[0]),
                     "source_subdir": spec.source.subdir}
        else:
            where = {"source": spec.package, "source_subdir": "vendor/llama.cpp"}
        return CMakeRecipe(engine=kind, **where, target=spec.build_target,
                           cmake_args=[*TARGET_CMAKE_ARGS, *blas, *spec.cmake_args], build_targets=list(TOOLS),
                           version_command=["bin/llama-server", "--version"])
    distribution = spec.package.split("==")[0].strip()
    return VenvRecipe(
        engine=kind, packages=[spec.package, SAMPLER_PACKAGE], pip_options=list(PIP_OPTIONS),
        build_env={"CMAKE_ARGS": " ".join(cmake_args(spec))},
        host_cpu_flags=host_cpu_flags() if spec.cpu == "native" else [],
        version_distribution=distribution, engine_package=False,
        version_command=["bin/llama-server", "--version"],  # 'version: ... commit 0c1e570 built with GNU 12.2.0'
    )


def build_prerequisites(spec: LlamaCppEngineSpec) -> list[Prerequisite]:
    """A host build needs a C++ compiler (pip brings CMake); a target build also CMake and ninja, and
    for another architecture Debian's cross compiler (README command 2 installs it)."""
    checks = [tool("C++ compiler", "g++", "apt-get install g++")]
    if spec.build_target is None:
        return checks
    if spec.source is not None:
        checks.append(tool("git", "git", "apt-get install git"))
    target = profile(spec.build_target)
    checks += [tool("cmake", "cmake", "apt-get install cmake", ["cmake", "--version"], "3.14"),
               tool("ninja", "ninja", "apt-get install ninja-build")]
    if is_cross(target):
        _, cxx_compiler = compiler_names(target)
        checks.append(tool(f"{target.arch} cross compiler", cxx_compiler,
                           f"apt-get install g++-{target.arch.replace('_', '-')}-linux-gnu"))
    return checks
