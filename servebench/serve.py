"""One engine server: start it for a mode, wait until it answers, stop it and clean up.

A mode's server starts once and serves all of that mode's cells. Readiness is the first
200 on the engine's health path; a server that exits or times out first is reported
with the tail of its log, which is kept in the run directory.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from servebench.engines import Engine, ServerLaunch
from servebench.processes import ManagedProcess, free_port, remove_shm_created_since, shm_entries
from servebench.providers import Node, Provider
from servebench.spec import EngineSpec, ModeSpec

HOST = "127.0.0.1"


class ServerFailed(Exception):
    pass


@dataclass
class Server:
    mode: str
    url: str
    port: int
    launch: ServerLaunch
    process: ManagedProcess
    log_path: Path
    shm_before: set[str]
    started_at: datetime
    ready_seconds: float | None = None
    stopped_at: datetime | None = None
    removed_shm: list[str] = field(default_factory=list)


def plan_launch(engine: Engine, *, python: str, spec: EngineSpec, mode: ModeSpec, model_dir: str,
                served_name: str, node: Node, port: int) -> ServerLaunch:
    return engine.launch(python=python, spec=spec, mode=mode, model_dir=model_dir, served_name=served_name,
                         host=HOST, port=port, node_cpus=node.cpus)


def start_server(provider: Provider, node: Node, launch: ServerLaunch, mode: str, port: int,
                 log_path: Path) -> Server:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    shm_before = shm_entries()
    process = provider.start(node, launch.argv, launch.env, log_path, unset=launch.unset_env)
    return Server(mode=mode, url=f"http://{HOST}:{port}", port=port, launch=launch, process=process,
                  log_path=log_path, shm_before=shm_before, started_at=datetime.now(timezone.utc))


def wait_ready(server: Server, timeout_s: float, poll_s: float = 0.5) -> float:
    """Block until the health path answers 200; return seconds since launch."""
    deadline = server.process.started_monotonic + timeout_s
    health = server.url + server.launch.health_path
    while time.monotonic() < deadline:
        if not server.process.alive():
            raise ServerFailed(f"server for mode {server.mode} exited with code {server.process.exit_code()} "
                               f"before it was ready; log {server.log_path}:\n{log_tail(server.log_path)}")
        if _status(health) == 200:
            server.process.remember_descendants()
            server.ready_seconds = round(time.monotonic() - server.process.started_monotonic, 2)
            return server.ready_seconds
        time.sleep(poll_s)
    raise ServerFailed(f"server for mode {server.mode} not ready after {timeout_s:.0f} s; "
                       f"log {server.log_path}:\n{log_tail(server.log_path)}")


def is_healthy(server: Server) -> bool:
    return server.process.alive() and _status(server.url + server.launch.health_path) == 200


def stop_server(provider: Provider, server: Server) -> Server:
    provider.stop(server.process)
    server.removed_shm = remove_shm_created_since(server.shm_before)
    server.stopped_at = datetime.now(timezone.utc)
    return server


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


def pick_port() -> int:
    return free_port(HOST)
