"""`PortSource`s for launch plans a test builds without a provider."""

from __future__ import annotations

from servebench import processes
from servebench.providers import Node, node_tools


class CountingPorts:
    """Hands out `first`, `first + 1`, ... whatever the node, so a plan's ports are predictable."""

    def __init__(self, first: int = 9000) -> None:
        self.next = first

    def free_port(self, node: Node) -> int:
        self.next += 1
        return self.next - 1

    def free_port_range(self, node: Node, size: int) -> int:
        self.next += size
        return self.next - size


class ThisHostPorts:
    """Ports free on a node's address of this host, picked by the kernel as the local provider picks
    them: for plans a test builds without a provider."""

    def free_port(self, node: Node) -> int:
        return processes.free_port(node.address)

    def free_port_range(self, node: Node, size: int) -> int:
        return node_tools.free_port_range(node.address, size)
