"""The local provider: the nodes are CPU sets of this host.

Several nodes on one host stand in for a cluster (each with its own CPU list), which is
how distributed modes are tested without one. Each node has a loopback address of its own,
127.0.1.N (node N-1): Ray replaces 127.0.0.1 with the host's outward interface address
(it wants nodes reachable from other machines), which would route the cluster's traffic
to the network interface; a distinct loopback address stays on `lo`, as a separate host's
address would be its own.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from servebench.providers import inventory
from servebench.processes import ManagedProcess
from servebench.providers.base import Node
from servebench.campaign.schema import LocalProviderSpec


class LocalProvider:
    def __init__(self, spec: LocalProviderSpec, reserved_cpus: list[int] = ()):
        """`reserved_cpus` belong to the load generator: no server process of any node runs there."""
        self._nodes = [Node(name=n.name, address=node_address(index),
                            cpus=[c for c in n.cpus if c not in reserved_cpus])
                       for index, n in enumerate(spec.nodes)]

    def nodes(self) -> list[Node]:
        """The nodes in campaign order, each at its own loopback address."""
        return list(self._nodes)

    def inventory(self, node: Node) -> dict:
        return inventory.collect(cpus=node.cpus)

    def run(self, node: Node, argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def start(self, node: Node, argv: list[str], env: dict[str, str], log_path: Path,
              unset: list[str] = ()) -> ManagedProcess:
        # taskset keeps every thread of the server (and its children) on the node's CPUs.
        pinned = ["taskset", "-c", ",".join(map(str, node.cpus)), *argv]
        full_env = {k: v for k, v in os.environ.items() if k not in unset} | env
        return ManagedProcess.start(pinned, env=full_env, log_path=log_path)

    def stop(self, process: ManagedProcess) -> int | None:
        return process.stop()

    def release(self) -> None:
        return None


def node_address(index: int) -> str:
    """127.0.1.1 for the first node, 127.0.1.2 for the second, ... (all on `lo`)."""
    if not 0 <= index < 254:
        raise ValueError(f"the local provider gives at most 254 nodes a loopback address (node {index})")
    return f"127.0.1.{index + 1}"
