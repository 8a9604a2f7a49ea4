"""Where the load generator runs: its own CPUs, at raised priority, and what that cost it.

A generator that shares cores with the server it measures starves exactly when the server
is busiest (an open-loop cell near capacity), and its lag then looks like server latency.
So the generator pins itself to CPUs no server process uses and raises its priority, and
every run records how busy it was: above ~80% of one core it may itself be the bottleneck.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from servebench.cpus import format_cpu_list, parse_cpu_list


def place_self(cpus: str | None, nice: int | None) -> list[str]:
    """Pin this process to `cpus` and set its nice value; return notes on what could not be done."""
    notes: list[str] = []
    if cpus:
        os.sched_setaffinity(0, parse_cpu_list(cpus))
    if nice is not None:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, nice)
        except PermissionError:
            notes.append(f"nice {nice} refused (not root): running at nice {os.getpriority(os.PRIO_PROCESS, 0)}")
    return notes


@dataclass
class CpuMeter:
    """This process's CPU time over a wall-clock window (all of its threads)."""

    cpu_start: float = 0.0
    wall_start: float = 0.0

    def start(self) -> None:
        self.cpu_start, self.wall_start = time.process_time(), time.monotonic()

    def usage(self, notes: list[str] | None = None) -> dict:
        cpu = time.process_time() - self.cpu_start
        wall = time.monotonic() - self.wall_start
        return {"cpu_seconds": round(cpu, 4), "wall_seconds": round(wall, 4),
                "core_fraction": round(cpu / wall, 4) if wall > 0 else None,
                "cpus": format_cpu_list(sorted(os.sched_getaffinity(0))),
                "nice": os.getpriority(os.PRIO_PROCESS, 0), "notes": notes or []}
