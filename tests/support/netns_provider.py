"""A third remote provider, for the provider contract suite (tests/unit/test_provider_contract.py): the
nodes are a testbed's hosts, reached by entering their namespaces (`nsenter`, as `servebench
testbed exec` does) instead of over ssh or through Slurm.

It is only a channel plus an allocation: `NamespaceChannel.run` and `pipe_argv` are all its
channel says; `NamespaceProvider` says which hosts it has, how to reach them at `allocate`, and
what `release` and `reclaim` do. Every node method (commands, ports, /dev/shm, files, the clock,
processes started in their own session and stopped by PID) is `servebench.providers.remote.RemoteNodes`'s,
as a Kubernetes (`kubectl exec`) or PBS (`pbsdsh`) provider would get them.
"""

from __future__ import annotations

import os
import subprocess
from typing import ClassVar, Literal

from pydantic import Field

from servebench.config.campaign import NodeSpec, ProviderSpecBase
from servebench.providers.base import Node
from servebench.providers.remote import DEFAULT_TIMEOUT_S, LEFTOVER_GRACE_S, NODE_TOOLS, CommandChannel, RemoteNodes


class NamespaceProviderSpec(ProviderSpecBase):
    kind: Literal["netns"] = "netns"
    nodes_on_this_host: ClassVar[bool] = False
    testbed: str = Field(pattern=r"^[a-z][a-z0-9]{0,9}$")
    nodes: list[NodeSpec] = Field(min_length=1)   # names of the testbed's hosts
    remote_dir: str = "/tmp"
    shared_paths: list[str] = Field(default_factory=list)
    python: str = "/usr/bin/python3"

    def node_specs(self) -> list[NodeSpec]:
        return list(self.nodes)


class NamespaceChannel(CommandChannel):
    """argv on a testbed host: `nsenter` into its network, mount, UTS and IPC namespaces."""

    def __init__(self, testbed: str):
        from servebench.devtools.testbed import load

        self.layout = load(testbed)

    def pipe_argv(self, host: str, argv: list[str]) -> list[str]:
        from servebench.devtools.testbed import enter_argv

        return [*enter_argv(self.layout, self.layout.host(host)), *argv]

    def run(self, host: str, argv: list[str], timeout: float | None = DEFAULT_TIMEOUT_S, input: str | None = None,
            stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
        return subprocess.run(self.pipe_argv(host, argv), input=input, stdout=stdout, stderr=subprocess.PIPE,
                              text=True, timeout=timeout, stdin=None if input is not None else subprocess.DEVNULL)


class NamespaceProvider(RemoteNodes):
    kind: ClassVar[str] = "netns"
    spec_model: ClassVar[type[NamespaceProviderSpec]] = NamespaceProviderSpec

    def __init__(self, spec: NamespaceProviderSpec, reserved_cpus: list[int] = (), run_id: str | None = None):
        super().__init__(spec, run_id)
        self._channel: NamespaceChannel | None = None

    @classmethod
    def host_cpus(cls) -> set[int]:
        return set(os.sched_getaffinity(0))

    @classmethod
    def spec_problems(cls, spec: NamespaceProviderSpec, host_cpus: set[int]) -> list[tuple[tuple, str]]:
        return []

    def channel(self) -> NamespaceChannel:
        if self._channel is None:
            raise RuntimeError("the netns provider has not allocated its nodes yet")
        return self._channel

    def node_host(self, node: Node) -> str:
        if node.name not in {n.name for n in self.spec.nodes}:
            raise ValueError(f"node {node.name!r} is not a node of this netns provider")
        return node.name

    def nodes(self) -> list[Node]:
        layout = self._channel.layout if self._channel else None
        return [Node(name=n.name, address=layout.host(n.name).address if layout else "", cpus=list(n.cpus))
                for n in self.spec.nodes]

    def allocate(self) -> list[Node]:
        """The allocation: the testbed's hosts, each answering."""
        self._channel = NamespaceChannel(self.spec.testbed)
        for node in self.spec.nodes:
            self._channel.checked(node.name, ["true"], "reaching the host")
        return self.nodes()

    def claims(self) -> list[str]:
        return []

    def allocation_record(self) -> dict:
        return {"testbed": self.spec.testbed, "nodes": [node.model_dump() for node in self.nodes()]}

    def release(self) -> None:
        if self._channel is None:
            return
        try:
            self.stop_leftovers()
        finally:
            errors = self._clean_nodes()
            if errors:
                raise RuntimeError("could not clean every host of the run:\n  " + "\n  ".join(errors))

    def reclaim(self, record: dict) -> list[str]:
        """On every host: stop the run's marked processes, remove its directory."""
        channel, done = NamespaceChannel(self.spec.testbed), []
        for node in self.spec.nodes:
            found = channel.call(node.name, NODE_TOOLS, "stop_marked", self.spec.python, prefix=f"{self.run_id}.",
                                 grace_s=LEFTOVER_GRACE_S)
            channel.checked(node.name, ["rm", "-rf", "--", self.run_dir], "removing the run dir")
            done += [f"{node.name}: stopped {len(found)} process(es) of the run"] if found else []
        return done
