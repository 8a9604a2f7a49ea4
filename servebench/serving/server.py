"""One engine server: start its processes through the provider, wait until it answers,
stop it and clean up.

A mode's server starts once and serves all of that mode's cells. Its processes start stage
after stage, the chains of a stage side by side and each chain in the order the engine gives; one
with a `ready_port` (an RPC worker the API process will connect to) is waited on before the next
of its chain, and before the next stage, starts. Readiness is the first 200 on the API
process's health path; a process that exits or a server that times out first is reported
with the tail of its log, which is kept in the run directory. A process with `env_files` (the
run's token as an engine's key variable) starts under a shell that sets them from the files on
its node and execs it (servebench/load/run_secret.py): the value is in no command line.
"""

from __future__ import annotations

import signal
import socket
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

from servebench.engines.base import ProcessLaunch, ServerLaunch
from servebench.load.run_secret import env_from_files_argv
from servebench.logs import tail_text
from servebench.platform.emulation import node_argv
from servebench.providers.base import Node, NodeProcess, Provider
from servebench.providers.fanout import each_node, hosts_at_once
from servebench.serving.balancer import Balancer, check_balancer, stop_balancer
from servebench.waiting import poll


class ServerFailed(Exception):
    pass


@dataclass
class RunningProcess:
    launch: ProcessLaunch
    node: Node
    process: NodeProcess
    log_path: Path


@dataclass
class Server:
    mode: str
    url: str
    launch: ServerLaunch
    processes: list[RunningProcess]
    shm_before: dict[str, set[str]]                                # node name -> /dev/shm entries before
    started_at: datetime
    started_monotonic: float = field(default_factory=time.monotonic)
    ready_seconds: float | None = None
    stopped_at: datetime | None = None
    removed_shm: list[str] = field(default_factory=list)
    # Instances scraped one by one, by name: a `replicas: N` mode's servers behind its balancer
    # ({"r0": url, ...}); empty for one server (its data-parallel engines come apart by label)
    instance_urls: dict[str, str] = field(default_factory=dict)
    balancer: Balancer | None = None                               # nginx in front of the replicas, at `url`
    api_key_file: str | None = None        # the run's token file on this host: what the gate sends (None: no key)
    client_key_file: str | None = None     # the same file where the load generator runs (its node's path)
    served_name: str = ""                  # the name it serves the model under: what every request names
    external: bool = False                 # not servebench's: no process of it here to follow or stop

    @property
    def api(self) -> RunningProcess:
        return next(p for p in self.processes if p.launch.api)

    @property
    def api_process(self) -> RunningProcess | None:
        """The API process, or None for a server servebench did not start."""
        return next((p for p in self.processes if p.launch.api), None)

    @property
    def log_path(self) -> Path | None:
        """The API process's log (None: a server servebench did not start keeps its log to itself)."""
        api = self.api_process
        return api.log_path if api is not None else None

    @property
    def node_name(self) -> str:
        return self.api.node.name

    @property
    def port(self) -> int:
        """Where `url` answers: the API process's port, or the balancer's in front of a mode's replicas."""
        if self.balancer is not None:
            return urlsplit(self.url).port or self.launch.port
        return self.launch.port

    def health_urls(self) -> list[str]:
        """The health path at `url`, and at each replica's own URL (nginx would answer while one is down)."""
        return [base + self.launch.health_path for base in [self.url, *self.instance_urls.values()]]

    def pids_by_node(self) -> dict[str, list[int]]:
        pids: dict[str, list[int]] = {}
        for running in self.processes:
            pids.setdefault(running.node.name, []).append(running.process.pid)
        return pids


def start_server(provider: Provider, nodes: list[Node], launch: ServerLaunch, mode: str, log_dir: Path,
                 ready_timeout_s: float) -> Server:
    """Start the server's processes, each on its node, stage after stage: within a stage the chains side by
    side, `hosts_at_once` at a time (a `replicas` mode's replicas, a mode's RPC workers), in order within a
    chain (a process with a ready_port is waited on before the next starts); on failure, what was started is
    stopped."""
    log_dir.mkdir(parents=True, exist_ok=True)
    by_name = {n.name: n for n in nodes}
    used = list({by_name[p.node].name: by_name[p.node] for p in launch.processes}.values())
    api_node = by_name[launch.api.node]
    at_once = hosts_at_once(provider)
    server = Server(mode=mode, url=f"http://{api_node.address}:{launch.port}", launch=launch, processes=[],
                    shm_before=dict(zip([n.name for n in used], each_node(used, provider.shm_entries, at_once,
                                                                          name=lambda node: node.name))),
                    started_at=datetime.now(timezone.utc))

    def start_chain(chain: list[ProcessLaunch]) -> None:
        for process_launch in chain:
            node = by_name[process_launch.node]
            suffix = f".{process_launch.label}" if process_launch.label else ""
            log_path = log_dir / f"{mode}{suffix}.log"
            argv = env_from_files_argv(process_launch.env_files, node_argv(node, process_launch.argv))
            process = provider.start(node, argv, process_launch.env, log_path, unset=process_launch.unset_env)
            running = RunningProcess(process_launch, node, process, log_path)
            server.processes.append(running)   # at once: a failure elsewhere stops it with the rest
            if process_launch.ready_port is not None and not process_launch.api:
                _wait_port(server, running, ready_timeout_s)

    try:
        for chains in process_stages(launch.processes):
            each_node(chains, start_chain, at_once if len(chains) > 1 else 1,
                      name=lambda chain: chain[0].label or mode)
    except BaseException:
        stop_server(provider, server)
        raise
    order = {id(process): index for index, process in enumerate(launch.processes)}
    server.processes.sort(key=lambda running: order[id(running.launch)])   # the launch's order, whoever was first
    return server


def process_chains(processes: list[ProcessLaunch]) -> list[list[ProcessLaunch]]:
    """The processes by `chain`, each chain in the launch's order, the chains in order of their first process."""
    chains: dict[int, list[ProcessLaunch]] = {}
    for process in processes:
        chains.setdefault(process.chain, []).append(process)
    return list(chains.values())


def process_stages(processes: list[ProcessLaunch]) -> list[list[list[ProcessLaunch]]]:
    """The processes by `stage` (lowest first), each stage's processes by chain (process_chains)."""
    stages = sorted({process.stage for process in processes})
    return [process_chains([p for p in processes if p.stage == stage]) for stage in stages]


def wait_ready(server: Server, timeout_s: float, poll_s: float = 0.5) -> float:
    """Block until the health path answers 200; return seconds since the first process started."""
    def ready() -> bool:
        _raise_if_exited(server)
        return all(_status(url) == 200 for url in server.health_urls())

    if poll(ready, _time_left(server, timeout_s), interval_s=poll_s):
        for running in server.processes:
            running.process.remember_descendants()
        server.ready_seconds = round(time.monotonic() - server.started_monotonic, 2)
        return server.ready_seconds
    silent = [url for url in server.health_urls() if _status(url) != 200] if server.instance_urls else []
    not_ready = (f"server for mode {server.mode} not ready after {timeout_s:.0f} s"
                 + (f" (no 200 from {', '.join(silent)})" if silent else ""))
    api = server.api_process
    if api is None:  # a server servebench did not start: its log is its own
        raise ServerFailed(f"{not_ready}: no 200 from {server.health_urls()[0]}")
    api.process.fetch_log()
    raise ServerFailed(f"{not_ready}; log {api.log_path}:\n{tail_text(api.log_path)}")


def is_healthy(server: Server) -> bool:
    return (all(r.process.alive() for r in server.processes)
            and (server.balancer is None or server.balancer.process.alive())
            and all(_status(url) == 200 for url in server.health_urls()))


def exit_codes(server: Server) -> str:
    """'api 0, node1 -9': how the server's processes ended (for a cell's error); a replicas mode's
    `r0 None, r1 -9, balancer None`."""
    codes = ", ".join(f"{r.launch.label or 'api'} {describe_exit(r.process.exit_code())}" for r in server.processes)
    if server.balancer is not None:
        codes += f", balancer {describe_exit(server.balancer.process.exit_code())}"
    return codes


def describe_exit(code: int | None) -> str:
    """An exit code, with the cause when it is a signal that says something: SIGILL is a build for
    CPU features this node lacks (qemu-user re-raises a guest's SIGILL on itself)."""
    if code is None:
        return "None"
    number = -code if code < 0 else code - 128 if 128 < code < 160 else None
    if number == signal.SIGILL:
        return f"{code} (SIGILL: an instruction this node's CPU lacks: the build's target does not fit it)"
    if number is not None and code < 0:
        return f"{code} ({signal.Signals(number).name})" if number in signal.Signals._value2member_map_ else str(code)
    return str(code)


def stop_server(provider: Provider, server: Server) -> Server:
    """Stop the balancer of a replicas mode first, then the API process (no request reaches a
    half-stopped server; a replicas mode's API processes, all of them), then the others in
    reverse start order; then clear what they left in each node's /dev/shm. A node that cannot
    be reached (its host gone) does not keep the others from being stopped and cleaned: the
    failures are raised together at the end (the provider's release tries again)."""
    ordered = sorted(reversed(server.processes), key=lambda r: not r.launch.api)
    failures: dict[str, str] = {}
    if server.balancer is not None:
        try:
            stop_balancer(provider, server.balancer)
        except Exception as exc:
            failures["balancer"] = _first_line(exc)
    for running in ordered:
        try:
            provider.stop(running.process)
        except Exception as exc:
            failures[running.node.name] = _first_line(exc)
    by_name = {r.node.name: r.node for r in server.processes}
    for name, before in server.shm_before.items():
        if name in by_name and name not in failures:
            try:
                server.removed_shm += provider.remove_shm_created_since(by_name[name], before)
            except Exception as exc:
                failures[name] = _first_line(exc)
    server.stopped_at = datetime.now(timezone.utc)
    if failures:
        raise RuntimeError("; ".join(f"{'' if name == 'balancer' else 'node '}{name}: {why}"
                                     for name, why in failures.items()))
    return server


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _raise_if_exited(server: Server) -> None:
    if server.balancer is not None:
        check_balancer(server.balancer)
    for running in server.processes:
        if not running.process.alive():
            running.process.fetch_log()
            what = (("server" + (f" {running.launch.label}" if running.launch.label else "")) if running.launch.api
                    else f"process {running.launch.label or running.node.name}")
            raise ServerFailed(f"{what} of mode {server.mode} exited with code "
                               f"{describe_exit(running.process.exit_code())} "
                               f"before it was ready; log {running.log_path}:\n{tail_text(running.log_path)}")


def _wait_port(server: Server, running: RunningProcess, timeout_s: float, poll_s: float = 0.2) -> None:
    """Wait until a process that others connect to accepts on its port."""

    def accepts() -> bool:
        _raise_if_exited(server)
        try:
            with socket.create_connection((running.node.address, running.launch.ready_port), timeout=1):
                return True
        except OSError:
            return False

    if poll(accepts, _time_left(server, timeout_s), interval_s=poll_s):
        return
    running.process.fetch_log()
    raise ServerFailed(f"process {running.launch.label} of mode {server.mode} did not accept on port "
                       f"{running.launch.ready_port} within {timeout_s:.0f} s; log {running.log_path}:\n"
                       f"{tail_text(running.log_path)}")


def _time_left(server: Server, timeout_s: float) -> float:
    """What is left of a timeout counted from the server's start (its first process)."""
    return server.started_monotonic + timeout_s - time.monotonic()


def _status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None
