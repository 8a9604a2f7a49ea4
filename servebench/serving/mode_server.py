"""A mode's server for a campaign: started from its deployment with its telemetry (which covers
model load too), and its correctness gate (its greedy answers against the engine's reference).

Every server asks for the run's token (servebench/load/run_secret.py): before it starts, the token
file is placed on the mode's nodes and on the load generator's node, the engine is told its path
(`LaunchRequest.secret_file`), a replicas mode's balancer checks it too, the gate sends it, and the
cells' load generator is told where it is on its node (`client_key_file`, read by
servebench/campaign/load_config.py). The scraper this process starts finds the file by
`SERVEBENCH_API_KEY_FILE`."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from servebench.config.campaign import ModeSpec
from servebench.engines import Engine, LaunchRequest
from servebench.engines.base import ServerLaunch
from servebench.load.credentials import KEY_FILE_VARIABLE
from servebench.load.run_secret import ensure_run_secret, place_secret, read_token
from servebench.paths import cache_dir
from servebench.planning.memory import largest_rank_weight_bytes, mode_memory, model_weights, startup_timeout_s
from servebench.progress import reporter
from servebench.providers.base import Node
from servebench.serving.balancer import AUTH_INCLUDE, start_balancer, write_auth_include
from servebench.serving.correctness import GateAnswer, GateResult, ask, compare, unchecked
from servebench.serving.deployment import Deployment, mode_nodes, replica_nodes
from servebench.serving.preflight import check_build_fits
from servebench.serving.server import Server, start_server, stop_server, wait_ready
from servebench.serving.telemetry import Telemetry, start_telemetry, stop_telemetry


def start_mode_server(deployment: Deployment, mode: ModeSpec) -> tuple[Server, Telemetry]:
    """Start the mode's server with its telemetry, and wait for its health path; on failure both
    are already stopped."""
    d = deployment
    nodes = mode_nodes(d.nodes, mode)
    check_build_fits(d.build.inputs, nodes, d.provider, cache_dir())
    if d.shared is not None:  # a fault in an earlier cell may have taken a shared service (a Ray node) down
        for line in d.shared.repair(d.provider):
            reporter().stage(f"mode {mode.name}: {line}")
    local_key = str(ensure_run_secret(d.run_dir))
    if mode.replicas > 1:  # before the secret directory goes to the balancer's node
        write_auth_include(Path(local_key).parent, read_token(local_key))
    secret = place_secret(d.provider, nodes, d.run_dir)
    client_key = place_secret(d.provider, [d.client.node], d.run_dir) if d.client is not None else local_key
    shares = replica_nodes(d.nodes, mode)
    launches = [mode_launch(d, mode, share, secret) for share in shares]
    timeout_s = ready_timeout_s(d, mode, shares[0])
    if mode.replicas == 1:
        server = start_server(d.provider, nodes, launches[0], mode.name, Path(d.run_dir) / "servers", timeout_s)
    else:
        server = start_replicas(d, mode, nodes, launches, timeout_s, str(Path(client_key).parent / AUTH_INCLUDE))
    server.api_key_file, server.client_key_file = local_key, client_key
    CLIENT_KEY_FILES[server.url] = client_key
    os.environ[KEY_FILE_VARIABLE] = local_key   # the scraper started next reads the run's token file
    telemetry = start_telemetry(d, server)
    try:
        wait_ready(server, timeout_s)
    except BaseException:
        stop_telemetry(d.provider, telemetry)
        stop_server(d.provider, server)
        raise
    return server, telemetry


# a started server's URL -> the run's token file where the load generator runs: what a cell's load config names
CLIENT_KEY_FILES: dict[str, str] = {}


def client_key_file(url: str) -> str | None:
    """The token file the load generator reads for the server at `url` (None: a server started without one)."""
    return CLIENT_KEY_FILES.get(url)


def mode_launch(d: Deployment, mode: ModeSpec, nodes: list[Node], secret_file: str | None = None) -> ServerLaunch:
    """The engine's server of the mode on these nodes (a `replicas` mode: one replica's share of them), asking
    for the run's token at `secret_file` on them."""
    return d.engine.launch(LaunchRequest(
        python=d.build.python, build_dir=d.build.venv_path, spec=d.spec, mode=mode, model_dir=d.model_dir,
        served_name=d.served_name, dtype=d.campaign.model.dtype, nodes=nodes, ports=d.provider,
        shared=d.shared, secret_file=secret_file))


def replica_launch(launches: list[ServerLaunch]) -> ServerLaunch:
    """The replicas' processes as one server's, in start order (r0's, then r1's, ...), each labelled with its
    replica so its log is `<mode>.r0.log` (`<mode>.r0.<label>.log` for the others of a replica)."""
    processes = [replace(process, label=f"r{index}" + (f".{process.label}" if process.label else ""))
                 for index, launch in enumerate(launches) for process in launch.processes]
    return ServerLaunch(processes=processes, port=launches[0].port, health_path=launches[0].health_path)


def instance_urls(launches: list[ServerLaunch], nodes: list[Node]) -> dict[str, str]:
    """Each replica's own URL by name: its API process's node address and port."""
    by_name = {node.name: node for node in nodes}
    return {f"r{index}": f"http://{by_name[launch.api.node].address}:{launch.port}"
            for index, launch in enumerate(launches)}


def start_replicas(d: Deployment, mode: ModeSpec, nodes: list[Node], launches: list[ServerLaunch],
                   timeout_s: float, auth_include: str | None = None) -> Server:
    """Every replica's processes (one of them failing to start stops those started), then nginx in front of
    them where the load generator runs (servebench/serving/balancer.py): one Server whose `url` is the
    balancer's and whose `instance_urls` are the replicas'."""
    server = start_server(d.provider, nodes, replica_launch(launches), mode.name, Path(d.run_dir) / "servers",
                          timeout_s)
    try:
        urls = instance_urls(launches, nodes)
        policy = mode.balancer_policy or "least-connections"
        balancer = start_balancer(d.provider, d.client.node if d.client is not None else None, mode.name, policy,
                                  urls, Path(d.run_dir), f"{d.provider.run_id}.balancer", auth_include)
    except BaseException:
        stop_server(d.provider, server)
        raise
    server.url, server.balancer, server.instance_urls = balancer.url, balancer, urls
    return server


def ready_timeout_s(d: Deployment, mode: ModeSpec, nodes: list[Node]) -> float:
    """The engine block's `ready_timeout_s` plus the time the mode's largest rank takes to load its
    weights (servebench/planning/memory.py; slower on an emulated node)."""
    weights = model_weights(d.campaign.model, d.engine, Path(d.model_dir))
    memory = mode_memory(d.engine, mode.model_copy(update={"nodes": None}), d.spec,   # `nodes`: chosen already
                         [(n.name, n.cpus) for n in nodes], weights, {})
    return startup_timeout_s(d.spec.ready_timeout_s, largest_rank_weight_bytes(memory),
                             any(n.emulate for n in nodes))


def gate_server(engine: Engine, server: Server, served_name: str, vocab: int, reference: GateAnswer | None,
                reference_problem: str | None) -> tuple[GateResult, GateAnswer]:
    """The server's greedy answers, judged against the reference (or becoming it); with no
    reference to be had (`reference_problem`), unchecked."""
    key = read_token(server.api_key_file) if server.api_key_file else None
    answer = ask(server.url, served_name, vocab, engine.api.gate_extras, engine.gate_choice, api_key=key)
    if reference_problem is not None:
        return unchecked(reference_problem), answer
    if reference is None:
        return GateResult(status="reference", detail="TP=1 reference answers for this campaign"), answer
    return compare(reference, answer), answer
