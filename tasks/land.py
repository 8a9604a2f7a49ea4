"""Land stage: what was deployed, handed to the run's results (`servebench.warehouse.sink.RunResults`)
as soon as it is, each a task run Prefect shows. Each landing opens and closes its own connection so
that `servebench query` can read the warehouse while a campaign runs. Cells and a ready server's row
land as plain calls of the same sink instead (`servebench.orchestration`): they must also land while
a Ctrl-C unwinds."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from servebench.builds.venv import EngineBuild
from servebench.providers import Node
from servebench.warehouse.landing import RunRecord, RunUpdate, ServerRecord
from servebench.warehouse.sink import RunResults


@task(name="land-run", cache_policy=NONE)
def land_run_start(results: RunResults, run: RunRecord) -> None:
    results.started(run)


@task(name="land-run-update", cache_policy=NONE)
def land_run_update(results: RunResults, update: RunUpdate) -> None:
    results.updated(update)


@task(name="land-nodes", cache_policy=NONE)
def land_nodes(results: RunResults, nodes: list[Node], inventories: dict[str, dict[str, Any]],
               clock_offsets: dict[str, float | None] | None = None, client_node: str | None = None) -> None:
    results.nodes(nodes, inventories, clock_offsets, client_node)


@task(name="land-placements", cache_policy=NONE)
def land_placements(results: RunResults, placements: list[dict[str, Any]]) -> None:
    results.placements(placements)


@task(name="land-build", cache_policy=NONE)
def land_build(results: RunResults, build: EngineBuild) -> None:
    results.build(build)


@task(name="land-server", cache_policy=NONE)
def land_server(results: RunResults, server: ServerRecord) -> None:
    """A server that did not start, with why."""
    results.server(server)
