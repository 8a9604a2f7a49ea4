"""The campaign's `provider:` block for local nodes (CPU sets of this host)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from servebench.config.campaign import NodeSpec, ProviderSpecBase


class LocalProviderSpec(ProviderSpecBase):
    kind: Literal["local"] = "local"
    nodes: list[NodeSpec] = Field(min_length=1, description=(
        "The nodes: named CPU sets of this host, each standing in for one machine (several of them test "
        "distributed modes without a cluster)."))

    def node_specs(self) -> list[NodeSpec]:
        return list(self.nodes)

    @property
    def total_cpus(self) -> int:
        return sum(len(node.cpus) for node in self.nodes)
