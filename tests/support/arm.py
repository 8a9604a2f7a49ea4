"""What the aarch64 tests share: the tools they need (skipped, saying how to get them, where
missing) and the script that checks vLLM's aarch64 `_C` under qemu."""

from __future__ import annotations

import shutil

import pytest

from servebench.platform.sysroot import SysrootError, check_foreign_arch

MISSING = [tool for tool in ("aarch64-linux-gnu-gcc", "qemu-aarch64-static") if shutil.which(tool) is None]
needs_cross = pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} missing: apt-get install "
                                 "gcc-aarch64-linux-gnu qemu-user-static (README command 2 installs them)")


def arm64_known() -> bool:
    """apt downloads arm64 packages (the aarch64 CPython's sysroot) only once dpkg knows the architecture."""
    try:
        check_foreign_arch("aarch64")
    except (SysrootError, OSError):
        return False
    return True


needs_arm64_packages = pytest.mark.skipif(not arm64_known(), reason=(
    "dpkg does not know arm64: the aarch64 CPython is unpacked from Debian's arm64 packages. Once per host: "
    "dpkg --add-architecture arm64 && apt-get update (README command 2)"))


# What a process of the aarch64 venv reports under qemu with the node's CPU: its machine, torch, and
# vLLM's _C twice: bound now (Python's default) it cannot load (OpenBLAS's sbgemm_ is not in PyPI's
# aarch64 torch), with the venv's lazy binding it does and registers its ops; then a child started
# from sys.executable (the node's wrapper) and one by multiprocessing's spawn, as vLLM starts them.
C_EXTENSION_CHECK = """
import multiprocessing, os, platform, subprocess, sys

def check():
    import torch
    print("machine", platform.machine(), "torch", torch.__version__, flush=True)
    sys.setdlopenflags(os.RTLD_NOW)
    try:
        import vllm._C
    except ImportError as exc:
        print("bound now:", exc, flush=True)
    sys.setdlopenflags(os.RTLD_LAZY)
    import vllm._C
    print("lazy: loaded", hasattr(torch.ops._C, "rms_norm"), flush=True)
    child = subprocess.run([sys.executable, "-c", "import platform; print(platform.machine())"],
                           capture_output=True, text=True)
    print("child", child.returncode, child.stdout.strip(), flush=True)
    spawned = multiprocessing.get_context("spawn").Process(target=os.getpid)
    spawned.start()
    spawned.join()
    print("spawned", spawned.exitcode, flush=True)

if __name__ == "__main__":
    check()
"""
