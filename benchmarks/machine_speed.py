"""How fast the host runs what the test command spends its time on: print a table.

The test command's time (docs/development.md) is mostly Python starting and importing (servebench, Prefect,
vLLM's engine processes), Python running, processes being spawned, and small fp32 and bf16 matrix products
(the tiny models' forward passes). "Machines of this kind" differ by about two times on these: a row of
docs/development.md is comparable with another only next to these figures of the machine it was measured on.

    python benchmarks/machine_speed.py                # this project's venv
    python benchmarks/machine_speed.py --engine-python ~/.cache/servebench/engines/vllm-<key>/bin/python

Each figure is the best of `--repeats` (the machine's speed, not its neighbours' noise).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from servebench.providers import inventory

LOOP = "s = 0\nfor i in range(10_000_000):\n    s += i\n"
MATMUL = """
import sys, time, torch
torch.set_num_threads(1)
for dtype in (torch.float32, torch.bfloat16):
    a, b = torch.randn(256, 1024).to(dtype), torch.randn(1024, 1024).to(dtype)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter(); torch.mm(a, b); best = min(best, time.perf_counter() - started)
    print(str(dtype).split(".")[-1], 2 * 256 * 1024 * 1024 / best / 1e9)
"""


def best_of(repeats: int, run) -> float:
    """The shortest of `repeats` timings of `run()`, in seconds."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def seconds_of(argv: list[str], repeats: int, env: dict[str, str] | None = None) -> float:
    return best_of(repeats, lambda: subprocess.run(argv, check=True, capture_output=True, env=env))


def engine_rows(python: str, repeats: int) -> list[tuple[str, str]]:
    """The engine venv's imports and matrix products; importing vLLM makes torch's inductor cache, kept in a
    directory of its own that is removed afterwards (not /tmp's default)."""
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": scratch}
        rows = [("engine: import torch", f"{seconds_of([python, '-c', 'import torch'], repeats, env):.2f} s"),
                ("engine: import vllm", f"{seconds_of([python, '-c', 'import vllm'], 1, env):.2f} s (once)")]
        out = subprocess.run([python, "-c", MATMUL], check=True, capture_output=True, text=True, env=env).stdout
    for line in out.splitlines():
        dtype, gflops = line.split()
        rows.append((f"engine: torch.mm 256x1024x1024 {dtype}, 1 thread", f"{float(gflops):.1f} GFLOP/s"))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engine-python", help="an engine venv's python: time its torch import and matrix products")
    args = parser.parse_args()
    facts = inventory.collect()   # what a run lands on `nodes` for this host
    rows = [
        ("CPU", f"{facts['cpu_model']}; " + ", ".join(f"{flag} {'yes' if flag in facts['isa_flags'] else 'no'}"
                                                     for flag in ("avx512f", "avx512_bf16", "amx_bf16"))),
        ("Python loop, 10M additions", f"{best_of(args.repeats, lambda: exec(LOOP, {})):.2f} s"),
        ("python -c pass (start)", f"{seconds_of([sys.executable, '-c', 'pass'], args.repeats) * 1000:.0f} ms"),
        ("import servebench.cli", f"{seconds_of([sys.executable, '-c', 'import servebench.cli'], args.repeats):.2f} s"),
        ("import prefect", f"{seconds_of([sys.executable, '-c', 'import prefect'], args.repeats):.2f} s"),
    ]
    if args.engine_python:
        rows += engine_rows(args.engine_python, args.repeats)
    width = max(len(name) for name, _ in rows)
    print(f"{'what':<{width}}  figure")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
