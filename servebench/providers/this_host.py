"""Processes on the orchestrator's own host: what a provider whose nodes live on the orchestrator's
machine (the local provider, test providers) does to run, start and stop processes and clean
/dev/shm. A provider of remote nodes (SSH, Slurm) does the same on the node instead."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import ClassVar, Sequence, cast

from servebench import processes
from servebench.processes import ManagedProcess
from servebench.providers import node_tools
from servebench.providers.base import Node, NodeProcess, Provider
from servebench.providers.claims import this_host_cpu_claims


class ThisHostProcesses(Provider):
    """The node access of the Provider interface (commands, files, processes) for nodes on this
    host; `command` says how argv runs on a node (the local provider pins it to the node's CPUs).
    A provider built on it gives the allocation. No optional capability: the nodes share this
    host's network and no scheduler holds them."""

    capabilities: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, run_id: str | None = None) -> None:
        self.run_id = run_id or secrets.token_hex(4)
        self._started: list[ManagedProcess] = []
        self._scratch: str | None = None

    def command(self, node: Node, argv: list[str]) -> list[str]:
        return list(argv)

    def run(self, node: Node, argv: list[str], timeout: float | None = None) -> subprocess.CompletedProcess:
        return processes.run_here(self.command(node, argv), timeout)

    def free_port(self, node: Node) -> int:
        return processes.free_port(node.address)

    def start(self, node: Node, argv: list[str], env: dict[str, str], log_path: Path,
              unset: Sequence[str] = ()) -> ManagedProcess:
        """The process gets the run's scratch directory as TMPDIR (as on a remote node): what an
        engine leaves in its temp dir when it is killed (vLLM's ZeroMQ sockets and `vllm_dist_*`
        rendezvous files) goes with that directory at release, never stays in /tmp."""
        mark = {node_tools.MARK_VARIABLE: f"{self.run_id}.{len(self._started) + 1}"}
        inherited = {k: v for k, v in os.environ.items() if k not in unset}
        full_env = inherited | {"TMPDIR": self.scratch_dir(node)} | env | mark
        process = ManagedProcess.start(self.command(node, argv), env=full_env, log_path=log_path)
        self._started.append(process)
        return process

    def stop(self, process: NodeProcess, grace_s: float = 20.0) -> int | None:
        # What this provider is handed back is what its `start` returned: a ManagedProcess.
        return cast(ManagedProcess, process).stop(grace_s=grace_s)

    def shm_entries(self, node: Node) -> set[str]:
        return processes.shm_entries()

    def remove_shm_created_since(self, node: Node, before: set[str]) -> list[str]:
        return processes.remove_shm_created_since(before)

    def free_port_range(self, node: Node, size: int) -> int:
        return node_tools.free_port_range(node.address, size)

    def shares(self, path: str) -> bool:
        return True  # every node is this host

    def put_tree(self, node: Node, local: Path, remote: str) -> None:
        if Path(remote).resolve() != local.resolve():
            shutil.copytree(local, remote, symlinks=True, dirs_exist_ok=True)

    def get_tree(self, node: Node, remote: str, local: Path) -> bool:
        if not Path(remote).is_dir():
            return False
        if Path(remote).resolve() != local.resolve():
            shutil.copytree(remote, local, symlinks=True, dirs_exist_ok=True)
        return True

    def tree_digest(self, node: Node, path: str) -> str | None:
        return node_tools.tree_digest(path)

    def scratch_dir(self, node: Node) -> str:
        """One directory of this run on this host (every node here shares it), made when first asked;
        named by the run's tag, so a resume of a killed run finds (and removes) it."""
        if self._scratch is None:
            self._scratch = scratch_path(self.run_id)
            os.makedirs(self._scratch, mode=0o700, exist_ok=True)
        return self._scratch

    def node_python(self, node: Node) -> str:
        return sys.executable

    def clock_offset(self, node: Node) -> float | None:
        return None

    def claims(self) -> list[str]:
        """Every CPU of this host the nodes use."""
        return this_host_cpu_claims(cpu for node in self.nodes() for cpu in node.cpus)

    def allocation_record(self) -> dict:
        return {"nodes": [node.model_dump() for node in self.nodes()]}

    def reclaim(self, record: dict) -> list[str]:
        """The killed orchestrator's processes on this host: every one carrying the run's mark
        (servers, samplers, the scraper, a load generator), stopped by PID; then its scratch directory
        (the processes' TMPDIR) goes."""
        found = node_tools.stop_marked(f"{self.run_id}.", grace_s=5.0)
        shutil.rmtree(scratch_path(self.run_id), ignore_errors=True)
        return [f"this host: stopped {len(found)} process(es) of the run: {found}"] if found else []

    def stop_leftovers(self) -> int:
        """Stop every process of this run still running (a stage that failed before stopping its
        own) and remove the run's scratch directory; return how many processes there were."""
        left = [p for p in self._started if p.alive()]
        for process in left:
            process.stop(grace_s=5)
        self._started.clear()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None
        return len(left)


def scratch_path(run_tag: str) -> str:
    """The run's scratch directory on this host, in the temp dir or /tmp when that is long: the
    Unix socket paths an engine makes in it must stay under 108 bytes (vLLM's are 37 bytes
    more: a UUID)."""
    return os.path.join(short_tmp_dir(), f"servebench-run-{run_tag}")


def short_tmp_dir() -> str:
    """The temp dir, or /tmp when TMPDIR is too long to hold the Unix socket paths an engine or
    Ray makes under it."""
    default = tempfile.gettempdir()
    return default if len(default) <= 20 else "/tmp"
