"""What an emulated node is, beyond qemu-user's CPU model: the facts a program of the node's
architecture reads about its machine, given by the node rather than worked around by each engine.

An emulated node's processes run as `qemu-aarch64-static -cpu MODEL -L ROOT PROGRAM ...`. qemu
serves a path under ROOT in place of the host's whenever ROOT has it, so ROOT is the node's view of
the machine. For a program of a Debian userland unpacked by servebench (sysroot.py: a venv's
CPython), ROOT is built per node profile and userland (`node_root`):
- the userland's directories (`lib`, `usr`, `etc`, ...), linked: the dynamic loader and libraries;
- `/proc/cpuinfo` of an aarch64 Linux with the model's features and IDs, and
  `/sys/devices/system/cpu/cpuN/regs/identification/midr_el1` (and `revidr_el1`): qemu-user 7.2
  passes the host's x86 /proc/cpuinfo through and has no such sysfs files, and torch's oneDNN
  (xbyak_aarch64) reads both: "Can't open MIDR_EL1 sysfs entry", then SIGSEGV. The values are the
  model's own, measured by the probe (cpu_features.py), not typed in;
- a host wrapper that starts a program of the node under the same CPU and ROOT: a guest process
  that starts a child from `sys.executable` (Python's spawn) cannot exec an aarch64 program itself
  (binfmt_misc, kernel-wide state, is never registered), so it execs this x86 script instead
  (given to the guest as SERVEBENCH_EMULATED_PYTHON; the target venv's hook uses it, target_venv.py).

The guest also gets TORCHDYNAMO_DISABLE=1: the node has no C++ compiler of its own (a JIT compile
would run the host's x86 g++), so a program that would compile graphs at run time runs them eagerly.

A program that is not in such a userland (llama.cpp's static binaries) runs as before, with the
cross toolchain's sysroot as ROOT (targets.emulator_argv).
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

from servebench.config.campaign import sha256_json
from servebench.config.node import Node
from servebench.paths import cache_dir
from servebench.platform.cpu_features import HWCAP, HWCAP2, emulated_features, emulated_ids
from servebench.platform.sysroot import SYSROOTS
from servebench.platform.targets import TargetProfile, emulator_argv, profile

EMULATION = "emulation"
WRAPPER = ".servebench/emulated-python"
LAYOUT = 1  # the root's layout version: a change here makes new roots
GUEST_ENV = {"TORCHDYNAMO_DISABLE": "1"}


def node_argv(node: Node, argv: list[str]) -> list[str]:
    """The command as the node runs it: under qemu-user with the node's CPU model and root when the
    node is an emulated one (its `emulate:` profile), else as is."""
    if node.emulate is None:
        return argv
    return guest_argv(profile(node.emulate), argv, cache_dir())


def guest_argv(target: TargetProfile, argv: list[str], cache: Path) -> list[str]:
    """qemu-user's command for `argv` on a node of `target`: with the node's root when the program
    belongs to a userland of the cache, else the cross toolchain's sysroot."""
    userland = userland_of(Path(argv[0]), cache)
    if userland is None:
        return [*emulator_argv(target), *argv]
    root = node_root(target, userland, cache)
    environment = {"SERVEBENCH_EMULATED_PYTHON": str(root / WRAPPER), **GUEST_ENV}
    return [*emulator_argv(target, str(root)), *(f for name, value in environment.items()
                                                 for f in ("-E", f"{name}={value}")), *argv]


def userland_of(program: Path, cache: Path) -> Path | None:
    """The sysroot of the cache the program lives in (a venv's bin/python links into one), or None."""
    sysroots = (cache / SYSROOTS).resolve()
    resolved = program.resolve()
    if not resolved.is_relative_to(sysroots) or resolved == sysroots:
        return None
    return sysroots / resolved.relative_to(sysroots).parts[0]


def cpuinfo_text(features: set[str], midr: int, cpus: int) -> str:
    """/proc/cpuinfo as aarch64 Linux writes it: features in the kernel's order, MIDR's fields."""
    ordered = " ".join(name for name in (*HWCAP, *HWCAP2) if name in features)
    architecture = (midr >> 16) & 0xF
    block = (f"BogoMIPS\t: 50.00\nFeatures\t: {ordered}\nCPU implementer\t: 0x{midr >> 24 & 0xFF:02x}\n"
             f"CPU architecture: {8 if architecture == 0xF else architecture}\nCPU variant\t: 0x{midr >> 20 & 0xF:x}\n"
             f"CPU part\t: 0x{midr >> 4 & 0xFFF:03x}\nCPU revision\t: {midr & 0xF}\n\n")
    return "".join(f"processor\t: {index}\n{block}" for index in range(cpus))


def root_inputs(target: TargetProfile, userland: Path, cache: Path) -> dict:
    """What a node root holds; its hash names the root."""
    midr, revidr = emulated_ids(target, cache)
    return {"layout": LAYOUT, "profile": target.name, "cpu": target.emulator_cpu,
            "features": sorted(emulated_features(target, cache)), "midr": midr, "revidr": revidr,
            "cpus": os.cpu_count() or 1, "userland": str(userland), "env": GUEST_ENV}


def node_root(target: TargetProfile, userland: Path, cache: Path) -> Path:
    """The node's view of the machine for programs of `userland` (made once per inputs)."""
    inputs = root_inputs(target, userland, cache)
    root = cache / EMULATION / f"{target.name}-{sha256_json(inputs)[:16]}"
    if root.is_dir():
        os.utime(root, follow_symlinks=False)  # its last use, which `builds list` shows and gc reads
        return root
    partial = root.with_name(root.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for entry in sorted(userland.iterdir()):
        if entry.name not in ("proc", "sys"):
            (partial / entry.name).symlink_to(entry)
    (partial / "proc").mkdir()
    (partial / "proc" / "cpuinfo").write_text(cpuinfo_text(set(inputs["features"]), inputs["midr"], inputs["cpus"]))
    for index in range(inputs["cpus"]):
        ids = partial / "sys" / "devices" / "system" / "cpu" / f"cpu{index}" / "regs" / "identification"
        ids.mkdir(parents=True)
        (ids / "midr_el1").write_text(f"0x{inputs['midr']:016x}\n")
        (ids / "revidr_el1").write_text(f"0x{inputs['revidr']:016x}\n")
    wrapper = partial / WRAPPER
    wrapper.parent.mkdir()
    qemu = " ".join(shlex.quote(word) for word in emulator_argv(target, str(root)))
    wrapper.write_text("#!/bin/sh\n# A program of emulated node " + target.name + " started by a process of the "
                       "node (servebench/platform/emulation.py):\n# the same qemu CPU and root; the program is "
                       "SERVEBENCH_GUEST_EXECUTABLE, set by the target venv's hook.\n"
                       f'exec {qemu} "${{SERVEBENCH_GUEST_EXECUTABLE:?not set: no guest program}}" "$@"\n')
    wrapper.chmod(0o755)
    try:
        partial.rename(root)
    except OSError:  # another process made it meanwhile: theirs is the same
        shutil.rmtree(partial, ignore_errors=True)
    return root
