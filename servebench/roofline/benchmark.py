"""A node's roofline: its memory bandwidth and its peak matrix-multiply rate, measured on the cores its
servers get (docs/roofline.md).

`PROGRAM` is the node-side micro-benchmark, a `python -c` program string run by the engine build's
python on the node (the vLLM venv has torch), or by the node's python3 for a build without one
(llama.cpp's binaries): torch if it imports, else numpy (fp32 only: numpy has no bf16), else the
standard library (bandwidth only, as a copy). It pins itself to the CPUs it is given (sched_setaffinity)
and uses that many threads, streams a buffer several times the last-level cache (GB/s) and times
matmuls (GFLOP/s, 2 m k n per product), best of a few within a budget of seconds. The peak is the best
of several shapes and kernels, so that it bounds what an engine's own kernels reach: a square and a
transformer layer's shape (a prompt's tokens times an MLP projection), through `torch.mm` and through
`torch.nn.functional.linear` (the weight transposed, as layers call it; both oneDNN underneath). A single
2048-square `torch.mm` was taken for the peak before, and vLLM's prefill seemed to beat it (its FLOPs
were counted high, docs/roofline.md). It prints one line `ROOFLINE {json}` naming the kernel and shape
that gave each peak. Results are cached per (hostname, CPU model,
CPU list, build key, `VERSION`) under `<cache>/roofline/`, so a second run does not measure again. Pure
here: the provider's call is `servebench/roofline/nodes.py`.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from servebench.paths import keep_json

VERSION = 4          # part of the cache key: a change to PROGRAM measures again
MARK = "ROOFLINE "
# (m, k, n): a 2048 square, and a transformer's shape: 1024 prompt tokens through an MLP projection of a
# 2048-wide model (1024 x 2048 x 8192); the best of them (and of the kernels) is the peak
NATIVE_SIZES = {"buffer_mib": 256, "matmul_shapes": [[2048, 2048, 2048], [1024, 2048, 8192]], "budget_s": 4.0}
# under qemu-user every instruction is emulated: small sizes, the figures are not judged anyway
EMULATED_SIZES = {"buffer_mib": 32, "matmul_shapes": [[256, 256, 256]], "budget_s": 4.0}

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

def core_ticks():
    busy = total = 0
    with open("/proc/stat") as stat:
        for line in stat:
            name, *values = line.split()
            if name[3:].isdigit() and int(name[3:]) in cpus:
                ticks = [int(v) for v in values[:8]]
                busy, total = busy + sum(ticks) - ticks[3] - ticks[4], total + sum(ticks)
    return busy, total

# how busy others kept the cores just before the measurement (this program sleeps meanwhile), and the load
try:
    was = core_ticks()
    time.sleep(0.5)
    now = core_ticks()
    out["busy_before"] = round((now[0] - was[0]) / (now[1] - was[1]), 3) if now[1] > was[1] else None
except (OSError, ValueError):
    out["busy_before"] = None
try:
    out["load_avg_1m"] = float(open("/proc/loadavg").read().split()[0])
except (OSError, ValueError, IndexError):
    out["load_avg_1m"] = None
budget = float(args["budget_s"])
shapes = [tuple(shape) for shape in args["matmul_shapes"]]
SMALL = 256

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

def peak(key, kernels):
    # kernels: (name, shape, prepare) with prepare() -> the product to time; the best rate wins. A kernel is
    # timed on a small product first: where one product of the shape would outrun the budget (bf16 on a
    # CPU without bf16 instructions runs at ~1 GFLOP/s), the shape is not timed and the small rate stands.
    # A shape no larger than the small product (an emulated node's) is timed as it is.
    found = []
    for name, (m, k, n), prepare in kernels:
        try:
            s = min(SMALL, m, k, n)
            if (m, k, n) != (s, s, s):
                small = 2 * s ** 3 / best(prepare(s, s, s), 2) / 1e9
                seconds = 2 * m * k * n / (small * 1e9)
                if seconds > budget:
                    found.append((small, f"{name} {s}x{s}x{s}"))
                    out["notes"].append(f"{key} {name} {m}x{k}x{n}: not timed, one product would take "
                                        f"~{seconds:.0f} s at the {small:.2f} GFLOP/s of {s}x{s}x{s}")
                    continue
            run = prepare(m, k, n)
            found.append((2 * m * k * n / best(run, 3) / 1e9, f"{name} {m}x{k}x{n}"))
        except Exception as exc:
            out["notes"].append(f"{key} {name} {m}x{k}x{n}: {type(exc).__name__}: {str(exc)[:80]}")
    if found:
        rate, how = max(found)
        out["matmul_peak_gflops_" + key] = rate
        out["matmul_kernel_" + key] = how

nbytes = int(args["buffer_mib"]) * 1024 * 1024
try:
    import torch
    torch.set_num_threads(len(cpus))
    out["library"] = "torch " + torch.__version__
    x = torch.ones(nbytes // 4, dtype=torch.float32)
    out["mem_bandwidth_gbps"] = nbytes / best(lambda: x.sum().item()) / 1e9
    out["bandwidth_kernel"] = "sum of a float32 tensor (read)"
    del x
    for dtype, key in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        def mm(m, k, n, dtype=dtype):
            a, b = torch.randn(m, k).to(dtype), torch.randn(k, n).to(dtype)
            return lambda: torch.mm(a, b)
        def linear(m, k, n, dtype=dtype):
            a, w = torch.randn(m, k).to(dtype), torch.randn(n, k).to(dtype)
            return lambda: torch.nn.functional.linear(a, w)
        peak(key, [(name, shape, fn) for shape in shapes for name, fn in (("torch.mm", mm), ("linear", linear))])
except ImportError:
    try:
        import numpy as np
        out["library"] = "numpy " + np.__version__
        x = np.ones(nbytes // 4, dtype=np.float32)
        out["mem_bandwidth_gbps"] = nbytes / best(lambda: np.add.reduce(x)) / 1e9
        out["bandwidth_kernel"] = "numpy sum of a float32 array (read, one thread)"
        del x
        rng = np.random.default_rng(0)
        def matmul(m, k, n):
            a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
            return lambda: a @ b
        peak("fp32", [("numpy matmul", shape, matmul) for shape in shapes])
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


# bf16 products slower than this fraction of fp32's: the CPU has no bf16 kernels. Where it has them (AMX,
# AVX512-BF16, Arm's BF16) bf16 runs at or above fp32's rate, with AVX-512 alone oneDNN converts at about half
# of it; without them torch falls back to loops of its own: 1/8 of fp32 (the best kernel here) to 1/70 (a
# plain torch.mm) on an AVX2-only EPYC (docs/roofline.md)
BF16_KERNELS_FRACTION = 0.25


def bf16_has_kernels(figures: dict) -> bool | None:
    """Whether the node multiplies bf16 matrices with kernels of their own (at a useful fraction of fp32's
    rate), from its measured peaks; None when either peak was not measured. Where this is False a bf16
    model's compute-bound work (prefill, large batches) measures the missing kernels, not the model."""
    bf16, fp32 = figures.get("matmul_peak_gflops_bf16"), figures.get("matmul_peak_gflops_fp32")
    if not bf16 or not fp32:
        return None
    return bf16 >= BF16_KERNELS_FRACTION * fp32


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
    kernels = {key: raw[f"matmul_kernel_{key}"] for key in ("bf16", "fp32") if raw.get(f"matmul_kernel_{key}")}
    return {**result, "cpus": [int(c) for c in raw.get("cpus") or []], "library": raw.get("library"),
            "bandwidth_kernel": raw.get("bandwidth_kernel"), "matmul_kernels": kernels, "notes": notes,
            "busy_before": raw.get("busy_before"), "load_avg_1m": raw.get("load_avg_1m")}


def method(result: dict) -> str:
    """One line saying how the figures were measured (and what was not): the library, the bandwidth's
    kernel, the kernel and shape that gave each peak, what could not be measured."""
    peaks = [f"{key} peak: {how}" for key, how in (result.get("matmul_kernels") or {}).items()]
    parts = [result.get("library") or "?", result.get("bandwidth_kernel") or "", *peaks, *result.get("notes", [])]
    return "; ".join(p for p in parts if p)


def cache_key(hostname: str, cpu_model: str, cpus: list[int], build_key: str, emulated: bool) -> str:
    identity = {"hostname": hostname, "cpu_model": cpu_model, "cpus": sorted(cpus), "build_key": build_key,
                "emulated": emulated, "version": VERSION}
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:24]


def cached(cache: Path, key: str) -> dict | None:
    """The figures kept under `key`, with `measured_at` (unix s; for figures kept before it was recorded,
    when their file was written)."""
    path = cache / "roofline" / f"{key}.json"
    try:
        figures = json.loads(path.read_text())
        if isinstance(figures, dict) and figures.get("measured_at") is None:
            figures["measured_at"] = path.stat().st_mtime
    except (OSError, ValueError):
        return None
    return figures if isinstance(figures, dict) else None


def stale(figures: dict, now: float, max_age_s: float, max_busy: float) -> str | None:
    """Why cached figures are measured again (None: they stand): older than `max_age_s`, or measured
    while other processes kept the cores busier than `max_busy` (a share of their time)."""
    age = now - float(figures.get("measured_at") or 0.0)
    if age > max_age_s:
        return f"measured {age / 86400:.1f} days ago (at most {max_age_s / 86400:g})"
    busy = figures.get("busy_before")
    if busy is not None and busy > max_busy:
        return f"measured while others kept its cores {busy:.0%} busy (at most {max_busy:.0%})"
    return None


def keep(cache: Path, key: str, result: dict) -> None:
    keep_json(cache / "roofline" / f"{key}.json", result)
