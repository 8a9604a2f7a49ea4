"""How llama.cpp's tools are built: `llama-server` and `ggml-rpc-server`, compiled by CMake for a
target CPU profile (servebench/platform/targets.py) as static binaries, no venv: from the vendored
llama.cpp of the pinned llama-cpp-python sdist, or from a commit of a llama.cpp git repository.

The target is the campaign's `target:` (cross-compiled by the aarch64 compiler for an ARM one);
without it, `cpu: portable` is the architecture's common profile (x86-64-v3, what ggml's
GGML_NATIVE=OFF switches on by itself: AVX2, FMA, F16C; armv8-a on aarch64) and `cpu: native` (or
a git source) is this host's CPU. Every CMake flag is in the recipe, so it is part of the build
key: a changed flag builds anew, the same flags reuse the cache. Whatever python a node has runs
servebench's own tools there (the sampler, the load generator): the build brings none.
"""

from __future__ import annotations

from servebench.builds.cmake import compiler_names
from servebench.builds.prerequisites import Prerequisite, tool
from servebench.builds.recipe import CMakeRecipe, GitSource
from servebench.engines.llamacpp.spec import LlamaCppEngineSpec
from servebench.platform.targets import host_arch, is_cross, profile

TOOLS = ("llama-server", "ggml-rpc-server")
# a static build of the two tools: no tests, examples, web UI download or TLS library to link
TARGET_CMAKE_ARGS = ["-DGGML_RPC=ON", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
                     "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_OPENSSL=OFF"]
PORTABLE_TARGETS = {"x86_64": "x86-64-v3", "aarch64": "armv8-a"}


def target_of(spec: LlamaCppEngineSpec) -> str:
    """The target profile the spec's build is for."""
    if spec.target is not None:
        return spec.target
    if spec.cpu == "native" or spec.source is not None:
        return "native"
    return PORTABLE_TARGETS.get(host_arch(), "native")


def build_recipe(spec: LlamaCppEngineSpec, kind: str) -> CMakeRecipe:
    blas = ["-DGGML_BLAS=ON", "-DGGML_BLAS_VENDOR=OpenBLAS"] if spec.blas else []
    if spec.source is not None:  # a commit of a repository (the first of a commit axis for the engine's own)
        where = {"git": GitSource(repo=spec.source.git, commit=spec.source.commit or spec.source.commits[0]),
                 "source_subdir": spec.source.subdir}
    else:
        where = {"source": spec.package, "source_subdir": "vendor/llama.cpp"}
    return CMakeRecipe(engine=kind, **where, target=target_of(spec),
                       cmake_args=[*TARGET_CMAKE_ARGS, *blas, *spec.cmake_args], build_targets=list(TOOLS),
                       version_command=["bin/llama-server", "--version"])  # 'version: ... built with GNU 12.2.0'


def build_prerequisites(spec: LlamaCppEngineSpec) -> list[Prerequisite]:
    """A C++ compiler, CMake and ninja (git for a git source); for another architecture Debian's
    cross compiler (README command 2 installs it)."""
    checks = [tool("C++ compiler", "g++", "apt-get install g++")]
    if spec.source is not None:
        checks.append(tool("git", "git", "apt-get install git"))
    target = profile(target_of(spec))
    checks += [tool("cmake", "cmake", "apt-get install cmake", ["cmake", "--version"], "3.14"),
               tool("ninja", "ninja", "apt-get install ninja-build")]
    if is_cross(target):
        _, cxx_compiler = compiler_names(target)
        checks.append(tool(f"{target.arch} cross compiler", cxx_compiler,
                           f"apt-get install g++-{target.arch.replace('_', '-')}-linux-gnu"))
    return checks
