"""Sample one node: CPU (total and per core, limited to the node's CPUs), memory, the RSS
of the engine's processes, and network bytes/packets per interface.

Standard library only (it reads /proc, Linux), so it runs with any node's python3: this
host's, or a remote node's from the node tools tree, whatever the engine build is (a venv,
or static binaries with no python at all): `python -m servebench.telemetry.node_sampler
--node n0 --cpus 0-3 --pids 123 --hz 5 --out samples.jsonl`. It stops on SIGTERM/SIGINT or
when every watched PID is gone. Timestamps are CLOCK_MONOTONIC (the load generator's clock)
plus wall time.
"""

from __future__ import annotations

import argparse
import os
import time

from servebench.telemetry.periodic import run_periodic

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")


def parse_cpus(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            cpus.extend(range(int(a), int(b) + 1))
        elif part:
            cpus.append(int(part))
    return cpus


def _proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start ticks) of a process, None if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[19])


def _rss_bytes(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/statm") as handle:
            return int(handle.read().split()[1]) * PAGE_BYTES
    except (OSError, IndexError, ValueError):
        return None


class EngineProcesses:
    """The watched processes and their descendants, each known by PID and start time (a reused
    PID is another process); the tree is re-walked at most every five seconds (a walk scans all of
    /proc and costs more than everything else in a sample; engine processes appear at start-up,
    not mid-run)."""

    REFRESH_S = 5.0

    def __init__(self, pids: list[int]):
        self.roots = {pid: stat[2] for pid in pids if (stat := _proc_stat(pid)) is not None}
        self.members: dict[int, int] = {}
        self.walked_at = float("-inf")

    def rss(self) -> tuple[int, int]:
        """Resident bytes of the processes and how many there are."""
        if time.monotonic() - self.walked_at >= self.REFRESH_S:
            self._walk()
        total = 0
        for pid in list(self.members):
            rss = _rss_bytes(pid)
            if rss is None or not self._same(pid, self.members[pid]):
                del self.members[pid]
            else:
                total += rss
        return total, len(self.members)

    def alive(self) -> bool:
        return any(self._same(pid, start) for pid, start in self.roots.items())

    @staticmethod
    def _same(pid: int, start: int) -> bool:
        stat = _proc_stat(pid)
        return stat is not None and stat[0] not in ("Z", "X") and stat[2] == start

    def _walk(self) -> None:
        table = {int(name): stat for name in os.listdir("/proc")
                 if name.isdigit() and (stat := _proc_stat(int(name))) is not None}
        children: dict[int, list[int]] = {}
        for pid, (_, ppid, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        members: dict[int, int] = {}
        todo = [pid for pid, start in self.roots.items() if pid in table and table[pid][2] == start]
        while todo:
            pid = todo.pop()
            if pid not in members and table[pid][0] not in ("Z", "X"):
                members[pid] = table[pid][2]
                todo += children.get(pid, [])
        self.members = members
        self.walked_at = time.monotonic()


def cpu_times() -> dict[int, tuple[int, int]]:
    """{cpu: (busy ticks, all ticks)} from /proc/stat. Idle is idle + iowait; guest time is already
    inside user and nice, so it is not counted twice (what psutil and top do)."""
    times = {}
    with open("/proc/stat") as handle:
        for line in handle:
            name, *values = line.split()
            if not name.startswith("cpu") or name == "cpu":
                continue
            ticks = [int(v) for v in values[:8]]  # user nice system idle iowait irq softirq steal
            everything = sum(ticks)
            times[int(name[3:])] = (everything - ticks[3] - ticks[4], everything)
    return times


class CpuPercent:
    """Per-core busy percent since the previous reading (the first reading is since start-up)."""

    def __init__(self) -> None:
        self.last = cpu_times()

    def read(self) -> dict[int, float]:
        now = cpu_times()
        percent = {}
        for cpu, (busy, everything) in now.items():
            was_busy, was_everything = self.last.get(cpu, (0, 0))
            elapsed = everything - was_everything
            percent[cpu] = round(100.0 * max(0, busy - was_busy) / elapsed, 1) if elapsed > 0 else 0.0
        self.last = now
        return percent


def memory() -> tuple[int, int]:
    """(total, available) bytes from /proc/meminfo."""
    values = {}
    with open("/proc/meminfo") as handle:
        for line in handle:
            name, _, rest = line.partition(":")
            if name in ("MemTotal", "MemAvailable"):
                values[name] = int(rest.split()[0]) * 1024
    return values["MemTotal"], values["MemAvailable"]


def net_counters() -> dict[str, list[int]]:
    """{interface: [bytes sent, bytes received, packets sent, packets received]} of this network
    namespace, from /proc/net/dev."""
    counters = {}
    with open("/proc/net/dev") as handle:
        for line in list(handle)[2:]:
            name, _, rest = line.partition(":")
            fields = [int(v) for v in rest.split()]
            counters[name.strip()] = [fields[8], fields[0], fields[9], fields[1]]
    return counters


def sample(node: str, cpus: list[int], engine: EngineProcesses, cpu: CpuPercent) -> dict:
    per_core = cpu.read()
    mine = [per_core[c] for c in cpus if c in per_core]
    total, available = memory()
    rss, nprocs = engine.rss()
    return {
        "node": node, "t_mono": time.monotonic(), "t_wall": time.time(),
        "cpu_pct": sum(mine) / len(mine) if mine else None,
        "cpu_pct_per_core": {str(c): per_core[c] for c in cpus if c in per_core},
        "mem_used_bytes": total - available, "mem_available_bytes": available,
        "engine_rss_bytes": rss, "engine_processes": nprocs,
        "net": net_counters(),
    }


def run(node: str, cpus: list[int], pids: list[int], hz: float, out: str) -> int:
    engine = EngineProcesses(pids)
    cpu = CpuPercent()
    return run_periodic(hz, out, lambda: sample(node, cpus, engine, cpu),
                        done=lambda: bool(pids) and not engine.alive())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--node", required=True)
    parser.add_argument("--cpus", required=True, help="the node's CPUs, e.g. 0-3,8")
    parser.add_argument("--pids", default="", help="engine processes to follow (with descendants)")
    parser.add_argument("--hz", type=float, default=5.0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    pids = [int(p) for p in args.pids.split(",") if p]
    run(args.node, parse_cpus(args.cpus), pids, args.hz, args.out)


if __name__ == "__main__":
    main()
