"""What CPU features a node has, in Linux's names, measured rather than assumed.

- A real node: the `flags` (x86) or `Features` (aarch64) line of its /proc/cpuinfo.
- An emulated aarch64 node: a tiny static probe, compiled once with the cross compiler, run under
  qemu-user with the node's CPU model, prints `getauxval(AT_HWCAP)` and `AT_HWCAP2`; the bits are
  decoded with the kernel's table (arch/arm64/include/uapi/asm/hwcap.h), whose names are the ones
  /proc/cpuinfo prints on a real Graviton. qemu-user's /proc/cpuinfo is the host's, so it cannot
  be read instead.

The preflight then names what a build needs and the node lacks before any server starts.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

from servebench.platform.targets import TargetProfile, emulator_argv, missing_features

HWCAP = ("fp", "asimd", "evtstrm", "aes", "pmull", "sha1", "sha2", "crc32", "atomics", "fphp", "asimdhp", "cpuid",
         "asimdrdm", "jscvt", "fcma", "lrcpc", "dcpop", "sha3", "sm3", "sm4", "asimddp", "sha512", "sve",
         "asimdfhm", "dit", "uscat", "ilrcpc", "flagm", "ssbs", "sb", "paca", "pacg")
HWCAP2 = ("dcpodp", "sve2", "sveaes", "svepmull", "svebitperm", "svesha3", "svesm4", "flagm2", "frint", "svei8mm",
          "svef32mm", "svef64mm", "svebf16", "i8mm", "bf16", "dgh", "rng", "bti", "mte", "ecv", "afp", "rpres",
          "mte3", "sme")

# MIDR_EL1 and REVIDR_EL1 read at EL0 are trapped and answered by Linux (HWCAP_CPUID), and by
# qemu-user for its model: the IDs an emulated node's /proc/cpuinfo and sysfs give (emulation.py).
PROBE_SOURCE = """#include <stdio.h>
#include <sys/auxv.h>
int main(void) {
    unsigned long midr, revidr;
    __asm__("mrs %0, MIDR_EL1" : "=r"(midr));
    __asm__("mrs %0, REVIDR_EL1" : "=r"(revidr));
    printf("%lx %lx %lx %lx\\n", getauxval(AT_HWCAP), getauxval(AT_HWCAP2), midr, revidr);
    return 0;
}
"""


class FeatureProbeError(RuntimeError):
    pass


def decode_hwcaps(hwcap: int, hwcap2: int) -> set[str]:
    """aarch64 HWCAP and HWCAP2 bits -> feature names."""
    return ({name for bit, name in enumerate(HWCAP) if hwcap >> bit & 1}
            | {name for bit, name in enumerate(HWCAP2) if hwcap2 >> bit & 1})


def cpuinfo_features(text: str) -> set[str]:
    """The feature names of a /proc/cpuinfo (its first `flags` or `Features` line)."""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def probe_binary(cache: Path, arch: str = "aarch64") -> Path:
    """The hwcap probe for `arch`, compiled (static) once into `<cache>/tools/` by the cross compiler."""
    digest = hashlib.sha256(PROBE_SOURCE.encode()).hexdigest()[:12]
    binary = cache / "tools" / f"hwcap-probe-{arch}-{digest}"
    if binary.exists():
        return binary
    binary.parent.mkdir(parents=True, exist_ok=True)
    source = binary.with_suffix(".c")
    source.write_text(PROBE_SOURCE)
    partial = binary.with_suffix(".partial")
    try:
        done = subprocess.run([f"{arch}-linux-gnu-gcc", "-static", "-O1", "-o", str(partial), str(source)],
                              capture_output=True, text=True)
    except FileNotFoundError:
        raise FeatureProbeError(f"{arch}-linux-gnu-gcc not found: apt-get install gcc-{arch}-linux-gnu "
                                "(Debian package)") from None
    if done.returncode != 0:
        raise FeatureProbeError(f"compiling the {arch} feature probe failed: {done.stderr.strip()[-300:]}")
    partial.rename(binary)
    return binary


def emulated_features(target: TargetProfile, cache: Path) -> set[str]:
    """The features qemu-user's CPU model for `target` gives a process (measured by the probe, once
    per model and process: the inventory and every mode's preflight ask the same question)."""
    hwcap, hwcap2, _, _ = _probe(target, cache)
    return set(decode_hwcaps(hwcap, hwcap2))


def emulated_ids(target: TargetProfile, cache: Path) -> tuple[int, int]:
    """(MIDR_EL1, REVIDR_EL1) of qemu-user's CPU model for `target`, as a process there reads them."""
    _, _, midr, revidr = _probe(target, cache)
    return midr, revidr


@functools.lru_cache(maxsize=None)
def _probe(target: TargetProfile, cache: Path) -> tuple[int, int, int, int]:
    argv = [*emulator_argv(target), str(probe_binary(cache, target.arch))]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise FeatureProbeError(f"{argv[0]} not found: apt-get install qemu-user-static (Debian package)") from None
    words = done.stdout.split()
    if done.returncode != 0 or len(words) != 4:
        raise FeatureProbeError(f"the feature probe under {' '.join(argv[:3])} failed: "
                                f"{(done.stderr or done.stdout).strip()[-300:]}")
    hwcap, hwcap2, midr, revidr = (int(word, 16) for word in words)
    return hwcap, hwcap2, midr, revidr


def build_refusal(build_inputs: dict, node_name: str, node_arch: str, features: set[str],
                  node_cpu: str) -> str | None:
    """Why a build cannot run on a node (another architecture, or CPU features it lacks), or None.
    `build_inputs` is the build record's key inputs (a target build has `arch` and `features`)."""
    arch = build_inputs.get("arch") or str(build_inputs.get("platform", "")).partition("-")[2] or None
    target = build_inputs.get("target")
    if arch is not None and arch != node_arch:
        return (f"refused before serving: the build {target or ''} is for {arch}; node {node_name} is {node_arch} "
                f"({node_cpu})")
    missing = missing_features(build_inputs.get("features") or [], features)
    if missing:
        return (f"refused before serving: the build for {target} needs CPU features {', '.join(missing)} that "
                f"node {node_name} ({node_cpu}) lacks")
    return None
