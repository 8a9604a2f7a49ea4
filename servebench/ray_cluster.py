"""A Ray cluster over the provisioned nodes: started once per campaign, stopped by PID.

Each node runs `ray start --block` from the engine venv, so the process servebench
starts is the node's Ray for its whole life; every daemon it spawns is its descendant
and is stopped by PID with it (never `ray stop`, which would stop other users' Ray on a
shared host). Every port is chosen free, the dashboard is off, and each node's CPU count
is the number of vLLM workers it may take.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from servebench.processes import ManagedProcess, free_port, remove_shm_created_since, shm_entries
from servebench.providers import Node, Provider

OBJECT_STORE_BYTES = 300 * 1024 * 1024  # vLLM passes little through it; Ray's default is 30% of RAM
WORKER_PORTS = 100


class RayClusterError(Exception):
    pass


@dataclass
class RayNodePlan:
    node: Node
    head: bool
    argv: list[str]
    env: dict[str, str]
    gcs_address: str                   # the head's GCS, host:port


@dataclass
class RayCluster:
    address: str                       # GCS address, what RAY_ADDRESS is set to
    head: Node
    plans: list[RayNodePlan]
    processes: list[ManagedProcess] = field(default_factory=list)
    shm_before: set[str] = field(default_factory=set)
    ready_seconds: float | None = None


def node_key(node: Node) -> str:
    """Distinct for every node, simulated ones on one host included: the plugin's guard
    against shared memory between nodes keys on it."""
    return f"{node.name}@{socket.gethostname()}"


def plan_cluster(nodes: list[Node], ray_bin: str, slots_per_node: int, engine_env: dict[str, str]) -> list[RayNodePlan]:
    """The `ray start` command and environment of every node (the first is the head)."""
    gcs_port = free_port()
    head_address = f"{nodes[0].address}:{gcs_port}"
    plans = []
    for index, node in enumerate(nodes):
        worker_base = _free_port_range(WORKER_PORTS)
        argv = [ray_bin, "start", "--block", "--num-cpus", str(slots_per_node), "--num-gpus", "0",
                "--node-ip-address", node.address, "--object-store-memory", str(OBJECT_STORE_BYTES),
                "--node-manager-port", str(free_port()), "--object-manager-port", str(free_port()),
                "--min-worker-port", str(worker_base), "--max-worker-port", str(worker_base + WORKER_PORTS - 1),
                "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
                "--runtime-env-agent-port", str(free_port()), "--metrics-export-port", str(free_port()),
                "--disable-usage-stats"]
        if index == 0:
            argv += ["--head", "--port", str(gcs_port), "--include-dashboard", "false",
                     "--ray-client-server-port", str(free_port())]
        else:
            argv += ["--address", head_address]
        env = {**engine_env, "SERVEBENCH_NODE_NAME": node.name, "SERVEBENCH_NODE_KEY": node_key(node),
               "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1"}
        plans.append(RayNodePlan(node=node, head=index == 0, argv=argv, env=env, gcs_address=head_address))
    return plans


def start_cluster(provider: Provider, plans: list[RayNodePlan], engine_python: str, log_dir: Path,
                  timeout_s: float = 180.0) -> RayCluster:
    """Start the head, then the workers; return once every node is alive in the GCS."""
    cluster = RayCluster(address=plans[0].gcs_address, head=plans[0].node, plans=plans, shm_before=shm_entries())
    started = time.monotonic()
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        for plan in plans:
            cluster.processes.append(provider.start(plan.node, plan.argv, plan.env, log_dir / f"ray-{plan.node.name}.log",
                                                    unset=["RAY_ADDRESS"]))
            if plan.head:
                _wait_alive(cluster, engine_python, 1, timeout_s)
        _wait_alive(cluster, engine_python, len(plans), timeout_s)
    except BaseException:
        stop_cluster(provider, cluster)
        raise
    cluster.ready_seconds = round(time.monotonic() - started, 1)
    return cluster


def stop_cluster(provider: Provider, cluster: RayCluster) -> list[str]:
    """Stop the workers, then the head, each with all it spawned; clear their /dev/shm segments."""
    for process in reversed(cluster.processes):
        provider.stop(process)
    cluster.processes.clear()
    return remove_shm_created_since(cluster.shm_before)


def alive_nodes(engine_python: str, address: str) -> int | None:
    script = ("import ray, sys\n"
              f"ray.init(address={address!r}, logging_level='ERROR', log_to_driver=False)\n"
              "print(sum(1 for n in ray.nodes() if n['Alive']))\n")
    try:
        done = subprocess.run([engine_python, "-c", script], capture_output=True, text=True, timeout=60,
                              env={"PATH": "/usr/bin:/bin", "RAY_USAGE_STATS_ENABLED": "0"})
    except subprocess.TimeoutExpired:
        return None
    lines = done.stdout.strip().splitlines()
    return int(lines[-1]) if done.returncode == 0 and lines and lines[-1].isdigit() else None


def _wait_alive(cluster: RayCluster, engine_python: str, count: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for process, plan in zip(cluster.processes, cluster.plans):
            if not process.alive():
                raise RayClusterError(f"ray on node {plan.node.name} exited with code {process.exit_code()}; "
                                      f"see {process.log_path}")
        if (alive_nodes(engine_python, cluster.address) or 0) >= count:
            return
        time.sleep(1.0)
    raise RayClusterError(f"{count} Ray nodes not alive after {timeout_s:.0f} s")


def _free_port_range(size: int) -> int:
    """The start of `size` consecutive ports that are free now (kernel-picked base, checked)."""
    for _ in range(50):
        base = free_port()
        if base + size > 65535:
            continue
        if all(_bindable(base + offset) for offset in range(0, size, 7)):
            return base
    raise RayClusterError(f"no range of {size} free ports found")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
