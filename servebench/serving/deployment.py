"""What a campaign's modes are started from: one engine's build, model, nodes and shared services
(`Deployment`, set once per run and engine; for an engine that starts no servers, its block and the nodes
watched only), and the node the load generator runs on (`ClientNode`). Plain data the flows and the
Prefect tasks share, so neither owns the other."""

from __future__ import annotations

from dataclasses import dataclass, field

from servebench.builds.venv import EngineBuild
from servebench.config.campaign import Campaign, EngineSpecBase, ModeSpec, split_for_replicas
from servebench.engines import Engine
from servebench.engines.base import SharedServices
from servebench.providers import Node, Provider


@dataclass(frozen=True)
class ClientNode:
    """The node the load generator runs on (campaign `load.client.node`) and what it runs there."""

    provider: Provider
    node: Node
    tree: str                       # the load generator's tree, placed on the node
    clock_offset_s: float | None    # the node's wall clock ahead of ours (None: this host)

    @property
    def python(self) -> str:
        """The node's python3, which runs the generator's tree alone (-S)."""
        return self.provider.node_python(self.node)


@dataclass(frozen=True)
class Deployment:
    """What every mode of one engine is started from (set once per run and engine), or those of one
    build (`build:`) or model variant (`model_axes`) of it."""

    campaign: Campaign                             # its `model` the one this deployment serves (its variant's)
    engine: Engine
    spec: EngineSpecBase                           # the engine's block of the campaign
    provider: Provider
    nodes: list[Node]
    build: EngineBuild | None                      # None: an engine that starts no servers builds nothing
    model_dir: str                                 # "" when nothing is served from a model file of the run's
    served_name: str
    run_dir: str
    shared: SharedServices | None = None
    tools_dir: str | None = None                   # the node tools (sampler), the same path on every node
    clock_offsets: dict[str, float | None] = field(default_factory=dict)  # node -> wall clock ahead of ours
    client: ClientNode | None = None                 # the load generator's node (load.client.node), serving nothing
    variant: dict[str, str] = field(default_factory=dict)  # the model variant it serves (a mode's `model:`)
    rooflines: dict[str, dict] = field(default_factory=dict)  # node -> its measured roofline (start-up timeouts)

    @property
    def sampled_nodes(self) -> list[Node]:
        """Every node telemetry watches: the servers' and the client node."""
        return self.nodes + ([self.client.node] if self.client is not None else [])


def mode_nodes(nodes: list[Node], mode: ModeSpec) -> list[Node]:
    """The nodes a mode runs on: those it names, in its order (checked by feasibility), else all. A
    name is the node's own or the one the campaign gave it before the allocation named it (`node1`)."""
    if not mode.nodes:
        return list(nodes)
    by_name = {node.declared_as: node for node in nodes if node.declared_as} | {node.name: node for node in nodes}
    return [by_name[name] for name in mode.nodes]


def replica_nodes(nodes: list[Node], mode: ModeSpec) -> list[list[Node]]:
    """Each replica's nodes of a `replicas` mode: the mode's nodes split in order, the same number to each
    (replicas: 2 on [h1, h2]: [[h1], [h2]]); one share of all of them for a mode of one server."""
    return split_for_replicas(mode_nodes(nodes, mode), mode.replicas)
