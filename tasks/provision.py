"""Provision stage: the nodes and the CPUs each may use, with each node's inventory."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.providers import Node, get_provider
from servebench.campaign.schema import Campaign


@task(name="provision", cache_policy=NONE)
def provision(campaign: Campaign) -> tuple[list[Node], dict[str, dict]]:
    provider = get_provider(campaign)
    nodes = provider.nodes()
    return nodes, {node.name: provider.inventory(node) for node in nodes}
