"""One engine server: start it for a mode, wait until it answers, stop it and clean up.

A mode's server starts once and serves all of that mode's cells. Readiness is the first
200 on the engine's health path; a server that exits or times out first is reported
with the tail of its log, which is kept in the run directory.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import replace
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from servebench.cpus import format_cpu_list
from servebench.engines import Engine, ServerLaunch
from servebench.engines.base import MultiNode
from servebench.campaign.placement import mp_node_index, node_bindings
from servebench.engines.vllm.ray_cluster import node_key, ray_startup_env
from servebench.processes import ManagedProcess, free_port, remove_shm_created_since, shm_entries
from servebench.providers import Node, Provider
from servebench.campaign.schema import EngineSpec, ModeSpec

HOST = "127.0.0.1"


class ServerFailed(Exception):
    pass


@dataclass
class Server:
    mode: str
    url: str
    port: int
    launch: ServerLaunch
    process: ManagedProcess
    log_path: Path
    shm_before: set[str]
    started_at: datetime
    ready_seconds: float | None = None
    stopped_at: datetime | None = None
    removed_shm: list[str] = field(default_factory=list)
    companions: list[ManagedProcess] = field(default_factory=list)  # other ranks of a multi-node server
    node_name: str = ""                                              # where the main process runs
    companion_nodes: list[str] = field(default_factory=list)


def server_node(mode: ModeSpec, nodes: list[Node]) -> Node:
    """Where the API server runs: the head (first) node for distributed modes, else the node holding the workers."""
    if mode.executor == "mp":
        return nodes[mp_node_index(mode.world_size, [n.cpus for n in nodes])]
    return nodes[0]


def plan_launch(engine: Engine, *, python: str, spec: EngineSpec, mode: ModeSpec, model_dir: str,
                served_name: str, nodes: list[Node], port: int, ray_address: str | None = None,
                dtype: str = "auto") -> ServerLaunch:
    """The server's command and environment: core lists for every node that runs workers."""
    binds = node_bindings(mode.executor, mode.world_size, [n.name for n in nodes], [n.cpus for n in nodes])
    head = server_node(mode, nodes)
    extra: dict[str, str] = {}
    if mode.executor == "ray":
        if ray_address is None:
            raise ValueError(f"mode {mode.name} uses executor 'ray' but no Ray cluster is running")
        extra = {**ray_startup_env(os.environ), "RAY_ADDRESS": ray_address,
                 "SERVEBENCH_NODE_BINDS": json.dumps(binds, sort_keys=True),
                 "SERVEBENCH_NODE_NAME": head.name, "SERVEBENCH_NODE_KEY": node_key(head),
                 "RAY_DEDUP_LOGS": "0"}  # every worker's own lines in the server log
    if mode.executor == "mp-multinode":
        return _multinode_launch(engine, python=python, spec=spec, mode=mode, model_dir=model_dir,
                                 served_name=served_name, nodes=nodes, port=port, binds=binds, dtype=dtype)
    omp_bind = binds.get(head.name) or format_cpu_list(head.cpus)
    return engine.launch(python=python, spec=spec, mode=mode, model_dir=model_dir, served_name=served_name,
                         host=HOST, port=port, omp_bind=omp_bind, extra_env=extra, node_address=head.address,
                         dtype=dtype)


def _multinode_launch(engine: Engine, *, python: str, spec: EngineSpec, mode: ModeSpec, model_dir: str,
                      served_name: str, nodes: list[Node], port: int, binds: dict[str, str], dtype: str) -> ServerLaunch:
    """Rank 0 serves the API on the first node; every other node that holds a worker runs a headless rank."""
    ranked = [n for n in nodes if n.name in binds]
    master = MultiNode(nnodes=len(ranked), node_rank=0, master_addr=ranked[0].address, master_port=free_port())
    launches = []
    for rank, node in enumerate(ranked):
        env = {"SERVEBENCH_NODE_NAME": node.name, "SERVEBENCH_NODE_KEY": node_key(node)}
        launches.append((node.name, engine.launch(
            python=python, spec=spec, mode=mode, model_dir=model_dir, served_name=served_name, host=HOST,
            port=port if rank == 0 else free_port(), omp_bind=binds[node.name], extra_env=env,
            node_address=node.address, multinode=replace(master, node_rank=rank), dtype=dtype)))
    main = launches[0][1]
    return replace(main, companions=launches[1:])


def start_server(provider: Provider, node: Node, launch: ServerLaunch, mode: str, port: int,
                 log_path: Path, nodes: list[Node] | None = None) -> Server:
    """Start the server's main process on `node`, and each companion rank on its own node."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    shm_before = shm_entries()
    process = provider.start(node, launch.argv, launch.env, log_path, unset=launch.unset_env)
    server = Server(mode=mode, url=f"http://{HOST}:{port}", port=port, launch=launch, process=process,
                    log_path=log_path, shm_before=shm_before, started_at=datetime.now(timezone.utc),
                    node_name=node.name)
    by_name = {n.name: n for n in nodes or [node]}
    for name, companion in launch.companions:
        companion_log = log_path.with_name(f"{log_path.stem}.{name}{log_path.suffix}")
        server.companions.append(provider.start(by_name[name], companion.argv, companion.env, companion_log,
                                                unset=companion.unset_env))
        server.companion_nodes.append(name)
    return server


def wait_ready(server: Server, timeout_s: float, poll_s: float = 0.5) -> float:
    """Block until the health path answers 200; return seconds since launch."""
    deadline = server.process.started_monotonic + timeout_s
    health = server.url + server.launch.health_path
    while time.monotonic() < deadline:
        if not server.process.alive():
            raise ServerFailed(f"server for mode {server.mode} exited with code {server.process.exit_code()} "
                               f"before it was ready; log {server.log_path}:\n{log_tail(server.log_path)}")
        for companion in server.companions:
            if not companion.alive():
                raise ServerFailed(f"a rank of mode {server.mode} exited with code {companion.exit_code()}; "
                                   f"log {companion.log_path}:\n{log_tail(companion.log_path)}")
        if _status(health) == 200:
            server.process.remember_descendants()
            server.ready_seconds = round(time.monotonic() - server.process.started_monotonic, 2)
            return server.ready_seconds
        time.sleep(poll_s)
    raise ServerFailed(f"server for mode {server.mode} not ready after {timeout_s:.0f} s; "
                       f"log {server.log_path}:\n{log_tail(server.log_path)}")


def is_healthy(server: Server) -> bool:
    return (server.process.alive() and all(c.alive() for c in server.companions)
            and _status(server.url + server.launch.health_path) == 200)


def stop_server(provider: Provider, server: Server) -> Server:
    provider.stop(server.process)
    for companion in server.companions:
        provider.stop(companion)
    server.removed_shm = remove_shm_created_since(server.shm_before)
    server.stopped_at = datetime.now(timezone.utc)
    return server


KV_CAPACITY = re.compile(r"KV cache size: ([\d,]+) tokens")


def kv_capacity_tokens(log_path: Path) -> int | None:
    """What vLLM says at start-up: 'CPU KV cache size: 1,048,576 tokens' (the first engine's)."""
    try:
        match = KV_CAPACITY.search(log_path.read_text(errors="replace"))
    except OSError:
        return None
    return int(match.group(1).replace(",", "")) if match else None


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


def pick_port() -> int:
    return free_port(HOST)
