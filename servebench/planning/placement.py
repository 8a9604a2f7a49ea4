"""Where the load generator runs and which CPUs the servers keep (pure arithmetic, no I/O).

The load generator gets CPUs of its own (the campaign's `load.client.cpus`, or the host's
CPUs no node uses), and every server process stays off them: a generator that shares
cores with the server starves exactly when the server is busiest. A campaign may instead
name a node of its provider as the client (`load.client.node`): the generator runs there,
reaching the servers over the network, and that node serves nothing. Where an engine puts
its workers is the engine's business (`servebench/engines/<kind>/`).
"""

from __future__ import annotations

from typing import Literal, NamedTuple, TypeVar

from servebench.cpus import format_cpu_list


class ClientPlacement(NamedTuple):
    """The load generator's host and CPUs: `node` None is the orchestrator's host; `cpus` None
    means not pinned (it shares the servers' cores)."""

    cpus: list[int] | None
    why: str
    node: str | None = None

    @property
    def dedicated(self) -> bool:
        return self.cpus is not None

    @property
    def reserved_on_nodes(self) -> list[int]:
        """The CPUs no server process may use on nodes of this host (none with a client node:
        the generator has that node to itself)."""
        return list(self.cpus or ()) if self.node is None else []

    def describe(self) -> str:
        where = f"CPUs {format_cpu_list(self.cpus)} of its own" if self.cpus else "no CPU of its own (shared)"
        host = f"on node {self.node}, " if self.node else ""
        return f"load generator: {host}{where} ({self.why})"


def place_client(requested: list[int] | Literal["auto", "shared"], node_cpus: list[list[int]],
                 host_cpus: set[int]) -> ClientPlacement:
    """Which CPUs the load generator gets on the orchestrator's host."""
    if requested == "shared":
        return ClientPlacement(None, "load.client.cpus: shared")
    if requested == "auto":
        free = sorted(host_cpus - {cpu for cpus in node_cpus for cpu in cpus})
        if free:
            return ClientPlacement(free, "auto: the host's CPUs that no node uses")
        return ClientPlacement(None, "auto: every CPU of this host belongs to a node; set load.client.cpus to "
                                     "reserve one")
    return ClientPlacement(sorted(requested), "load.client.cpus")


def server_cpus(node_cpus: list[int], client: ClientPlacement) -> list[int]:
    """A node's CPUs less the generator's (nodes on the generator's host)."""
    reserved = set(client.cpus or ())
    return [cpu for cpu in node_cpus if cpu not in reserved]


def client_placement(campaign, host_cpus: set[int]) -> ClientPlacement:
    """The load generator's CPUs on the host it runs on, for this campaign (nodes on other hosts
    leave every CPU of this one to it; a client node gives it that node's)."""
    client = campaign.load.client
    if client.node is not None:
        return place_on_client_node(client.cpus, client.node, node_cpus_by_name(campaign).get(client.node, []))
    node_cpus = [n.cpus for n in server_node_specs(campaign)] if campaign.provider.nodes_on_this_host else []
    return place_client(client.cpus, node_cpus, host_cpus)


def place_on_client_node(requested: list[int] | Literal["auto", "shared"], node: str,
                         node_cpus: list[int]) -> ClientPlacement:
    """The generator on a node of its own: all of that node's CPUs unless the campaign says which."""
    if requested == "shared":
        return ClientPlacement(None, "load.client.cpus: shared", node)
    if requested == "auto":
        return ClientPlacement(sorted(node_cpus), "auto: the client node's CPUs", node)
    return ClientPlacement(sorted(requested), "load.client.cpus", node)


def node_cpus_by_name(campaign) -> dict[str, list[int]]:
    return {n.name: list(n.cpus) for n in campaign.provider.node_specs()}


def server_node_specs(campaign) -> list:
    """The provider's nodes that serve: all but the campaign's client node."""
    return [n for n in campaign.provider.node_specs() if n.name != campaign.load.client.node]


NodeT = TypeVar("NodeT")  # a provider's Node (or, in tests, its name)


def split_client_node(nodes: list[NodeT], declared: list[str], client: str | None) -> tuple[list[NodeT], NodeT | None]:
    """The allocated nodes as (servers, client node): the client is found by its place among the
    declared names (a Slurm allocation names its nodes only once granted: `node3` is the third)."""
    if client is None:
        return list(nodes), None
    index = declared.index(client)
    return [node for i, node in enumerate(nodes) if i != index], nodes[index]
