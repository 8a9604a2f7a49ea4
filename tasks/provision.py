"""Provision stage: the provider allocates the nodes (held until the run releases them), with
each node's inventory taken on that node and its clock compared with ours."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.providers import Node, Provider


@task(name="provision", cache_policy=NONE)
def provision(provider: Provider) -> tuple[list[Node], dict[str, dict], dict[str, float | None]]:
    """The nodes, each one's inventory, and each one's wall clock against ours (None: this host)."""
    nodes = provider.allocate()
    return (nodes, {node.name: provider.inventory(node) for node in nodes},
            {node.name: provider.clock_offset(node) for node in nodes})
