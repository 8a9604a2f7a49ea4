"""The provider interface: where nodes come from and how a process runs on one.

Kept small on purpose (ReFrame's scheduler/launcher split): a provider lists its nodes,
runs a short command on a node, starts and stops a long-lived process there, and
releases what it allocated. Local comes first; SSH host lists and Slurm allocations
implement the same methods.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from servebench.processes import ManagedProcess


class Node(BaseModel):
    name: str
    address: str
    cpus: list[int]


class Provider(Protocol):
    def nodes(self) -> list[Node]:
        """The allocated nodes, each with the CPUs servebench may use there."""

    def inventory(self, node: Node) -> dict:
        """The node's hardware facts (servebench.providers.inventory.collect on that node)."""

    def run(self, node: Node, argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run a short command on the node and return its output."""

    def start(self, node: Node, argv: list[str], env: dict[str, str], log_path: Path,
              unset: list[str] = ()) -> ManagedProcess:
        """Start a long-lived process on the node with `env` added and `unset` removed, output to log_path."""

    def stop(self, process: ManagedProcess) -> int | None:
        """Stop the process and everything it spawned, by PID."""

    def release(self) -> None:
        """Give back what was allocated (nothing for local)."""
