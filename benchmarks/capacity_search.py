"""How many probes the capacity search takes, and how close it lands, on model latency curves.

    python benchmarks/capacity_search.py

For three shapes of p99 TTFT against the offered rate (a hockey stick, an M/M/1-like curve, an
exponential wall) and capacities from 0.25x to 32x the start rate, the search's probe count and
its answer against the true SLO capacity (where the curve reaches the 200 ms limit). Pure
arithmetic: no server, so the numbers are the method's, not a machine's.
"""

from __future__ import annotations

import math

from servebench.analysis.capacity import SearchSettings, judge, search_capacity

SLO = {"ttft_p99_ms": 200.0}
SHAPES = {
    "hockey": (lambda r, c: 50 + 2000 * max(0.0, r - c) / c, lambda c: c * 1.075),
    "mm1": (lambda r, c: 50 / (1 - min(r / (1.3 * c), 0.9999)), lambda c: 1.3 * c * 0.75),
    "wall": (lambda r, c: 50 * math.exp(max(0.0, r - c) / (0.05 * c)), lambda c: c * (1 + 0.05 * math.log(4))),
}


def main() -> None:
    print(f"{'shape':<8}{'capacity/start':>15}{'probes':>8}{'found/true':>12}  converged")
    for name, (latency, true) in SHAPES.items():
        for capacity in (0.25, 0.45, 1.0, 2.5, 4.0, 7.0, 8.0, 16.0, 32.0):
            result = search_capacity(lambda r: judge(r, {"ttft_p99_ms": latency(r, capacity)}, SLO),
                                     SearchSettings(start=1, max_probes=16))
            found = result.capacity / true(capacity) if result.capacity else float("nan")
            print(f"{name:<8}{capacity:>15g}{len(result.probes):>8}{found:>12.3f}  {result.converged}")


if __name__ == "__main__":
    main()
