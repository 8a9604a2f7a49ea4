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
from pathlib import Path
from typing import ClassVar, Sequence, cast

from servebench.config.campaign import ProviderSpecBase
from servebench.providers import inventory
from servebench.providers.base import Node, node_numa
from servebench.providers.local.spec import LocalProviderSpec
from servebench.providers.remote import inline_setup_argv
from servebench.providers.this_host import ThisHostProcesses


class LocalProvider(ThisHostProcesses):
    kind: ClassVar[str] = "local"
    spec_model: ClassVar[type[LocalProviderSpec]] = LocalProviderSpec

    def __init__(self, spec: LocalProviderSpec, reserved_cpus: Sequence[int] = (), run_id: str | None = None):
        """`reserved_cpus` belong to the load generator: no server process of any node runs there."""
        super().__init__(run_id)
        self.spec = spec
        self._nodes = [Node(name=n.name, address=node_address(index),
                            cpus=[c for c in n.cpus if c not in reserved_cpus], emulate=n.emulate,
                            numa=node_numa(n.numa, n.emulate, this_host=True))
                       for index, n in enumerate(spec.nodes)]

    @classmethod
    def host_cpus(cls) -> set[int]:
        return set(os.sched_getaffinity(0))

    @classmethod
    def spec_problems(cls, spec: ProviderSpecBase, host_cpus: set[int]) -> list[tuple[tuple, str]]:
        # The campaign's provider block is parsed into this class's `spec_model` (campaign_model).
        local = cast(LocalProviderSpec, spec)
        problems = []
        for index, node in enumerate(local.nodes):
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
        facts = inventory.collect(cpus=node.cpus)
        return inventory.emulated(facts, node.emulate) if node.emulate else facts

    def command(self, node: Node, argv: list[str]) -> list[str]:
        """taskset keeps every thread of the process (and its children) on the node's CPUs; the
        campaign's `provider.setup` lines run first, through `sh -c` (then exec: the PID stays)."""
        return inline_setup_argv(self.spec.setup, ["taskset", "-c", ",".join(map(str, node.cpus)), *argv])

    def start(self, node: Node, argv: list[str], env: dict[str, str], log_path: Path, unset: Sequence[str] = ()):
        """The campaign's `provider.env` in the process's environment (never on its command line),
        under the process's own `env`."""
        return super().start(node, argv, {**self.spec.env, **env}, log_path, unset)

    def release(self) -> None:
        """Nothing to give back; stop what is left of the run."""
        self.stop_leftovers()


def node_address(index: int) -> str:
    """127.0.1.1 for the first node, 127.0.1.2 for the second, ... (all on `lo`)."""
    if not 0 <= index < 254:
        raise ValueError(f"the local provider gives at most 254 nodes a loopback address (node {index})")
    return f"127.0.1.{index + 1}"
