"""Where the load generator runs: its own CPUs, at raised priority, and what that cost it.

A generator that shares cores with the server it measures starves exactly when the server
is busiest (an open-loop cell near capacity), and its lag then looks like server latency.
So the generator pins itself to CPUs no server process uses and raises its priority, and
every run records how busy it was: above ~80% of one core it may itself be the bottleneck.

An idle core halts, and a response arriving for a halted core waits for it to wake: on a VM that
wake-up is a round trip through the host (0.05-0.7 ms measured on a KVM guest, docs/load-generator.md),
added to the TTFT the generator stamps. So while measuring, the generator's own CPUs poll when idle
(the kernel's per-CPU PM QoS resume latency, "n/a"), held by a guard process that restores the
machine's setting when the generator ends, however it ends. Only CPUs the generator has to itself
(pinned, a subset of the machine's): the server's cores keep the machine's idle behaviour.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from servebench.cpus import format_cpu_list, parse_cpu_list
from servebench.load.summary import ClientUsage


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


CPU_ROOT = Path("/sys/devices/system/cpu")
IDLE_GUARD = Path(__file__).with_name("idle_guard.py")


@dataclass
class IdlePolling:
    """What `polling_when_idle` did: the CPUs held polling ('' for none) and, if none, why."""

    cpus: str = ""
    why_not: str | None = None


@contextmanager
def polling_when_idle(mode: str, cpu_root: Path = CPU_ROOT) -> Iterator[IdlePolling]:
    """Hold this process's CPUs polling when idle ('auto'), if they are its own and the kernel lets us;
    'off' leaves them as the machine has them."""
    if mode == "off":
        yield IdlePolling(why_not="off (--idle-poll off)")
        return
    mine = sorted(os.sched_getaffinity(0))
    online = parse_cpu_list((cpu_root / "online").read_text()) if (cpu_root / "online").exists() else mine
    if set(mine) >= set(online):
        yield IdlePolling(why_not="the generator is not pinned apart from other CPUs (--cpus): idle CPUs halt")
        return
    paths = [cpu_root / f"cpu{cpu}" / "power" / "pm_qos_resume_latency_us" for cpu in mine]
    # a session of its own: a SIGKILL to the generator's process group must leave the guard to restore
    guard = subprocess.Popen([sys.executable, str(IDLE_GUARD), *map(str, paths)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
    assert guard.stdin is not None and guard.stdout is not None  # both are PIPE above
    answer = guard.stdout.readline().strip() or f"the idle guard exited {guard.wait()}"
    try:
        yield IdlePolling(cpus=format_cpu_list(mine)) if answer == "polling" else IdlePolling(why_not=answer)
    finally:
        guard.stdin.close()  # the guard restores the machine's setting on end of file
        guard.wait()
        guard.stdout.close()


@dataclass
class CpuMeter:
    """This process's CPU time over a wall-clock window (all of its threads)."""

    cpu_start: float = 0.0
    wall_start: float = 0.0

    def start(self) -> None:
        self.cpu_start, self.wall_start = time.process_time(), time.monotonic()

    def usage(self, notes: list[str] | None = None, idle: IdlePolling | None = None) -> ClientUsage:
        """Since `start`: CPU and wall time, the CPUs and nice value it ran at, what `place_self` could not
        do (`notes`) and what `polling_when_idle` held (`idle`)."""
        cpu = time.process_time() - self.cpu_start
        wall = time.monotonic() - self.wall_start
        idle = idle or IdlePolling()
        return ClientUsage(cpu_seconds=round(cpu, 4), wall_seconds=round(wall, 4),
                           core_fraction=round(cpu / wall, 4) if wall > 0 else None,
                           cpus=format_cpu_list(sorted(os.sched_getaffinity(0))),
                           nice=os.getpriority(os.PRIO_PROCESS, 0), notes=notes or [],
                           idle_poll_cpus=idle.cpus, idle_poll_off=idle.why_not)
