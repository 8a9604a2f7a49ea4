"""What a node is: CPU model, cores, NUMA nodes, memory, kernel and ISA flags.

Runs with the standard library only, so a remote provider can run it on a node as
`python3 -m servebench.providers.inventory` (or as a copied file) and read its JSON. The hardware
fingerprint of a regression series is built from these fields.
"""

from __future__ import annotations

import json
import os
import platform
import socket
from pathlib import Path

# Flags that matter to inference kernels (x86 and Arm spellings).
RELEVANT_FLAGS = (
    "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "avx512_vnni",
    "avx512_fp16", "avx_vnni", "amx_bf16", "amx_int8", "amx_tile",
    "asimd", "sve", "sve2", "bf16", "i8mm", "asimddp", "sme",
)


def collect(cpus: list[int] | None = None) -> dict:
    cpuinfo = _read("/proc/cpuinfo")
    flags: set[str] = set()
    model = None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key in ("flags", "Features") and not flags:
            flags = set(value.split())
        if key in ("model name", "Model name", "CPU part") and model is None:
            model = value.strip()
    return {
        "hostname": socket.gethostname(),
        "cpu_model": model or platform.processor() or "unknown",
        "arch": platform.machine(),
        "logical_cores": os.cpu_count(),
        "physical_cores": _physical_cores(cpuinfo),
        "numa_nodes": _numa_nodes(),
        "mem_total_bytes": _mem_total(),
        "kernel": platform.release(),
        "isa_flags": sorted(flag for flag in flags if flag in RELEVANT_FLAGS),
        "cpus": cpus if cpus is not None else sorted(os.sched_getaffinity(0)),
    }


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _physical_cores(cpuinfo: str) -> int | None:
    pairs = set()
    physical = core = None
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "physical id":
            physical = value.strip()
        elif key == "core id":
            core = value.strip()
        elif not line.strip() and core is not None:
            pairs.add((physical, core))
            physical = core = None
    if core is not None:
        pairs.add((physical, core))
    return len(pairs) or os.cpu_count()


def _numa_nodes() -> int:
    base = Path("/sys/devices/system/node")
    nodes = [p for p in base.glob("node[0-9]*")] if base.exists() else []
    return len(nodes) or 1


def _mem_total() -> int | None:
    for line in _read("/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    return None


if __name__ == "__main__":
    print(json.dumps(collect()))


def emulated(facts: dict, target_name: str) -> dict:
    """An emulated node's facts: the target's architecture and CPU, and the features qemu-user's CPU
    model gives a process there (measured by the probe, servebench/platform/cpu_features.py)."""
    from servebench.paths import cache_dir
    from servebench.platform.cpu_features import emulated_features
    from servebench.platform.targets import profile

    target = profile(target_name)
    return {**facts, "arch": target.arch, "isa_flags": sorted(emulated_features(target, cache_dir())),
            "cpu_model": f"{target.description} (emulated: qemu-{target.arch} -cpu {target.emulator_cpu})"}
