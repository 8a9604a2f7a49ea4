"""Serve stage: one engine server per mode, started once for all of its cells."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from servebench.build.venv import EngineBuild
from servebench.engines.vllm.ray_cluster import RayCluster
from tasks.telemetry import Telemetry, start_telemetry, stop_telemetry
from servebench.serving.correctness import GateAnswer, GateResult, ask, compare, unchecked
from servebench.engines import get_engine
from servebench.providers import Node, get_provider
from servebench.serving.server import Server, pick_port, plan_launch, server_node, start_server, stop_server, wait_ready
from servebench.campaign.schema import Campaign, ModeSpec


@task(name="start-server", cache_policy=NONE)
def start_mode_server(campaign: Campaign, mode: ModeSpec, nodes: list[Node], build: EngineBuild, model_dir: str,
                      served_name: str, run_dir: str, cluster: RayCluster | None = None
                      ) -> tuple[Server, Telemetry]:
    """Start the mode's server with its telemetry (which covers model load too), and wait for
    /health; on failure both are already stopped."""
    provider = get_provider(campaign)
    port = pick_port()
    launch = plan_launch(get_engine(campaign.engine.kind), python=build.python, spec=campaign.engine, mode=mode,
                         model_dir=model_dir, served_name=served_name, nodes=nodes, port=port,
                         ray_address=cluster.address if cluster else None, dtype=campaign.model.dtype)
    server = start_server(provider, server_node(mode, nodes), launch, mode.name, port,
                          Path(run_dir) / "servers" / f"{mode.name}.log", nodes)
    telemetry = start_telemetry.fn(campaign, server, nodes, cluster, run_dir)
    try:
        wait_ready(server, campaign.engine.ready_timeout_s)
    except BaseException:
        stop_telemetry.fn(telemetry)
        stop_server(provider, server)
        raise
    return server, telemetry


@task(name="stop-server", cache_policy=NONE)
def stop_mode_server(campaign: Campaign, server: Server) -> Server:
    return stop_server(get_provider(campaign), server)


@task(name="correctness-gate", cache_policy=NONE)
def correctness_gate(server: Server, served_name: str, vocab: int, reference: GateAnswer | None,
                     reference_problem: str | None) -> tuple[GateResult, GateAnswer]:
    """The server's greedy answers, judged against the reference (or becoming it); with no
    reference to be had (`reference_problem`), unchecked."""
    answer = ask(server.url, served_name, vocab)
    if reference_problem is not None:
        return unchecked(reference_problem), answer
    if reference is None:
        return GateResult(status="reference", detail="TP=1 reference answers for this campaign"), answer
    return compare(reference, answer), answer
