"""Serve stage: one engine server per mode, started once for all of its cells, and its
correctness gate (`servebench.serving.mode_server`)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.config.campaign import ModeSpec
from servebench.engines import Engine
from servebench.serving import mode_server
from servebench.serving.correctness import GateAnswer, GateResult
from servebench.serving.deployment import Deployment
from servebench.serving.server import Server
from servebench.serving.telemetry import Telemetry


@task(name="start-server", cache_policy=NONE)
def start_mode_server(deployment: Deployment, mode: ModeSpec) -> tuple[Server, Telemetry]:
    return mode_server.start_mode_server(deployment, mode)


@task(name="correctness-gate", cache_policy=NONE)
def correctness_gate(engine: Engine, server: Server, served_name: str, vocab: int, reference: GateAnswer | None,
                     reference_problem: str | None) -> tuple[GateResult, GateAnswer]:
    return mode_server.gate_server(engine, server, served_name, vocab, reference, reference_problem)
