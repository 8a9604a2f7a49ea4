"""A node as the campaign's plan and every layer above see it: a name, an address, the CPUs to use."""

from __future__ import annotations

from pydantic import BaseModel


class Node(BaseModel):
    name: str
    address: str                 # where the node's servers listen and its processes meet
    cpus: list[int]              # the CPUs servebench may use there
    emulate: str | None = None   # a target profile of another architecture the node is (qemu-user runs its servers)
