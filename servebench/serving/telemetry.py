"""A server's telemetry while it lives: the sampler on each node and the /metrics scraper on the
orchestrator (`servebench/telemetry/` holds the programs), and the files their samples land from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from servebench.processes import ManagedProcess
from servebench.providers import Node, NodeProcess
from servebench.serving.server import Server


@dataclass
class Telemetry:
    mode: str
    node_processes: list[NodeProcess] = field(default_factory=list)  # one sampler per node, on that node
    scraper: ManagedProcess | None = None                            # on the orchestrator
    node_files: list[Path] = field(default_factory=list)
    server_files: list[Path] = field(default_factory=list)
    remote_samples: dict[Path, tuple[Path, float]] = field(default_factory=dict)  # samples <- (raw log, clock offset)


def engine_pids(server: Server, nodes: list[Node], shared_pids: dict[str, list[int]]) -> dict[str, list[int]]:
    """The processes to follow on each node: the server's processes there, and the shared services'."""
    pids: dict[str, list[int]] = {node.name: [] for node in nodes}
    for name, found in server.pids_by_node().items():
        pids[name] += found
    for name, found in shared_pids.items():
        pids[name] += found
    return pids


def files_stem(out: Path, mode: str) -> str:
    """The name the telemetry files of this start of the mode's server begin with: the mode's name,
    or `<mode>.<n>` for its n-th start in the run (a server restarted after a fault: the samples of
    the cells before the restart are kept, not overwritten)."""
    stem, n = mode, 1
    while (out / f"{stem}.server.log").exists():
        n += 1
        stem = f"{mode}.{n}"
    return stem
