"""Telemetry stage: a sampler on every node and a /metrics scraper, for the life of a server."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from servebench.cpus import format_cpu_list
from servebench.processes import ManagedProcess
from servebench.providers import Node, get_provider
from servebench.engines.vllm.ray_cluster import RayCluster
from servebench.serving.server import Server
from servebench.campaign.schema import Campaign


@dataclass
class Telemetry:
    mode: str
    processes: list[ManagedProcess] = field(default_factory=list)
    node_files: list[Path] = field(default_factory=list)
    server_files: list[Path] = field(default_factory=list)


def engine_pids(server: Server, nodes: list[Node], cluster: RayCluster | None) -> dict[str, list[int]]:
    """The processes to follow on each node: the server's ranks there, and that node's Ray."""
    pids: dict[str, list[int]] = {node.name: [] for node in nodes}
    main_node = next((n.name for n in nodes if n.name == server.node_name), nodes[0].name)
    pids[main_node].append(server.process.pid)
    for name, process in zip(server.companion_nodes, server.companions):
        pids[name].append(process.pid)
    if cluster is not None:
        for plan, process in zip(cluster.plans, cluster.processes):
            pids[plan.node.name].append(process.pid)
    return pids


@task(name="start-telemetry", cache_policy=NONE)
def start_telemetry(campaign: Campaign, server: Server, nodes: list[Node], cluster: RayCluster | None,
                    run_dir: str) -> Telemetry:
    provider = get_provider(campaign)
    out = Path(run_dir) / "telemetry"
    out.mkdir(parents=True, exist_ok=True)
    telemetry = Telemetry(mode=server.mode)
    pids_by_node = engine_pids(server, nodes, cluster)
    for node in nodes:
        path = out / f"{server.mode}.node.{node.name}.jsonl"
        pids = pids_by_node[node.name]
        argv = [sys.executable, "-m", "servebench.telemetry.node_sampler", "--node", node.name,
                "--cpus", format_cpu_list(node.cpus), "--pids", ",".join(map(str, pids)),
                "--hz", f"{campaign.telemetry.node_hz:g}", "--out", str(path)]
        telemetry.processes.append(provider.start(node, argv, {}, out / f"{server.mode}.node.{node.name}.log"))
        telemetry.node_files.append(path)
    path = out / f"{server.mode}.server.jsonl"
    argv = [sys.executable, "-m", "servebench.telemetry.scraper", "--url", server.url, "--mode", server.mode,
            "--hz", f"{campaign.telemetry.scrape_hz:g}", "--out", str(path)]
    telemetry.processes.append(ManagedProcess.start(argv, log_path=out / f"{server.mode}.server.log"))
    telemetry.server_files.append(path)
    return telemetry


@task(name="stop-telemetry", cache_policy=NONE)
def stop_telemetry(telemetry: Telemetry) -> None:
    for process in telemetry.processes:
        process.stop(grace_s=5)
