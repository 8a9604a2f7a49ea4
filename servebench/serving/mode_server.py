"""A mode's server for a campaign: started from its deployment with its telemetry (which covers
model load too), and its correctness gate (its greedy answers against the engine's reference).

Every server asks for the run's token (servebench/load/run_secret.py): before it starts, the token
file is placed on the mode's nodes and on the load generator's node, the engine is told its path
(`LaunchRequest.secret_file`), a replicas mode's balancer checks it too, the gate sends it, and the
cells' load generator is told where it is on its node (`client_key_file`, read by
servebench/campaign/load_config.py). The scraper this process starts finds the file by
`SERVEBENCH_API_KEY_FILE`.

A `replicas` mode is balanced by nginx in front of its replicas or by the load generator itself
(servebench/planning/balancing.py decides, before anything starts): then the mode's `Server` has no
balancer, its `url` is r0's (the health probe and the scraper's own URL), its `instance_urls` are every
replica's, and `client_balanced` tells a cell's load config the replicas to spread the requests over.

An engine that starts no servers (`Engine.starts_servers` False) names the server each mode measures
(`Engine.external_server`): it is attached to (servebench/serving/external.py), its key file is the one
written from the variable the campaign names, and its telemetry starts and stops as any server's; the
server itself is never started or stopped."""

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
from servebench.planning.balancing import BalancingChoice, balancing_choice, remote_lookup_argv
from servebench.planning.memory import largest_rank_weight_bytes, mode_memory, model_weights, startup_timeout_s
from servebench.prediction.plan import predicted_startup_s
from servebench.progress import reporter
from servebench.providers.base import Node
from servebench.serving.balancer import AUTH_INCLUDE, BalancerFailed, Upstreams, start_nginx, write_auth_include
from servebench.serving.correctness import GateAnswer, GateResult, ask, compare, unchecked
from servebench.serving.deployment import Deployment, mode_nodes, replica_nodes
from servebench.serving.external import attach_server
from servebench.serving.preflight import check_build_fits
from servebench.serving.server import Server, start_server, stop_server, wait_ready
from servebench.serving.telemetry import Telemetry, start_telemetry, stop_telemetry


def start_mode_server(deployment: Deployment, mode: ModeSpec) -> tuple[Server, Telemetry]:
    """Start the mode's server with its telemetry, and wait for its health path; on failure both
    are already stopped. An engine that starts no servers: the server it names is attached to instead."""
    d = deployment
    if not d.engine.starts_servers:
        return attach_mode_server(d, mode)
    assert d.build is not None  # an engine that starts its servers has its build
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
    server.served_name = d.served_name
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


def attach_mode_server(d: Deployment, mode: ModeSpec) -> tuple[Server, Telemetry]:
    """The server of a mode servebench did not start (servebench/serving/external.py), its telemetry, and
    its health path waited on for the engine block's `ready_timeout_s`; on failure the telemetry is stopped
    (the server itself is never servebench's to stop)."""
    server = attach_server(d, mode)
    if server.client_key_file is not None:
        CLIENT_KEY_FILES[server.url] = server.client_key_file
    else:
        CLIENT_KEY_FILES.pop(server.url, None)
    if server.api_key_file is not None:   # the scraper started next reads it
        os.environ[KEY_FILE_VARIABLE] = server.api_key_file
    else:                                  # and sends no key of another server's
        os.environ.pop(KEY_FILE_VARIABLE, None)
    telemetry = start_telemetry(d, server)
    try:
        wait_ready(server, d.spec.ready_timeout_s)
    except BaseException:
        stop_telemetry(d.provider, telemetry)
        raise
    return server, telemetry


# a started server's URL -> the run's token file where the load generator runs: what a cell's load config names
CLIENT_KEY_FILES: dict[str, str] = {}
# a started replicas mode's URL (r0's) -> its replicas' URLs by name and the policy, when the load generator balances
CLIENT_BALANCED: dict[str, tuple[dict[str, str], str]] = {}


def client_key_file(url: str) -> str | None:
    """The token file the load generator reads for the server at `url` (None: a server started without one)."""
    return CLIENT_KEY_FILES.get(url)


def client_balanced(url: str) -> tuple[dict[str, str], str] | None:
    """The replicas (name -> URL) and policy the load generator spreads the requests for the server at `url`
    over (None: one server, or nginx in front of the replicas)."""
    return CLIENT_BALANCED.get(url)


def mode_launch(d: Deployment, mode: ModeSpec, nodes: list[Node], secret_file: str | None = None) -> ServerLaunch:
    """The engine's server of the mode on these nodes (a `replicas` mode: one replica's share of them), asking
    for the run's token at `secret_file` on them."""
    assert d.build is not None  # only an engine that starts its servers launches one
    return d.engine.launch(LaunchRequest(
        python=d.build.python, build_dir=d.build.venv_path, spec=d.spec, mode=mode, model_dir=d.model_dir,
        served_name=d.served_name, dtype=d.campaign.model.dtype, nodes=nodes, ports=d.provider,
        shared=d.shared, secret_file=secret_file))


def replica_launch(launches: list[ServerLaunch]) -> ServerLaunch:
    """The replicas' processes as one server's, in order (r0's, then r1's, ...), each labelled with its replica so
    its log is `<mode>.r0.log` (`<mode>.r0.<label>.log` for the others of a replica); each replica a chain of its
    own, so the replicas start side by side (`start_server`)."""
    processes = [replace(process, label=f"r{index}" + (f".{process.label}" if process.label else ""), chain=index)
                 for index, launch in enumerate(launches) for process in launch.processes]
    return ServerLaunch(processes=processes, port=launches[0].port, health_path=launches[0].health_path)


def instance_urls(launches: list[ServerLaunch], nodes: list[Node]) -> dict[str, str]:
    """Each replica's own URL by name: its API process's node address and port."""
    by_name = {node.name: node for node in nodes}
    return {f"r{index}": f"http://{by_name[launch.api.node].address}:{launch.port}"
            for index, launch in enumerate(launches)}


def start_replicas(d: Deployment, mode: ModeSpec, nodes: list[Node], launches: list[ServerLaunch],
                   timeout_s: float, auth_include: str | None = None) -> Server:
    """Every replica's processes (one of them failing to start stops those started), then, balanced by nginx,
    nginx in front of them where the load generator runs (servebench/serving/balancer.py): one Server whose
    `url` is the balancer's and whose `instance_urls` are the replicas'. Balanced by the load generator, no
    balancer: `url` is r0's and the replicas are registered for the cells' load (`client_balanced`)."""
    choice = mode_balancing(d, mode)
    policy = mode.balancer_policy or "least-connections"
    reporter().stage(f"mode {mode.name}: " + choice.line(mode.name, policy).strip())
    server = start_server(d.provider, nodes, replica_launch(launches), mode.name, Path(d.run_dir) / "servers",
                          timeout_s)
    urls = instance_urls(launches, nodes)
    server.instance_urls = urls
    if choice.by == "client":
        server.url = urls["r0"]
        CLIENT_BALANCED[server.url] = (urls, policy)
        return server
    try:
        balancer = start_nginx(d.provider, d.client.node if d.client is not None else None,
                               Upstreams(mode.name, policy, urls, choice.nginx), Path(d.run_dir),
                               f"{d.provider.run_id}.balancer", auth_include)
    except BaseException:
        stop_server(d.provider, server)
        raise
    server.url, server.balancer = balancer.url, balancer
    return server


def mode_balancing(d: Deployment, mode: ModeSpec) -> BalancingChoice:
    """The mode's balancing as the plan decided it, with nginx looked up on a client node of another host
    now (the plan could not look there): none there, the load generator balances unless nginx was asked
    for, which fails the mode's start naming what is missing."""
    choice = balancing_choice(d.campaign, mode)
    if choice.problem is not None:
        raise BalancerFailed(choice.problem)
    if choice.by == "client" or choice.checked or d.client is None:
        return choice
    named = d.campaign.balancing.nginx
    done = d.provider.run(d.client.node, remote_lookup_argv(named), timeout=30)
    found = (done.stdout or "").strip().splitlines()
    if found:
        return BalancingChoice("nginx", choice.explicit, found[-1], f"{found[-1]} on node {d.client.node.name}")
    looked = named or "PATH, then /usr/sbin/nginx"
    if choice.explicit:
        raise BalancerFailed(f"mode {mode.name}: balanced by nginx, but node {d.client.node.name} has none (looked "
                             f"for: {looked}): name the binary there (`balancing: {{nginx: PATH}}`) or let the load "
                             "generator balance (`balanced_by: client`)")
    return BalancingChoice("client", False, None, f"no nginx on node {d.client.node.name} (looked for: {looked}), "
                           "so the load generator balances")


def ready_timeout_s(d: Deployment, mode: ModeSpec, nodes: list[Node]) -> float:
    """The engine block's `ready_timeout_s` plus the time the mode's largest rank takes to load its
    weights (servebench/planning/memory.py; slower on an emulated node), and at least twice the start-up
    the performance model predicts from the nodes' measured rooflines (servebench/prediction/: a profile
    run of a dtype the node has no fast kernels for is minutes, whatever the weights' size)."""
    weights = model_weights(d.campaign.model, d.engine, Path(d.model_dir))
    unplaced = mode.model_copy(update={"nodes": None})   # `nodes`: chosen already
    memory = mode_memory(d.engine, unplaced, d.spec, [(n.name, n.cpus) for n in nodes], weights, {})
    predicted = predicted_startup_s(d.campaign, unplaced, nodes, d.rooflines, os.cpu_count() or 1) \
        if d.rooflines else None
    return startup_timeout_s(d.spec.ready_timeout_s, largest_rank_weight_bytes(memory),
                             any(n.emulate for n in nodes), predicted)


def gate_server(engine: Engine, server: Server, served_name: str, vocab: int, reference: GateAnswer | None,
                reference_problem: str | None) -> tuple[GateResult, GateAnswer]:
    """The server's greedy answers, judged against the reference (or becoming it); with no
    reference to be had (`reference_problem`), unchecked."""
    key = read_token(server.api_key_file) if server.api_key_file else None
    # balanced by the load generator, no balancer spreads the prompts: every replica answers them
    urls = list(server.instance_urls.values()) if server.instance_urls and server.balancer is None else [server.url]
    answers = [ask(url, served_name, vocab, engine.api.gate_extras, engine.gate_choice, api_key=key) for url in urls]
    answer = answers[0]
    if reference_problem is not None:
        return unchecked(reference_problem), answer
    if reference is None:
        return GateResult(status="reference", detail="TP=1 reference answers for this campaign"), answer
    if len(answers) == 1:
        return compare(reference, answer), answer
    return replicas_verdict([compare(reference, each) for each in answers], list(server.instance_urls)), answer


GATE_ORDER = {"passed": 0, "close": 1, "failed": 2}


def replicas_verdict(results: list[GateResult], names: list[str]) -> GateResult:
    """Every replica's verdict in one: the worst of them, its detail naming each replica's."""
    worst = max(results, key=lambda result: GATE_ORDER.get(result.status, len(GATE_ORDER)))
    detail = "; ".join(f"{name}: {result.status}: {result.detail}" for name, result in zip(names, results))
    return worst.model_copy(update={"detail": f"every replica asked: {detail}"})
