"""Cluster stage: a Ray cluster over the nodes, for the campaign's ray modes (once per campaign)."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from servebench.build.venv import EngineBuild
from servebench.campaign.placement import ray_slots_per_node
from servebench.providers import Node, get_provider
from servebench.engines.vllm.ray_cluster import RayCluster, plan_cluster, start_cluster, stop_cluster
from servebench.campaign.schema import Campaign


def needs_ray(campaign: Campaign) -> bool:
    return any(mode.executor == "ray" for mode in campaign.modes)


@task(name="start-ray-cluster", cache_policy=NONE)
def start_ray_cluster(campaign: Campaign, nodes: list[Node], build: EngineBuild, run_dir: str) -> RayCluster:
    slots = ray_slots_per_node([m.world_size for m in campaign.modes if m.executor == "ray"], len(nodes))
    ray_bin = str(Path(build.python).parent / "ray")
    plans = plan_cluster(nodes, ray_bin, slots, campaign.engine.env)
    return start_cluster(get_provider(campaign), plans, build.python, Path(run_dir) / "ray")


@task(name="stop-ray-cluster", cache_policy=NONE)
def stop_ray_cluster(campaign: Campaign, cluster: RayCluster) -> list[str]:
    return stop_cluster(get_provider(campaign), cluster)
