"""The `plain` provider: a test-only second provider, to prove a provider is a folder plus one
registry line. Its nodes are addresses 127.0.2.N on this host's loopback, its processes
plain child processes (no CPU pinning), and it keeps a journal of its lifecycle (allocate,
start, stop, release) so a test can check that the flow holds one provider for the run
and releases it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import Field

from servebench.config.campaign import NodeSpec, ProviderSpecBase
from servebench.processes import ManagedProcess
from servebench.providers import inventory
from servebench.providers.base import Node
from servebench.providers.this_host import ThisHostProcesses


class PlainProviderSpec(ProviderSpecBase):
    kind: Literal["plain"] = "plain"
    nodes: list[NodeSpec] = Field(min_length=1)

    def node_specs(self) -> list[NodeSpec]:
        return list(self.nodes)


class PlainProvider(ThisHostProcesses):
    kind: ClassVar[str] = "plain"
    spec_model: ClassVar[type[PlainProviderSpec]] = PlainProviderSpec
    journal: ClassVar[list[tuple[str, str]]] = []      # (event, detail), every instance's, in order

    def __init__(self, spec: PlainProviderSpec, reserved_cpus: list[int] = (), run_id: str | None = None):
        super().__init__(run_id)
        self._nodes = [Node(name=n.name, address=f"127.0.2.{index + 1}", cpus=list(n.cpus))
                       for index, n in enumerate(spec.nodes)]
        self._allocated = False

    @classmethod
    def host_cpus(cls) -> set[int]:
        return set(os.sched_getaffinity(0))

    @classmethod
    def spec_problems(cls, spec: PlainProviderSpec, host_cpus: set[int]) -> list[tuple[tuple, str]]:
        return []

    def nodes(self) -> list[Node]:
        return list(self._nodes)

    def allocate(self) -> list[Node]:
        self._allocated = True
        self.journal.append(("allocate", ",".join(n.name for n in self._nodes)))
        return self.nodes()

    def inventory(self, node: Node) -> dict:
        """This host's facts, as a node of its own would report them."""
        return {**inventory.collect(cpus=node.cpus), "hostname": f"plain-{node.name}"}

    def start(self, node: Node, argv: list[str], env: dict[str, str], log_path: Path,
              unset: list[str] = ()) -> ManagedProcess:
        assert self._allocated, "a process was started before the nodes were allocated"
        process = super().start(node, argv, env, log_path, unset)
        self.journal.append(("start", f"{node.name}:{process.pid}"))
        return process

    def stop(self, process: ManagedProcess, grace_s: float = 20.0) -> int | None:
        self.journal.append(("stop", str(process.pid)))
        return super().stop(process, grace_s)

    def release(self) -> None:
        self.journal.append(("release", f"{self.stop_leftovers()} still running"))
        self._allocated = False
