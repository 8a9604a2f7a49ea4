"""The engine build, the model and the node tools present on every node (a
shared file system, a digest that already matches, or a verified copy), or the node refused;
a client node gets the engine build (for its python), the node tools and the load generator. The way
the trees travel is the provider block's `placement` (docs/scale.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from servebench.builds.venv import EngineBuild
from servebench.distribution.distribute import (
    COPIES,
    TreePlacement,
    arch_problem,
    check_load_generator_runs,
    node_tools_tree,
    place_on_nodes,
    project_dir,
)
from servebench.distribution.load_tree import load_generator_tree
from servebench.models.artifact import model_tree
from servebench.paths import cache_dir
from servebench.progress import reporter
from servebench.providers import Node, Provider
from servebench.providers.fanout import campaign_block


def placement_way(provider: Provider) -> str:
    """The way the campaign's provider block chose (`placement:`): copies, relay or sbcast."""
    block = campaign_block(provider)
    return block.placement if block is not None else COPIES


@dataclass(frozen=True)
class Placed:
    placements: list[TreePlacement]
    tools_dir: str                      # the node tools (sampler), the same path on every node
    load_tree: str | None = None        # the load generator's tree on the client node


def place_artifacts(provider: Provider, servers: list[Node], client: Node | None, inventories: dict[str, dict],
                    build: EngineBuild, model_dir: str) -> Placed:
    """What was done on each node, and where the node tools and the load generator are."""
    tools = node_tools_tree(cache_dir(), project_dir())
    engine = Path(build.venv_path)
    trees = {node.name: {"engine": engine, "model": model_tree(Path(model_dir)), "tools": tools} for node in servers}
    if any(not arch_problem(node, inventories.get(node.name, {}), build.platform) for node in servers):
        for node in servers:  # a campaign of mixed architectures: each build only where it can run
            if arch_problem(node, inventories.get(node.name, {}), build.platform):
                del trees[node.name]["engine"]
    load_tree = None
    if client is not None:
        load_tree = load_generator_tree(cache_dir(), project_dir())
        trees[client.name] = {"tools": tools, "load-generator": load_tree}  # it runs no engine
    nodes = servers + ([client] if client is not None else [])
    python = build.python if build.python_version else None  # a cmake build is binaries only
    placements = place_on_nodes(provider, nodes, inventories, trees, python, build.platform,
                                log=reporter().note, way=placement_way(provider))
    if client is not None and load_tree is not None:  # (the tree is made exactly when there is a client)
        check_load_generator_runs(provider, client, provider.node_python(client), load_tree)
    return Placed(placements, str(tools), str(load_tree) if load_tree else None)


def place_node_tools(provider: Provider, servers: list[Node], client: Node | None,
                     inventories: dict[str, dict]) -> Placed:
    """The node tools alone on every node (the samplers of a server servebench did not start: no engine build,
    no model), and the load generator on a client node."""
    tools = node_tools_tree(cache_dir(), project_dir())
    trees: dict[str, dict[str, Path]] = {node.name: {"tools": tools} for node in servers}
    load_tree = None
    if client is not None:
        load_tree = load_generator_tree(cache_dir(), project_dir())
        trees[client.name] = {"tools": tools, "load-generator": load_tree}
    nodes = servers + ([client] if client is not None else [])
    placements = place_on_nodes(provider, nodes, inventories, trees, None, "", log=reporter().note,
                                way=placement_way(provider))
    if client is not None and load_tree is not None:
        check_load_generator_runs(provider, client, provider.node_python(client), load_tree)
    return Placed(placements, str(tools), str(load_tree) if load_tree else None)
