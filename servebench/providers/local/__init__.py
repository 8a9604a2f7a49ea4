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
from typing import ClassVar

from servebench import processes
from servebench.processes import ManagedProcess
from servebench.providers import inventory
from servebench.providers.base import Node
from servebench.providers.local.spec import LocalProviderSpec


class LocalProvider:
    kind: ClassVar[str] = "local"
    spec_model: ClassVar[type[LocalProviderSpec]] = LocalProviderSpec

    def __init__(self, spec: LocalProviderSpec, reserved_cpus: list[int] = ()):
        """`reserved_cpus` belong to the load generator: no server process of any node runs there."""
        self._nodes = [Node(name=n.name, address=node_address(index),
                            cpus=[c for c in n.cpus if c not in reserved_cpus])
                       for index, n in enumerate(spec.nodes)]
        self._started: list[ManagedProcess] = []

    @classmethod
    def host_cpus(cls) -> set[int]:
        return set(os.sched_getaffinity(0))

    @classmethod
    def spec_problems(cls, spec: LocalProviderSpec, host_cpus: set[int]) -> list[tuple[tuple, str]]:
        problems = []
        for index, node in enumerate(spec.nodes):
            missing = sorted(set(node.cpus) - host_cpus)
            if missing:
                problems.append((("provider", "nodes", index, "cpus"), f"CPUs {missing} are not available on "
                                 f"this host (allowed: {sorted(host_cpus)})"))
        return problems

    def nodes(self) -> list[Node]:
        """The nodes in campaign order, each at its own loopback address."""
        return list(self._nodes)

    def allocate(self) -> list[Node]:
        return self.nodes()

    def inventory(self, node: Node) -> dict:
        return inventory.collect(cpus=node.cpus)

    def run(self, node: Node, argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def free_port(self, node: Node) -> int:
        return processes.free_port(node.address)

    def start(self, node: Node, argv: list[str], env: dict[str, str], log_path: Path,
              unset: list[str] = ()) -> ManagedProcess:
        full_env = {k: v for k, v in os.environ.items() if k not in unset} | env
        process = ManagedProcess.start(self.command(node, argv), env=full_env, log_path=log_path)
        self._started.append(process)
        return process

    def command(self, node: Node, argv: list[str]) -> list[str]:
        """taskset keeps every thread of the process (and its children) on the node's CPUs."""
        return ["taskset", "-c", ",".join(map(str, node.cpus)), *argv]

    def stop(self, process: ManagedProcess, grace_s: float = 20.0) -> int | None:
        return process.stop(grace_s=grace_s)

    def shm_entries(self, node: Node) -> set[str]:
        return processes.shm_entries()

    def remove_shm_created_since(self, node: Node, before: set[str]) -> list[str]:
        return processes.remove_shm_created_since(before)

    def release(self) -> None:
        """Stop anything of this run still running (a stage that failed before stopping its own)."""
        for process in self._started:
            if process.alive():
                process.stop(grace_s=5)
        self._started.clear()


def node_address(index: int) -> str:
    """127.0.1.1 for the first node, 127.0.1.2 for the second, ... (all on `lo`)."""
    if not 0 <= index < 254:
        raise ValueError(f"the local provider gives at most 254 nodes a loopback address (node {index})")
    return f"127.0.1.{index + 1}"
