"""Serve stage: one engine server per mode, started once for all of its cells."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from servebench.build import EngineBuild
from servebench.engines import get_engine
from servebench.providers import Node, get_provider
from servebench.serve import Server, pick_port, plan_launch, start_server, stop_server, wait_ready
from servebench.spec import Campaign, ModeSpec


@task(name="start-server", cache_policy=NONE)
def start_mode_server(campaign: Campaign, mode: ModeSpec, node: Node, build: EngineBuild, model_dir: str,
                      served_name: str, run_dir: str) -> Server:
    """Start the mode's server and wait for /health; on failure the process is already stopped."""
    provider = get_provider(campaign.provider)
    port = pick_port()
    launch = plan_launch(get_engine(campaign.engine.kind), python=build.python, spec=campaign.engine, mode=mode,
                         model_dir=model_dir, served_name=served_name, node=node, port=port)
    server = start_server(provider, node, launch, mode.name, port, Path(run_dir) / "servers" / f"{mode.name}.log")
    try:
        wait_ready(server, campaign.engine.ready_timeout_s)
    except BaseException:
        stop_server(provider, server)
        raise
    return server


@task(name="stop-server", cache_policy=NONE)
def stop_mode_server(campaign: Campaign, server: Server) -> Server:
    return stop_server(get_provider(campaign.provider), server)
