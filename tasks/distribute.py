"""Placement stage: the engine build, the model and the node tools present on every node (a
shared file system, a digest that already matches, or a verified copy), or the node refused."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from servebench.build.distribute import TreePlacement, node_tools_tree, place_on_nodes, project_dir
from servebench.build.venv import EngineBuild
from servebench.paths import cache_dir
from servebench.progress import reporter
from servebench.providers import Node, Provider


@task(name="place-on-nodes", cache_policy=NONE)
def place_artifacts(provider: Provider, nodes: list[Node], inventories: dict[str, dict], build: EngineBuild,
                    model_dir: str) -> tuple[list[TreePlacement], str]:
    """Return what was done on each node and the node tools' directory (the same path on every node)."""
    tools = node_tools_tree(cache_dir(), project_dir())
    trees = {"engine": Path(build.venv_path), "model": Path(model_dir), "tools": tools}
    placements = place_on_nodes(provider, nodes, inventories, trees, build.python, build.platform,
                                 log=reporter().note)
    return placements, str(tools)
