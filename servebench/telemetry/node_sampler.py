"""Sample one node: CPU (total and per core, limited to the node's CPUs), memory, the RSS
of the engine's processes, and network bytes/packets per interface.

Needs only the standard library and psutil, so it runs in either environment and on a
remote node: `python -m servebench.telemetry.node_sampler --node n0 --cpus 0-3 --pids 123
--hz 5 --out samples.jsonl`. It stops on SIGTERM/SIGINT or when every watched PID is gone.
Timestamps are CLOCK_MONOTONIC (the load generator's clock) plus wall time.
"""

from __future__ import annotations

import argparse
import time

import psutil

from servebench.telemetry.periodic import run_periodic


def parse_cpus(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.split(","):
        if "-" in part:
            a, b = part.split("-")
            cpus.extend(range(int(a), int(b) + 1))
        elif part:
            cpus.append(int(part))
    return cpus


class EngineProcesses:
    """The watched processes and their descendants; the tree is re-walked at most every five
    seconds (a walk scans all of /proc and costs more than everything else in a sample;
    engine processes appear at start-up, not mid-run)."""

    REFRESH_S = 5.0

    def __init__(self, roots: list[psutil.Process]):
        self.roots = roots
        self.members: dict[int, psutil.Process] = {}
        self.walked_at = float("-inf")

    def rss(self) -> tuple[int, int]:
        """Resident bytes of the processes and how many there are."""
        if time.monotonic() - self.walked_at >= self.REFRESH_S:
            self._walk()
        total = 0
        for pid, proc in list(self.members.items()):
            try:
                total += proc.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                del self.members[pid]
        return total, len(self.members)

    def alive(self) -> bool:
        return any(root.is_running() for root in self.roots)

    def _walk(self) -> None:
        members: dict[int, psutil.Process] = {}
        for root in self.roots:
            try:
                for proc in [root, *root.children(recursive=True)]:
                    members[proc.pid] = self.members.get(proc.pid, proc)
            except psutil.NoSuchProcess:
                continue
        self.members = members
        self.walked_at = time.monotonic()


def sample(node: str, cpus: list[int], engine: EngineProcesses) -> dict:
    per_core = psutil.cpu_percent(percpu=True)
    mine = [per_core[c] for c in cpus if c < len(per_core)]
    memory = psutil.virtual_memory()
    rss, nprocs = engine.rss()
    net = psutil.net_io_counters(pernic=True)
    return {
        "node": node, "t_mono": time.monotonic(), "t_wall": time.time(),
        "cpu_pct": sum(mine) / len(mine) if mine else None,
        "cpu_pct_per_core": dict(zip(map(str, cpus), mine)),
        "mem_used_bytes": memory.total - memory.available, "mem_available_bytes": memory.available,
        "engine_rss_bytes": rss, "engine_processes": nprocs,
        "net": {name: [c.bytes_sent, c.bytes_recv, c.packets_sent, c.packets_recv] for name, c in net.items()},
    }


def run(node: str, cpus: list[int], pids: list[int], hz: float, out: str) -> int:
    roots = []
    for pid in pids:
        try:
            roots.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    engine = EngineProcesses(roots)
    psutil.cpu_percent(percpu=True)  # the first reading is relative to this one
    return run_periodic(hz, out, lambda: sample(node, cpus, engine), done=lambda: bool(pids) and not engine.alive())


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
