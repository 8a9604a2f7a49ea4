"""A Python extension cross-compiled for a target profile of another architecture: what the `wheel`
recipe (wheel.py) adds when its `cross` says so (vLLM from source for Graviton on an x86 host).

Four things stand in for what a native build would find on the machine itself, each written into the
build's scratch directory and named in the key's inputs or the dry run's commands:
- **a CMake toolchain** for Debian's `<arch>-linux-gnu` cross compiler, whose sysroot is the target's
  Debian userland with the build's headers and link libraries added (sysroot.py's closure of
  `libnuma-dev` and `libpython3.X-dev` besides the runtime: numa.h, libnuma.so, Python.h and the
  target's pyconfig.h), the profile's `-march` as the initial C and C++ flags;
- **torch for the target**: the site-packages of the target-architecture venv (target_venv.py: PyPI's
  aarch64 torch) through a small `TorchConfig.cmake` of its headers and `libtorch`/`libtorch_cpu`/
  `libc10`. The wheel's own config cannot be used: PyPI's aarch64 torch 2.13.0 is a CUDA build and its
  Caffe2Config requires the CUDA toolkit (`Your installed Caffe2 version uses CUDA but I cannot find
  the CUDA libraries`), which a CPU extension does not link;
- **the target's /proc/cpuinfo**: the profile's Linux feature names in aarch64 Linux's format
  (emulation.cpuinfo_text), for a project whose CMake reads the CPU's features from the build host
  (vLLM's `cmake/cpu_extension.cmake`; its patch `aarch64-cross` reads `VLLM_CPU_CPUINFO` instead);
- **the build step's environment**: `_PYTHON_HOST_PLATFORM` (the wheel's platform tag is the
  target's, not `linux_x86_64`), `CARGO_BUILD_TARGET` (an optional Rust part is built for the target
  or not at all, never for this host), and the project's switches for the target's ISA.

Only the step that compiles gets that environment: pip installing the build venv's requirements in the
same environment would resolve wheels for the target (`_PYTHON_HOST_PLATFORM` changes pip's tags).
"""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel

from servebench.platform.emulation import cpuinfo_text
from servebench.platform.targets import TargetProfile

CROSS_DIR = "cross"                 # inside the build's scratch directory
RUST_TARGETS = {"aarch64": "aarch64-unknown-linux-gnu"}


class CrossPaths(BaseModel):
    """Where a cross build's inputs are on this host (the build's context, not its key: the key names
    the sysroot by its package list and the torch venv by its key)."""

    sysroot: str          # the target userland with the build packages
    torch_site: str       # the target venv's site-packages holding torch
    torch_version: str    # as installed there ('2.13.0')
    python_minor: str     # the target CPython's minor version ('3.11')
    scratch: str          # the build's scratch directory (the files are written to <scratch>/cross)


def files_dir(paths: CrossPaths) -> Path:
    return Path(paths.scratch) / CROSS_DIR


def compilers(target: TargetProfile) -> tuple[str, str]:
    """(C, C++) cross compilers for the target: Debian's gcc-<arch>-linux-gnu packages."""
    return f"{target.arch}-linux-gnu-gcc", f"{target.arch}-linux-gnu-g++"


def march(target: TargetProfile) -> str:
    """The profile's -march flag (every aarch64 profile has one)."""
    flags = [flag for flag in target.compiler_flags if flag.startswith("-march=")]
    if len(flags) != 1:
        raise ValueError(f"target {target.name} has no single -march flag: {target.compiler_flags}")
    return flags[0]


def toolchain_text(target: TargetProfile, sysroot: str) -> str:
    """A CMake toolchain file for the target: Debian's cross compilers, the sysroot (its headers and
    libraries; the cross compiler's own libc and libstdc++ are not in it and are found as always), and
    the profile's flags. Libraries, headers and packages given by absolute path (torch's) are found
    too (BOTH), programs only on this host."""
    c_compiler, cxx_compiler = compilers(target)
    flags = " ".join(target.compiler_flags)
    return (f"# servebench (servebench/builds/cross.py): cross-compiling for {target.name} ({target.description})\n"
            f"set(CMAKE_SYSTEM_NAME Linux)\n"
            f"set(CMAKE_SYSTEM_PROCESSOR {target.arch})\n"
            f"set(CMAKE_C_COMPILER {c_compiler})\n"
            f"set(CMAKE_CXX_COMPILER {cxx_compiler})\n"
            f"set(CMAKE_SYSROOT {sysroot})\n"
            f"set(CMAKE_FIND_ROOT_PATH {sysroot} /usr/{target.arch}-linux-gnu)\n"
            f"set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)\n"
            f"set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)\n"
            f"set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)\n"
            f"set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)\n"
            f'set(CMAKE_C_FLAGS_INIT "{flags}")\n'
            f'set(CMAKE_CXX_FLAGS_INIT "{flags}")\n')


def torch_config_text(torch_site: str, arch: str) -> str:
    """TorchConfig.cmake for a CPU extension against the target's torch wheel: its headers, and
    libtorch, libtorch_cpu and libc10 as imported libraries (what TorchConfig's `torch` target gives a
    CPU build), without the wheel's CUDA requirements."""
    prefix = Path(torch_site) / "torch"
    return (f"# servebench (servebench/builds/cross.py): torch for {arch} from {torch_site}, CPU libraries only\n"
            f'set(TORCH_INSTALL_PREFIX "{prefix}")\n'
            'set(TORCH_INCLUDE_DIRS "${TORCH_INSTALL_PREFIX}/include" '
            '"${TORCH_INSTALL_PREFIX}/include/torch/csrc/api/include")\n'
            "add_library(c10 SHARED IMPORTED)\n"
            'set_target_properties(c10 PROPERTIES IMPORTED_LOCATION "${TORCH_INSTALL_PREFIX}/lib/libc10.so")\n'
            "add_library(torch_cpu SHARED IMPORTED)\n"
            "set_target_properties(torch_cpu PROPERTIES\n"
            '    IMPORTED_LOCATION "${TORCH_INSTALL_PREFIX}/lib/libtorch_cpu.so" INTERFACE_LINK_LIBRARIES c10)\n'
            "add_library(torch SHARED IMPORTED)\n"
            'set_target_properties(torch PROPERTIES IMPORTED_LOCATION "${TORCH_INSTALL_PREFIX}/lib/libtorch.so"\n'
            '    INTERFACE_INCLUDE_DIRECTORIES "${TORCH_INCLUDE_DIRS}" INTERFACE_LINK_LIBRARIES "torch_cpu;c10"\n'
            "    CXX_STANDARD 20)\n"
            'set(TORCH_LIBRARY "${TORCH_INSTALL_PREFIX}/lib/libtorch.so")\n'
            "set(TORCH_LIBRARIES torch)\n"
            "set(Torch_FOUND TRUE)\n")


def torch_config_version_text(version: str) -> str:
    return (f'set(PACKAGE_VERSION "{version}")\n'
            "set(PACKAGE_VERSION_COMPATIBLE TRUE)\n"
            'if("${PACKAGE_FIND_VERSION}" STREQUAL "${PACKAGE_VERSION}")\n'
            "  set(PACKAGE_VERSION_EXACT TRUE)\n"
            "endif()\n")


def target_cpuinfo(target: TargetProfile) -> str:
    """/proc/cpuinfo as the target's Linux writes it, with the profile's features (its CPU ids are not
    known without the chip: 0)."""
    return cpuinfo_text(set(target.features), 0, 1)


def cross_files(target: TargetProfile, paths: CrossPaths) -> dict[Path, str]:
    """The files a cross build reads, by path: toolchain, torch's config, the target's cpuinfo."""
    where = files_dir(paths)
    return {where / "toolchain.cmake": toolchain_text(target, paths.sysroot),
            where / "torch" / "TorchConfig.cmake": torch_config_text(paths.torch_site, target.arch),
            where / "torch" / "TorchConfigVersion.cmake": torch_config_version_text(paths.torch_version),
            where / "cpuinfo": target_cpuinfo(target)}


def write_file_argv(path: Path, text: str) -> list[str]:
    """A command that writes `text` to `path` (a build step, so the dry run shows the file's text)."""
    return [sys.executable, "-c", "import pathlib, sys; p = pathlib.Path(sys.argv[1]); "
            "p.parent.mkdir(parents=True, exist_ok=True); p.write_text(sys.argv[2])", str(path), text]


def expand(template: str, paths: CrossPaths) -> str:
    """A recipe's environment value with the build's places filled in: {files} (the toolchain, torch's
    config and the cpuinfo), {sysroot}, {torch_site}, {python_minor}."""
    return template.format(files=files_dir(paths), sysroot=paths.sysroot, torch_site=paths.torch_site,
                           python_minor=paths.python_minor)


def compile_env(target: TargetProfile, paths: CrossPaths, templates: dict[str, str]) -> dict[str, str]:
    """The compile step's environment: the recipe's variables (templates expanded), the wheel's
    platform tag (`_PYTHON_HOST_PLATFORM`: setuptools tags it `linux_<arch>`, not this host's) and
    Rust's target (`CARGO_BUILD_TARGET`: an optional Rust part is built for the target or not at all)."""
    return {"_PYTHON_HOST_PLATFORM": f"linux-{target.arch}",
            "CARGO_BUILD_TARGET": RUST_TARGETS.get(target.arch, f"{target.arch}-unknown-linux-gnu"),
            **{name: expand(value, paths) for name, value in templates.items()}}


def env_argv(env: dict[str, str], argv: list[str]) -> list[str]:
    """`env VAR=value ... argv`: one step's own environment, visible in the dry run."""
    return ["env", *(f"{name}={value}" for name, value in sorted(env.items())), *argv]
