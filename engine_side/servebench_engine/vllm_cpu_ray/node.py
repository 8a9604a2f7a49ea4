"""Which node a process runs on, and which cores a local rank may use (no vLLM imports)."""

from __future__ import annotations

import os
import socket


def node_key() -> str:
    """Processes with equal keys can share /dev/shm. SERVEBENCH_NODE_KEY simulates distinct
    nodes on one host; otherwise hostname and boot id identify the machine."""
    explicit = os.environ.get("SERVEBENCH_NODE_KEY")
    if explicit:
        return explicit
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "unknown-boot"
    return f"{socket.gethostname()}:{boot}"


def parse_cpu_ids(text: str) -> list[int]:
    cpus: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            first, last = part.split("-")
            cpus.extend(range(int(first), int(last) + 1))
        else:
            cpus.append(int(part))
    return cpus


def node_binding(environ: dict[str, str], driver_env: dict[str, str] | None = None) -> str | None:
    """This node's VLLM_CPU_OMP_THREADS_BIND for the current server.

    servebench passes one binding per node for each server (SERVEBENCH_NODE_BINDS, JSON
    keyed by node name, from the driver); the raylet's own environment names its node
    (SERVEBENCH_NODE_NAME) and has a default binding (VLLM_CPU_OMP_THREADS_BIND).
    """
    import json

    binds = environ.get("SERVEBENCH_NODE_BINDS") or (driver_env or {}).get("SERVEBENCH_NODE_BINDS")
    name = environ.get("SERVEBENCH_NODE_NAME")
    if binds and name:
        table = json.loads(binds)
        if name in table:
            return table[name]
    return environ.get("VLLM_CPU_OMP_THREADS_BIND")


def cpus_for_local_rank(binding: str | None, local_rank: int) -> list[int] | None:
    """The core list of `local_rank` in a VLLM_CPU_OMP_THREADS_BIND value ('0-3|4-7'), or None."""
    if not binding or binding in ("auto", "nobind"):
        return None
    lists = binding.split("|")
    if local_rank >= len(lists):
        raise ValueError(f"VLLM_CPU_OMP_THREADS_BIND={binding!r} has {len(lists)} core lists, "
                         f"but this node runs local rank {local_rank}")
    return parse_cpu_ids(lists[local_rank])


def pin_all_threads(cpus: list[int]) -> None:
    """Pin every existing thread of this process; threads created later inherit the mask."""
    os.sched_setaffinity(0, cpus)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, OSError):
            continue
