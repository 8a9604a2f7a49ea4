"""The engine interface: what differs between vLLM and, later, llama.cpp.

An engine says what goes into its venv, how its server is started for a mode, and how
to tell it is ready and what it reports. It returns commands and data; running them is
the serve stage's business, so engines are tested without starting anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from servebench.campaign.schema import EngineSpec, ModeSpec


@dataclass(frozen=True)
class MultiNode:
    """One rank of a server that spans nodes with the engine's own launcher."""

    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int


@dataclass(frozen=True)
class ServerLaunch:
    """Everything needed to start one server: its main process, and for multi-node
    launchers the other nodes' processes (node name, launch)."""

    argv: list[str]
    env: dict[str, str]          # set on top of the inherited environment
    health_path: str = "/health"
    metrics_path: str = "/metrics"
    unset_env: list[str] = field(default_factory=list)
    companions: list[tuple[str, "ServerLaunch"]] = field(default_factory=list)


class Engine(Protocol):
    name: str
    generation_tokens_metric: str

    def requirements(self, spec: EngineSpec) -> list[str]:
        """Pinned packages for the engine venv, in install order."""

    def remove_after_install(self) -> list[str]:
        """Packages the engine's wheel drags in that break it and must be uninstalled."""

    def post_install(self, python: str, spec: EngineSpec) -> list[list[str]]:
        """Commands run with the engine venv's python after everything is installed."""

    def version_distribution(self, spec: EngineSpec) -> str:
        """The distribution whose version is the engine version."""

    def launch(self, *, python: str, spec: EngineSpec, mode: ModeSpec, model_dir: str, served_name: str,
               host: str, port: int, omp_bind: str, extra_env: dict[str, str], node_address: str,
               multinode: MultiNode | None = None, dtype: str = "auto") -> ServerLaunch:
        """The command and environment of one server process for a mode (or of one rank of it);
        `node_address` is the address its processes must announce to each other (the node's own)."""
