"""Land stage: write what was deployed to the warehouse (`servebench.warehouse.landing`), as soon
as it is. Each call opens and closes its own connection so that `servebench query` can read the
warehouse while a campaign runs. Cells and a ready server's row land as plain calls instead
(`servebench.orchestration`): they must also land while a Ctrl-C unwinds."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.builds.venv import EngineBuild
from servebench.providers import Node
from servebench.warehouse import landing, store


@task(name="land-run", cache_policy=NONE)
def land_run_start(path: str, **fields) -> None:
    with store.session(path) as con:
        landing.insert_run(con, **fields)


@task(name="land-run-update", cache_policy=NONE)
def land_run_update(path: str, run_id: str, **fields) -> None:
    with store.session(path) as con:
        landing.update_run(con, run_id, **fields)


@task(name="land-nodes", cache_policy=NONE)
def land_nodes(path: str, run_id: str, nodes: list[Node], inventories: dict[str, dict],
               clock_offsets: dict[str, float | None] | None = None, client_node: str | None = None) -> None:
    with store.session(path) as con:
        landing.land_nodes(con, run_id, nodes, inventories, clock_offsets, client_node)


@task(name="land-placements", cache_policy=NONE)
def land_placements(path: str, run_id: str, placements: list[dict]) -> None:
    with store.session(path) as con:
        landing.land_placements(con, run_id, placements)


@task(name="land-build", cache_policy=NONE)
def land_build(path: str, run_id: str, build: EngineBuild) -> None:
    with store.session(path) as con:
        landing.land_run_build(con, run_id, build)


@task(name="land-server", cache_policy=NONE)
def land_failed_server(path: str, run_id: str, mode: str, error: str, engine: str | None = None,
                       build_key: str | None = None) -> None:
    """A server that did not start, with why."""
    with store.session(path) as con:
        landing.land_failed_server(con, run_id, mode=mode, error=error, engine=engine, build_key=build_key)
