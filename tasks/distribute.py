"""Placement stage: the engine build, the model and the node tools on every node, the load
generator on a client node (`servebench.distribution.artifacts`); for a server servebench did not
start, the node tools and the load generator only."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.builds.venv import EngineBuild
from servebench.distribution.artifacts import Placed
from servebench.distribution.artifacts import place_artifacts as place
from servebench.distribution.artifacts import place_node_tools as place_tools
from servebench.providers import Node, Provider


@task(name="place-on-nodes", cache_policy=NONE)
def place_artifacts(provider: Provider, servers: list[Node], client: Node | None, inventories: dict[str, dict],
                    build: EngineBuild, model_dir: str) -> Placed:
    return place(provider, servers, client, inventories, build, model_dir)


@task(name="place-node-tools", cache_policy=NONE)
def place_node_tools(provider: Provider, servers: list[Node], client: Node | None,
                     inventories: dict[str, dict]) -> Placed:
    return place_tools(provider, servers, client, inventories)
