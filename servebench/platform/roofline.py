"""A node's roofline: its memory bandwidth and its peak matrix-multiply rate, measured on the cores its
servers get (docs/roofline.md).

`PROGRAM` is the node-side micro-benchmark, a `python -c` program string run by the engine build's
python on the node (the vLLM venv has torch), or by the node's python3 for a build without one
(llama.cpp's binaries): torch if it imports, else numpy (fp32 only: numpy has no bf16), else the
standard library (bandwidth only, as a copy). It pins itself to the CPUs it is given (sched_setaffinity)
and uses that many threads, streams a buffer several times the last-level cache (GB/s) and times square
matmuls (GFLOP/s, 2 n^3 per product), best of a few within a budget of seconds, and prints one line
`ROOFLINE {json}`. Results are cached per (hostname, CPU model, CPU list, build key) under
`<cache>/roofline/`, so a second run does not measure again. Pure here: the provider's call is
`servebench/distribution/roofline.py`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

VERSION = 1          # part of the cache key: a change to PROGRAM measures again
MARK = "ROOFLINE "
NATIVE_SIZES = {"buffer_mib": 256, "matmul_n": 2048, "budget_s": 4.0}
# under qemu-user every instruction is emulated: small sizes, the figures are not judged anyway
EMULATED_SIZES = {"buffer_mib": 32, "matmul_n": 256, "budget_s": 4.0}

PROGRAM = r'''
import json, os, sys, time
args = json.loads(sys.argv[1])
cpus = args["cpus"]
try:
    os.sched_setaffinity(0, cpus)
except (AttributeError, OSError):
    pass
threads = str(len(cpus))
for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[name] = threads
out = {"cpus": cpus, "threads": len(cpus), "notes": []}
budget = float(args["budget_s"])

def best(fn, reps=5):
    fn()
    times, start = [], time.perf_counter()
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
        if time.perf_counter() - start > budget:
            break
    return min(times)

nbytes = int(args["buffer_mib"]) * 1024 * 1024
n = int(args["matmul_n"])
try:
    import torch
    torch.set_num_threads(len(cpus))
    out["library"] = "torch " + torch.__version__
    x = torch.ones(nbytes // 4, dtype=torch.float32)
    out["mem_bandwidth_gbps"] = nbytes / best(lambda: x.sum().item()) / 1e9
    out["bandwidth_kernel"] = "sum of a float32 tensor (read)"
    del x
    for dtype, key in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        a = torch.randn(n, n).to(dtype)
        out["matmul_peak_gflops_" + key] = 2 * n ** 3 / best(lambda: torch.mm(a, a), 3) / 1e9
except ImportError:
    try:
        import numpy as np
        out["library"] = "numpy " + np.__version__
        x = np.ones(nbytes // 4, dtype=np.float32)
        out["mem_bandwidth_gbps"] = nbytes / best(lambda: np.add.reduce(x)) / 1e9
        out["bandwidth_kernel"] = "numpy sum of a float32 array (read, one thread)"
        del x
        a = np.random.default_rng(0).standard_normal((n, n), dtype=np.float32)
        out["matmul_peak_gflops_fp32"] = 2 * n ** 3 / best(lambda: a @ a, 3) / 1e9
        out["notes"].append("no torch: numpy has no bf16, the bf16 peak is not measured")
    except ImportError:
        out["library"] = "python"
        src, dst = bytearray(nbytes // 2), bytearray(nbytes // 2)
        def copy():
            dst[:] = src
        out["mem_bandwidth_gbps"] = nbytes / best(copy) / 1e9
        out["bandwidth_kernel"] = "bytearray copy (read + write counted)"
        out["notes"].append("neither torch nor numpy: no matmul peak")
print("ROOFLINE " + json.dumps(out))
'''


def program_args(cpus: list[int], emulated: bool) -> str:
    """The program's one argument: the CPUs to pin to and the sizes (smaller under emulation)."""
    return json.dumps({"cpus": sorted(cpus), **(EMULATED_SIZES if emulated else NATIVE_SIZES)})


def parse(stdout: str) -> dict:
    """The program's result line as a dict: bandwidth [GB/s] and peaks [GFLOP/s] rounded, None where not
    measured. Raises ValueError when there is no result line."""
    lines = [line for line in stdout.splitlines() if line.startswith(MARK)]
    if not lines:
        raise ValueError(f"no {MARK.strip()} line in the micro-benchmark's output: {stdout.strip()[-300:]!r}")
    raw = json.loads(lines[-1][len(MARK):])
    result = {key: (None if raw.get(key) is None else round(float(raw[key]), 2))
              for key in ("mem_bandwidth_gbps", "matmul_peak_gflops_bf16", "matmul_peak_gflops_fp32")}
    notes = list(raw.get("notes") or [])
    return {**result, "cpus": [int(c) for c in raw.get("cpus") or []], "library": raw.get("library"),
            "bandwidth_kernel": raw.get("bandwidth_kernel"), "notes": notes}


def method(result: dict) -> str:
    """One line saying how the figures were measured (and what was not)."""
    parts = [result.get("library") or "?", result.get("bandwidth_kernel") or "", *result.get("notes", [])]
    return "; ".join(p for p in parts if p)


def cache_key(hostname: str, cpu_model: str, cpus: list[int], build_key: str, emulated: bool) -> str:
    identity = {"hostname": hostname, "cpu_model": cpu_model, "cpus": sorted(cpus), "build_key": build_key,
                "emulated": emulated, "version": VERSION}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def cached(cache: Path, key: str) -> dict | None:
    path = cache / "roofline" / f"{key}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def keep(cache: Path, key: str, result: dict) -> None:
    folder = cache / "roofline"
    folder.mkdir(parents=True, exist_ok=True)
    scratch = folder / f"{key}.json.tmp"
    scratch.write_text(json.dumps(result, sort_keys=True))
    scratch.rename(folder / f"{key}.json")
