"""Provision stage: the provider allocates the nodes (held until the run releases them), with
each node's inventory taken on that node and its clock compared with ours, `hosts_at_once` nodes at a
time."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.providers import Node, Provider
from servebench.providers.fanout import each_node, hosts_at_once


@task(name="provision", cache_policy=NONE)
def provision(provider: Provider) -> tuple[list[Node], dict[str, dict], dict[str, float | None]]:
    """The nodes, each one's inventory, and each one's wall clock against ours (None: this host)."""
    nodes = provider.allocate()
    facts = each_node(nodes, lambda node: (provider.inventory(node), provider.clock_offset(node)),
                      hosts_at_once(provider), name=lambda node: node.name)
    return (nodes, {node.name: inventory for node, (inventory, _) in zip(nodes, facts)},
            {node.name: offset for node, (_, offset) in zip(nodes, facts)})
