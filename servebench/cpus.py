"""CPU lists: parsing '0-3,8' (the Linux cpulist format), formatting, and splitting a
node's cores among an engine's local ranks."""

from __future__ import annotations


def parse_cpu_list(text: str) -> list[int]:
    """'0-3,8,10-11' -> [0, 1, 2, 3, 8, 10, 11] (the Linux cpulist format)."""
    cpus: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        if "-" in part:
            first, _, last = part.partition("-")
            start, end = int(first), int(last)
            if end < start:
                raise ValueError(f"bad CPU range {part!r}: end before start")
            cpus.extend(range(start, end + 1))
        else:
            cpus.append(int(part))
    if not cpus:
        raise ValueError(f"empty CPU list {text!r}")
    return cpus


def format_cpu_list(cpus: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5' (inverse of parse_cpu_list for sorted unique input)."""
    runs: list[str] = []
    ordered = sorted(cpus)
    start = prev = ordered[0]
    for cpu in [*ordered[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(runs)


def split_cpus(cpus: list[int], ranks: int) -> list[list[int]]:
    """Split a node's cores into `ranks` contiguous, disjoint, near-equal groups; with fewer
    cores than ranks (an oversubscribed mode) ranks take one core each, round robin."""
    if ranks < 1:
        raise ValueError("ranks must be >= 1")
    if ranks > len(cpus):
        return [[cpus[rank % len(cpus)]] for rank in range(ranks)]
    base, extra = divmod(len(cpus), ranks)
    groups, start = [], 0
    for rank in range(ranks):
        size = base + (1 if rank < extra else 0)
        groups.append(cpus[start:start + size])
        start += size
    return groups

