"""A server's telemetry, the orchestrator's side: a sampler started on every node
(`servebench.telemetry.node_sampler`) and a /metrics scraper on the orchestrator (`servebench.telemetry.scraper`)
for the life of the server, stopped with it, and the files their samples land from (`Telemetry`). The programs
themselves are `servebench/telemetry/`: they run on nodes with the standard library and their own folder."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from servebench.cpus import format_cpu_list
from servebench.processes import ManagedProcess
from servebench.progress import reporter
from servebench.providers import Node, NodeProcess, Provider, node_tools
from servebench.providers.fanout import hosts_at_once, outcomes
from servebench.serving.deployment import Deployment
from servebench.serving.server import Server
from servebench.telemetry.node_sampler import boot_id
from servebench.telemetry.timebase import rewrite_in_orchestrator_time


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


def start_telemetry(deployment: Deployment, server: Server) -> Telemetry:
    """Every node's sampler (a node whose sampler does not start is said, the others go on) and the scraper
    (none when the engine reads nothing of the server's: no metrics, no state)."""
    d = deployment
    out = Path(d.run_dir) / "telemetry"
    out.mkdir(parents=True, exist_ok=True)
    telemetry = Telemetry(mode=server.mode)
    stem = files_stem(out, server.mode)
    shared = d.shared.pids_by_node() if d.shared is not None else {}
    pids_by_node = engine_pids(server, d.sampled_nodes, shared)
    started = outcomes(d.sampled_nodes, lambda node: start_node_sampler(d, stem, node, pids_by_node[node.name], out),
                       hosts_at_once(d.provider))
    for outcome in started:  # in the nodes' order, whatever order they started in
        if outcome.result is not None:
            outcome.result.add_to(telemetry)
        else:  # a node gone (its host unreachable) must not keep the others' modes from serving
            exc = outcome.error
            reporter().stage(f"mode {server.mode}: no samples of node {outcome.item.name}: the sampler did not "
                             f"start: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
    if not (d.engine.api.metrics or d.engine.api.state_sampler):  # a server whose /metrics is not read
        return telemetry
    path = out / f"{stem}.server.jsonl"
    mark = {node_tools.MARK_VARIABLE: f"{d.provider.run_id}.scraper",  # a resume finds it if we are killed
            node_tools.INSTRUMENT_VARIABLE: "1"}
    telemetry.scraper = ManagedProcess.start(scraper_argv(d, server, path), env=os.environ | mark,
                                             log_path=out / f"{stem}.server.log")
    telemetry.server_files.append(path)
    return telemetry


def scraper_argv(d: Deployment, server: Server, path: Path) -> list[str]:
    """The scraper of the server's /metrics: the engine's metrics by column, its state sampler if any, and
    the server's instances scraped one by one (a `replicas:` mode's servers behind its balancer: the row is
    their aggregate, each kept by name; one server's DP engines come apart by label without them)."""
    metrics = [flag for name, column in d.engine.api.metrics.items() for flag in ("--metric", f"{name}={column}")]
    if d.engine.api.state_sampler:
        metrics += ["--state", d.engine.api.state_sampler]
    metrics += [flag for name, url in server.instance_urls.items() for flag in ("--instance", f"{name}={url}")]
    return [sys.executable, "-m", "servebench.telemetry.scraper", "--url", server.url, "--mode", server.mode,
            "--hz", f"{d.campaign.telemetry.scrape_hz:g}", *metrics, "--out", str(path)]


def node_sampler_argv(d: Deployment, node: Node, pids: list[int], out: str) -> list[str]:
    """The node's sampler following `pids`, by the node's python3 (standard library only)."""
    return [d.provider.node_python(node), "-m", "servebench.telemetry.node_sampler", "--node", node.name,
            "--cpus", format_cpu_list(node.cpus), "--pids", ",".join(map(str, pids)),
            "--hz", f"{d.campaign.telemetry.node_hz:g}", "--out", out,
            "--orchestrator", f"{boot_id()}:{os.getpid()}"]


@dataclass(frozen=True)
class StartedSampler:
    """One node's sampler as started: its process, where its samples land, and for another host the raw file
    its stdout comes back to with the node's clock offset."""

    process: NodeProcess
    path: Path
    remote: tuple[Path, float] | None = None

    def add_to(self, telemetry: Telemetry) -> None:
        telemetry.node_processes.append(self.process)
        telemetry.node_files.append(self.path)
        if self.remote is not None:
            telemetry.remote_samples[self.path] = self.remote


def start_node_sampler(d: Deployment, stem: str, node: Node, pids: list[int], out: Path) -> StartedSampler:
    """The node's sampler, following the mode's processes there; its samples land in
    `<stem>.node.<node>.jsonl`, in the orchestrator's time base."""
    path = out / f"{stem}.node.{node.name}.jsonl"
    offset = d.clock_offsets.get(node.name)
    if offset is None:  # this host: samples straight into the run directory
        process = d.provider.start(node, node_sampler_argv(d, node, pids, str(path)),
                                   {node_tools.INSTRUMENT_VARIABLE: "1"}, out / f"{stem}.node.{node.name}.log")
        return StartedSampler(process, path)
    # another host: with the node tools placed there; samples go to stdout, which the provider brings back as
    # the process's log
    raw = out / f"{stem}.node.{node.name}.raw.jsonl"
    process = d.provider.start(node, node_sampler_argv(d, node, pids, "/dev/stdout"),
                               {"PYTHONPATH": d.tools_dir or "", node_tools.INSTRUMENT_VARIABLE: "1"}, raw)
    return StartedSampler(process, path, (raw, offset))


def _ended(process: NodeProcess) -> bool:
    try:
        return not process.alive()
    except Exception:  # the node or its allocation is gone: stop() reports that
        return False


def stop_telemetry(provider: Provider, telemetry: Telemetry) -> None:
    """Every sampler and the scraper (on this host) are stopped even when one node's sampler
    cannot be (its node or allocation gone): the others' samples still land; the failures are
    raised together at the end."""
    failures = []

    def stop(process: NodeProcess) -> None:
        node, ended_by_itself = getattr(process, "node", "?"), _ended(process)
        code = provider.stop(process, grace_s=5)
        if ended_by_itself:  # a sampler runs until stopped: this one died (its log says why)
            reporter().note(f"the node sampler on {node} had ended by itself (exit {code}): that node "
                            f"has no telemetry for the cell; {process.log_path}")

    try:
        for outcome in outcomes(telemetry.node_processes, stop, hosts_at_once(provider)):  # each on its own node
            if outcome.error is not None:
                exc = outcome.error
                failures.append(f"{getattr(outcome.item, 'node', '?')}: "
                                f"{str(exc).splitlines()[0] if str(exc) else exc!r}")
        for path, (raw, offset) in telemetry.remote_samples.items():
            rewrite_in_orchestrator_time(raw, path, offset)
    finally:
        if telemetry.scraper is not None:
            telemetry.scraper.stop(grace_s=5)
    if failures:
        raise RuntimeError("could not stop the sampler of " + "; ".join(failures))
