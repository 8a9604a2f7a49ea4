"""The provider interface: where nodes come from and how a process runs on one.

Kept small on purpose (ReFrame's scheduler/launcher split). One provider object serves a
whole run: it allocates its nodes, starts and stops processes there (by PID, on that
node), picks ports on the node that binds them, cleans the node's /dev/shm, and releases
what it allocated. A provider is a folder under `servebench/providers/` and one line in
the registry (`servebench/providers/__init__.py`); local comes first, SSH host lists and
Slurm allocations implement the same methods.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path
from typing import ClassVar, Protocol

from pydantic import BaseModel

from servebench.spec.campaign import ProviderSpecBase
from servebench.spec.node import Node

# A provider's optional capabilities: what it declares in `capabilities`, and the methods that
# come with each. The neutral code asks `capabilities` (never `hasattr`), and a campaign that
# needs one its provider lacks is refused when it is checked, naming the field.
CANCEL_ALLOCATION = "cancel-allocation"  # cancel_allocation() -> [[job, what was done]]: a scheduler's job
ATTACH = "attach"                        # attach(record): act inside a running run's allocation (`chaos`)
LINK_SHAPING = "link-shaping"            # shape_link / connect_node: delay, rate and cut of a node's link
CAPABILITIES = {
    CANCEL_ALLOCATION: "cancel the run's allocation (a scheduler's job)",
    ATTACH: "join a running run's allocation from another process",
    LINK_SHAPING: "set a node's link delay and rate, cut it off the network (nodes that are testbed hosts: "
                  "docs/testbed.md)",
}


class NodeProcess(Protocol):
    """A long-lived process on a node, started by the provider and stopped by PID there."""

    pid: int
    log_path: Path | None
    started_monotonic: float

    def alive(self) -> bool: ...

    def exit_code(self) -> int | None: ...

    def remember_descendants(self) -> None:
        """Note what it has spawned so far: stopped with it even if it left its process group."""

    def fetch_log(self) -> None:
        """Bring the log as written so far to `log_path` (a no-op where it is written there directly)."""


def run_tag(run_id: str) -> str:
    """The run's short tag on its nodes (every process's mark, run directories): derived from the
    run id, so a resumed run finds what the killed orchestrator left."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:8]


def check_capabilities(provider_class: type) -> frozenset[str]:
    """A provider class's declared capabilities, each one known (a typo would silently disable it)."""
    declared = getattr(provider_class, "capabilities", None)
    if not isinstance(declared, frozenset):
        raise TypeError(f"provider {provider_class.__name__} declares no `capabilities: ClassVar[frozenset[str]]` "
                        f"(frozenset() if it has none of {sorted(CAPABILITIES)})")
    unknown = sorted(declared - set(CAPABILITIES))
    if unknown:
        raise TypeError(f"provider {provider_class.__name__}: unknown capabilities {unknown}; "
                        f"known: {sorted(CAPABILITIES)}")
    return declared


class Provider(Protocol):
    kind: ClassVar[str]
    spec_model: ClassVar[type[ProviderSpecBase]]
    capabilities: ClassVar[frozenset[str]]  # the optional ones it has (CAPABILITIES), with their methods
    run_id: str          # the run's tag: every process started carries SERVEBENCH_PROCESS=<tag>.<n>

    @classmethod
    def host_cpus(cls) -> set[int]:
        """The CPUs of the host the load generator runs on."""

    @classmethod
    def spec_problems(cls, spec: ProviderSpecBase, host_cpus: set[int]) -> list[tuple[tuple, str]]:
        """What in the campaign's provider block cannot work (field path, message)."""

    def nodes(self) -> list[Node]:
        """The nodes as they are or will be allocated (no allocation: for `plan`)."""

    def allocate(self) -> list[Node]:
        """Get the nodes for this run and hold them until `release`."""

    def inventory(self, node: Node) -> dict:
        """The node's hardware facts (servebench.providers.inventory.collect, run on that node)."""

    def run(self, node: Node, argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run a short command on the node and return its output."""

    def free_port(self, node: Node) -> int:
        """A TCP port free on the node's address, chosen on the node."""

    def command(self, node: Node, argv: list[str]) -> list[str]:
        """The command line `start` runs for argv on the node (what `servebench plan` prints)."""

    def start(self, node: Node, argv: list[str], env: dict[str, str], log_path: Path,
              unset: list[str] = ()) -> NodeProcess:
        """Start a long-lived process on the node with `env` added and `unset` removed, output to log_path."""

    def stop(self, process: NodeProcess, grace_s: float = 20.0) -> int | None:
        """Stop the process and everything it spawned, by PID on its node; return its exit code."""

    def shm_entries(self, node: Node) -> set[str]:
        """The node's /dev/shm entries now."""

    def remove_shm_created_since(self, node: Node, before: set[str]) -> list[str]:
        """Remove the node's /dev/shm entries that appeared since `before` and no process uses."""

    def free_port_range(self, node: Node, size: int) -> int:
        """The first of `size` consecutive TCP ports free on the node's address, chosen on the node."""

    def shares(self, path: str) -> bool:
        """Whether `path` on this host is the same file tree on the node (this host itself, or a
        file system the campaign declares shared): then nothing is copied there."""

    def put_tree(self, node: Node, local: Path, remote: str) -> None:
        """Copy the directory `local` to `remote` on the node, replacing it once complete."""

    def get_tree(self, node: Node, remote: str, local: Path) -> bool:
        """Copy the node's directory `remote` into `local`; False if it is not there."""

    def tree_digest(self, node: Node, path: str) -> str | None:
        """`node_tools.tree_digest` of a directory, computed on the node (None: no such directory)."""

    def scratch_dir(self, node: Node) -> str:
        """The run's own directory on the node (what its processes get as TMPDIR, for files a
        process leaves for `get_tree`), removed at `release`."""

    def node_python(self, node: Node) -> str:
        """The python3 that runs servebench's own tools on the node (the node sampler, a client
        node's load generator): standard library only, so any node has it, whatever the engine
        build is (a venv, or static binaries with no python)."""

    def clock_offset(self, node: Node) -> float | None:
        """Seconds the node's wall clock is ahead of this host's; None when the node is this host
        (one clock: its monotonic readings compare with the load generator's directly)."""

    def claims(self) -> list[str]:
        """What this run must have to itself among what other runs on this machine could want
        (`servebench.providers.claims`: a CPU of this host, a CPU of an ssh host; none where a
        scheduler arbitrates)."""

    def allocation_record(self) -> dict:
        """What the run lands about what was allocated (a Slurm job id and node list, the hosts)."""

    def release(self) -> None:
        """Stop what is still running of this run and give back what was allocated."""

    def reclaim(self, record: dict) -> list[str]:
        """Stop what an earlier orchestrator of this run (same tag) left when it was killed: its
        marked processes on every node, its allocation (`record`: its `allocation_record`);
        return what was found and done, one line each."""

    # ---------------------------------------------------------------- optional (see `capabilities`)

    def cancel_allocation(self) -> list[list]:
        """CANCEL_ALLOCATION: cancel the run's allocation now, as an operator or a preemption would;
        [[job id, what was done]]."""

    def attach(self, record: dict) -> None:
        """ATTACH: act inside a running run's allocation (`record`: its `allocation_record`),
        which stays that run's: an attached provider never releases it."""

    def shape_link(self, testbed: str, node: Node, delay_ms: float, rate_mbit: float | None) -> dict:
        """LINK_SHAPING: the node's link with that one-way delay and rate cap (0, None: plain);
        the link as the kernel has it afterwards (`servebench.testbed.links.set_link`)."""

    def connect_node(self, testbed: str, node: Node, connected: bool) -> str:
        """LINK_SHAPING: cut the node off the network, or connect it again; the port's state read back."""
