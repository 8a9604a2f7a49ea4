"""A node as the campaign's plan and every layer above see it: a name, an address, the CPUs to use."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Node(BaseModel):
    name: str
    address: str                 # where the node's servers listen and its processes meet
    cpus: list[int]              # the CPUs servebench may use there
    emulate: str | None = None   # a target profile of another architecture the node is (qemu-user runs its servers)
    interpreter: Literal["placed", "node"] = "placed"  # where the engine's python comes from on a node that lacks
    # the build's (servebench/distribution/interpreter.py): the build's own placed, or the node's python3.X
    declared_as: str | None = None  # the campaign's name for an allocated node whose real name differs (Slurm's node1)
    numa: list[list[int]] = []   # each NUMA node's CPU ids (declared, published for its target, or this host's);
    # empty: unknown, the node's CPUs are one group (servebench/platform/numa.py)
