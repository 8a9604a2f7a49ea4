"""Where the load generator runs and which CPUs the servers keep (pure arithmetic, no I/O).

The load generator gets CPUs of its own (the campaign's `load.client.cpus`, or the host's
CPUs no node uses), and every server process stays off them: a generator that shares
cores with the server starves exactly when the server is busiest. Where an engine puts
its workers is the engine's business (`servebench/engines/<kind>/`).
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from servebench.cpus import format_cpu_list


class ClientPlacement(NamedTuple):
    """The load generator's CPUs: `cpus` None means not pinned (it shares the servers' cores)."""

    cpus: list[int] | None
    why: str

    @property
    def dedicated(self) -> bool:
        return self.cpus is not None

    def describe(self) -> str:
        where = f"CPUs {format_cpu_list(self.cpus)} of its own" if self.cpus else "no CPU of its own (shared)"
        return f"load generator: {where} ({self.why})"


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
    leave every CPU of this one to it)."""
    node_cpus = [n.cpus for n in campaign.provider.node_specs()] if campaign.provider.nodes_on_this_host else []
    return place_client(campaign.load.client.cpus, node_cpus, host_cpus)
