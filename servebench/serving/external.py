"""A server servebench did not start (`Engine.starts_servers` False): attached to instead of started, its
health path waited on, its key handed over as a file, telemetry started as for any server; never stopped.

The key comes from the environment variable the campaign names (`ExternalServer.api_key_env`): its value
is written to a 0600 file in the run's secret directory (servebench/load/run_secret.py), beside the run's
own token, and from there it goes where the run's token goes: to the load generator's node, to the gate and
to the scraper (`SERVEBENCH_API_KEY_FILE`). So the key is never on a command line, in the plan, a log, the
warehouse or a report."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

from servebench.config.campaign import ModeSpec
from servebench.engines.base import ExternalServer, ServerLaunch
from servebench.load.run_secret import ensure_run_secret, node_secret_path, place_secret
from servebench.serving.deployment import Deployment
from servebench.serving.server import Server


class ExternalServerError(RuntimeError):
    """The server a mode measures cannot be used as the campaign names it (no such server, no key)."""


def external_server_of(d: Deployment, mode: ModeSpec) -> ExternalServer:
    """Where the mode's server answers, as the engine says it; a mode with none named is refused."""
    server = d.engine.external_server(d.spec, mode)
    if server is None:
        raise ExternalServerError(f"mode {mode.name}: engine {d.engine.kind} names no server for it")
    return server


def key_file_name(server: ExternalServer) -> str:
    """The key file's name in the run's secret directory: one per variable (a reference may have its own)."""
    assert server.api_key_env is not None
    return f"key.{server.api_key_env}"


def write_key_file(run_dir: str, server: ExternalServer) -> Path | None:
    """The server's key, read from the environment variable the campaign names, in a 0600 file of the run's
    secret directory (0700), written anew (exclusively, never through a link); None: it asks for no key."""
    if server.api_key_env is None:
        return None
    key = os.environ.get(server.api_key_env, "").strip()
    if not key:
        raise ExternalServerError(f"engine.api_key_env: the environment variable {server.api_key_env} is not set "
                                  f"(or empty) in servebench's environment; the server at {server.url} asks for "
                                  "its key")
    path = ensure_run_secret(run_dir).parent / key_file_name(server)
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key)
    return path


def client_key_path(d: Deployment, local: Path) -> str:
    """Where the load generator reads the key: this file on this host, or its copy on the client node (the
    secret directory goes there as the run's token does)."""
    if d.client is None:
        return str(local)
    place_secret(d.provider, [d.client.node], d.run_dir)
    return str(Path(node_secret_path(d.provider, d.client.node, d.run_dir)).parent / local.name)


def attach_server(d: Deployment, mode: ModeSpec) -> Server:
    """The mode's `Server`: the external one's URL and health path, no process of servebench's, its key
    file where this process and the load generator read it (none: no key)."""
    external = external_server_of(d, mode)
    key = write_key_file(d.run_dir, external)
    port = external_port(external.url)
    server = Server(mode=mode.name, url=external.url, launch=ServerLaunch(processes=[], port=port,
                                                                          health_path=external.health_path),
                    processes=[], shm_before={}, started_at=datetime.now(timezone.utc), external=True)
    server.served_name = external.served_name
    if key is not None:
        server.api_key_file, server.client_key_file = str(key), client_key_path(d, key)
    return server


def external_port(url: str) -> int:
    """The port the URL names, or its scheme's."""
    parts = urlsplit(url)
    return parts.port or (443 if parts.scheme == "https" else 80)
