"""The provider interface: where nodes come from and how a process runs on one.

Small abstract parts, as ReFrame splits schedulers from launchers: `NodeAllocation` (where the
nodes come from, what the run holds, giving them back) and node access in three parts:
`NodeCommands` (a short command, ports, the node's python and clock), `NodeFiles` (directory
trees to and from the node, its scratch directory) and `NodeProcesses` (long-lived processes
stopped by PID there, /dev/shm housekeeping). `Provider` is all four; a provider is a folder
under `servebench/providers/` and one line in the registry (`servebench/providers/__init__.py`),
which refuses a class with a method missing.

Link shaping is not a provider's own: `LinkShaper` is its interface, implemented by a layer
above (the testbed's switch: `servebench.devtools.testbed.links.TestbedLinks`) and handed to a provider
whose nodes can have their links shaped (`Provider.use_link_shaper`, `get_provider(links=...)`).
"""

from __future__ import annotations

import hashlib
import subprocess
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Protocol, Sequence

from servebench.config.campaign import ProviderSpecBase
from servebench.config.node import Node
from servebench.platform.numa import PUBLISHED, Layout, this_host_layout

# A provider's optional capabilities: what it declares in `capabilities`, and the methods that
# come with each. The neutral code asks `capabilities` (never `hasattr`), and a campaign that
# needs one its provider lacks is refused when it is checked, naming the field.
CANCEL_ALLOCATION = "cancel-allocation"  # cancel_allocation() -> [[job, what was done]]: a scheduler's job
ATTACH = "attach"                        # attach(record): act inside a running run's allocation (`chaos`)
LINK_SHAPING = "link-shaping"            # shape_link / connect_node: delay, rate and cut of a node's link
BATCH_JOBS = "batch-jobs"                # batch_script / submit_batch / batch_state / enclosing_job / job_listed
CAPABILITIES = {
    CANCEL_ALLOCATION: "cancel the run's allocation (a scheduler's job)",
    ATTACH: "join a running run's allocation from another process",
    LINK_SHAPING: "set a node's link delay and rate, cut it off the network (nodes that are testbed hosts: "
                  "docs/testbed.md)",
    BATCH_JOBS: "run the campaign as a batch job of its scheduler (`servebench submit`), the orchestrator inside it",
}
# The methods a provider class must have of its own when it declares the capability (link
# shaping's are the handed `LinkShaper`'s: nothing of the provider's own).
CAPABILITY_METHODS: dict[str, tuple[str, ...]] = {
    CANCEL_ALLOCATION: ("cancel_allocation",),
    ATTACH: ("attach",),
    LINK_SHAPING: (),
    BATCH_JOBS: ("batch_script", "submit_batch", "batch_state", "enclosing_job", "job_listed"),
}


@dataclass(frozen=True)
class BatchRequest:
    """One batch job of a campaign's run (BATCH_JOBS): the orchestrator's command inside the job (absolute
    paths: the job starts it on one of its nodes), where it runs, where the job's output goes (`%j`: the job
    id) and a time limit in the scheduler's syntax (None: the campaign's own)."""

    campaign: str
    command: list[str]
    workdir: Path
    log: Path
    time_limit: str | None = None


@dataclass(frozen=True)
class BatchState:
    """A submitted job as its scheduler tells it: its state, its exit code, whether it has ended and how well."""

    state: str
    exit_code: str
    ended: bool
    completed: bool



def node_numa(declared: Layout | None, emulate: str | None, this_host: bool) -> Layout:
    """A node's NUMA layout: the campaign's, else the published one of the target it is (`emulate`), else the
    orchestrator's own where the node is this host, else unknown (empty: the node's CPUs are one group)."""
    if declared:
        return declared
    if emulate in PUBLISHED:
        return PUBLISHED[emulate]
    return this_host_layout() if this_host else []


class NodeProcess(Protocol):
    """A long-lived process on a node, started by the provider and stopped by PID there.

    A Protocol, not an ABC: the process of a provider on this host is `servebench.processes.
    ManagedProcess`, a utility of the floor below the providers, which cannot inherit from here;
    what a provider returns from `start` only has to have these members."""

    pid: int
    log_path: Path | None
    started_monotonic: float

    def alive(self) -> bool: ...

    def exit_code(self) -> int | None: ...

    def remember_descendants(self) -> None:
        """Note what it has spawned so far: stopped with it even if it left its process group."""

    def fetch_log(self) -> Path | None:
        """Bring the log as written so far to `log_path` (a no-op where it is written there directly);
        a provider that copies it may return the copy's path (None: nothing fetched)."""


def run_tag(run_id: str) -> str:
    """The run's short tag on its nodes (every process's mark, run directories): derived from the
    run id, so a resumed run finds what the killed orchestrator left."""
    return hashlib.sha256(run_id.encode()).hexdigest()[:8]


def check_capabilities(provider_class: type) -> frozenset[str]:
    """A provider class's declared capabilities, each one known (a typo would silently disable it)
    and each with its methods overridden (the base's only say the provider lacks it)."""
    declared = getattr(provider_class, "capabilities", None)
    if not isinstance(declared, frozenset):
        raise TypeError(f"provider {provider_class.__name__} declares no `capabilities: ClassVar[frozenset[str]]` "
                        f"(frozenset() if it has none of {sorted(CAPABILITIES)})")
    unknown = sorted(declared - set(CAPABILITIES))
    if unknown:
        raise TypeError(f"provider {provider_class.__name__}: unknown capabilities {unknown}; "
                        f"known: {sorted(CAPABILITIES)}")
    missing = [f"{capability} ({method})" for capability in sorted(declared)
               for method in CAPABILITY_METHODS[capability]
               if getattr(provider_class, method, None) is getattr(Provider, method)]
    if missing:
        raise TypeError(f"provider {provider_class.__name__} declares capabilities without their methods: "
                        f"{', '.join(missing)}")
    return declared


# ---------------------------------------------------------------------------- link shaping

class LinkShaper(ABC):
    """Sets the network links of nodes: one-way delay, a rate cap, cut off or connected. Owned by
    the layer that has the network (the project's testbed: `servebench.devtools.testbed.links.TestbedLinks`)
    and handed to a provider that declares LINK_SHAPING; `testbed` names the network, as the
    campaign's `network.testbed` and a cut-host fault's `testbed` do."""

    @abstractmethod
    def shape_link(self, testbed: str, node: Node, delay_ms: float, rate_mbit: float | None) -> dict:
        """The node's link with that one-way delay and rate cap (0, None: plain); the link as
        the kernel has it afterwards (a non-empty `problems` list: not as set)."""

    @abstractmethod
    def connect_node(self, testbed: str, node: Node, connected: bool) -> str:
        """Cut the node off the network, or connect it again; the port's state read back."""


# ---------------------------------------------------------------------------- the parts of a provider

class NodeAllocation(ABC):
    """Where the nodes come from: the campaign's block, the nodes, holding them for the run and
    giving them back, and what the run records about them."""

    kind: ClassVar[str]
    spec_model: ClassVar[type[ProviderSpecBase]]
    capabilities: ClassVar[frozenset[str]]  # the optional ones it has (CAPABILITIES), with their methods
    run_id: str          # the run's tag: every process started carries SERVEBENCH_PROCESS=<tag>.<n>

    @classmethod
    @abstractmethod
    def host_cpus(cls) -> set[int]:
        """The CPUs of the host the load generator runs on."""

    @classmethod
    @abstractmethod
    def spec_problems(cls, spec: ProviderSpecBase, host_cpus: set[int]) -> list[tuple[tuple, str]]:
        """What in the campaign's provider block cannot work (field path, message)."""

    @abstractmethod
    def nodes(self) -> list[Node]:
        """The nodes as they are or will be allocated (no allocation: for `plan`)."""

    @abstractmethod
    def allocate(self) -> list[Node]:
        """Get the nodes for this run and hold them until `release`."""

    @abstractmethod
    def inventory(self, node: Node) -> dict:
        """The node's hardware facts (servebench.providers.inventory.collect, run on that node)."""

    @abstractmethod
    def claims(self) -> list[str]:
        """What this run must have to itself among what other runs from the orchestrator's machine could want
        (`servebench.providers.claims`: a CPU of this host, a CPU of an ssh host; none where a
        scheduler arbitrates)."""

    @abstractmethod
    def allocation_record(self) -> dict:
        """What the run lands about what was allocated (a Slurm job id and node list, the hosts)."""

    @abstractmethod
    def release(self) -> None:
        """Stop what is still running of this run and give back what was allocated."""

    @abstractmethod
    def reclaim(self, record: dict) -> list[str]:
        """Stop what an earlier orchestrator of this run (same tag) left when it was killed: its
        marked processes on every node, its allocation (`record`: its `allocation_record`);
        return what was found and done, one line each."""


class NodeCommands(ABC):
    """Short commands on a node, and what is asked of the node itself: ports, its python, its clock."""

    @abstractmethod
    def run(self, node: Node, argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
        """Run a short command on the node and return its output."""

    @abstractmethod
    def command(self, node: Node, argv: list[str]) -> list[str]:
        """The command line `start` runs for argv on the node (what `servebench plan` prints)."""

    def environment_lines(self) -> list[str]:
        """What else decides a node command's environment, for the plan (Slurm: srun's --export)."""
        return []

    @abstractmethod
    def free_port(self, node: Node) -> int:
        """A TCP port free on the node's address, chosen on the node."""

    @abstractmethod
    def free_port_range(self, node: Node, size: int) -> int:
        """The first of `size` consecutive TCP ports free on the node's address, chosen on the node."""

    @abstractmethod
    def node_python(self, node: Node) -> str:
        """The python3 that runs servebench's own tools on the node (the node sampler, a client
        node's load generator): standard library only, so any node has it, whatever the engine
        build is (a venv, or static binaries with no python)."""

    @abstractmethod
    def clock_offset(self, node: Node) -> float | None:
        """Seconds the node's wall clock is ahead of this host's; None when the node is this host
        (one clock: its monotonic readings compare with the load generator's directly)."""


class NodeFiles(ABC):
    """Directory trees to and from a node, and the run's own directory there."""

    @abstractmethod
    def shares(self, path: str) -> bool:
        """Whether `path` on this host is the same file tree on the node (this host itself, or a
        file system the campaign declares shared): then nothing is copied there."""

    @abstractmethod
    def put_tree(self, node: Node, local: Path, remote: str) -> None:
        """Copy the directory `local` to `remote` on the node, replacing it once complete."""

    @abstractmethod
    def get_tree(self, node: Node, remote: str, local: Path) -> bool:
        """Copy the node's directory `remote` into `local`; False if it is not there."""

    @abstractmethod
    def tree_digest(self, node: Node, path: str) -> str | None:
        """`node_tools.tree_digest` of a directory, computed on the node (None: no such directory)."""

    @abstractmethod
    def scratch_dir(self, node: Node) -> str:
        """The run's own directory on the node (what its processes get as TMPDIR, for files a
        process leaves for `get_tree`), removed at `release`."""


class NodeProcesses(ABC):
    """Long-lived processes on a node, stopped by PID there, and the node's /dev/shm around them."""

    @abstractmethod
    def start(self, node: Node, argv: list[str], env: dict[str, str], log_path: Path,
              unset: Sequence[str] = ()) -> NodeProcess:
        """Start a long-lived process on the node with `env` added and `unset` removed, output to log_path."""

    @abstractmethod
    def stop(self, process: NodeProcess, grace_s: float = 20.0) -> int | None:
        """Stop the process and everything it spawned, by PID on its node; return its exit code."""

    @abstractmethod
    def shm_entries(self, node: Node) -> set[str]:
        """The node's /dev/shm entries now."""

    @abstractmethod
    def remove_shm_created_since(self, node: Node, before: set[str]) -> list[str]:
        """Remove the node's /dev/shm entries that appeared since `before` and no process uses."""


class Provider(NodeAllocation, NodeCommands, NodeFiles, NodeProcesses):
    """What a provider class implements: every part, on one object.

    Inherited rather than composed: callers keep one object and call `provider.start(...)`,
    `provider.put_tree(...)` on it, and the parts of one provider share its state (the run id,
    one channel to each node that carries its commands, files and processes alike). Each part
    is still a type of its own, for a caller that needs only it (`NodeFiles` to place a tree).

    The optional capabilities' methods are here so a call to one the provider lacks says so
    (the campaign check refuses such a campaign before: `capability_problem`)."""

    link_shaper: LinkShaper | None = None  # handed from above (`use_link_shaper`): the testbed's links

    def use_link_shaper(self, shaper: LinkShaper) -> None:
        """Shape the links of this provider's nodes with `shaper` (LINK_SHAPING)."""
        self.link_shaper = shaper

    def cancel_allocation(self) -> list[list]:
        """CANCEL_ALLOCATION: cancel the run's allocation now, as an operator or a preemption would;
        [[job id, what was done]]."""
        raise self._lacks(CANCEL_ALLOCATION)

    def attach(self, record: dict) -> None:
        """ATTACH: act inside a running run's allocation (`record`: its `allocation_record`),
        which stays that run's: an attached provider never releases it."""
        raise self._lacks(ATTACH)

    def batch_script(self, request: BatchRequest) -> str:
        """BATCH_JOBS: the job script of the campaign's run, submitted nowhere."""
        raise self._lacks(BATCH_JOBS)

    def submit_batch(self, script: Path) -> str:
        """BATCH_JOBS: submit the script; the scheduler's job id."""
        raise self._lacks(BATCH_JOBS)

    def batch_state(self, job_id: str) -> BatchState | None:
        """BATCH_JOBS: the job as the scheduler tells it now; None: it knows no such job (any more)."""
        raise self._lacks(BATCH_JOBS)

    def enclosing_job(self) -> str | None:
        """BATCH_JOBS: the job this process runs in (a run in it uses its allocation), or None."""
        raise self._lacks(BATCH_JOBS)

    def job_listed(self, job_id: str) -> bool:
        """BATCH_JOBS: whether the scheduler still lists the job (pending, running, ending)."""
        raise self._lacks(BATCH_JOBS)

    def shape_link(self, testbed: str, node: Node, delay_ms: float, rate_mbit: float | None) -> dict:
        """LINK_SHAPING: the node's link with that one-way delay and rate cap, by the handed shaper."""
        return self._shaper().shape_link(testbed, node, delay_ms, rate_mbit)

    def connect_node(self, testbed: str, node: Node, connected: bool) -> str:
        """LINK_SHAPING: cut the node off the network, or connect it again, by the handed shaper."""
        return self._shaper().connect_node(testbed, node, connected)

    def _shaper(self) -> LinkShaper:
        if LINK_SHAPING not in self.capabilities:
            raise self._lacks(LINK_SHAPING)
        if self.link_shaper is None:
            raise RuntimeError(f"provider {self.kind}: no link shaper was handed to it (`use_link_shaper`, "
                               "`get_provider(links=...)`: the testbed's is "
                               "servebench.devtools.testbed.links.TestbedLinks)")
        return self.link_shaper

    def _lacks(self, capability: str) -> NotImplementedError:
        return NotImplementedError(f"provider {self.kind} cannot {CAPABILITIES[capability]} "
                                   f"(it does not declare {capability!r})")
