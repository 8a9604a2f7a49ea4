"""Land stage: write what was measured to the warehouse, as soon as it is measured.

Each call opens and closes its own connection so that `servebench query` can read the
warehouse between cells while a campaign runs.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.warehouse import landing, store
from servebench.analysis.capacity import CapacityResult
from servebench.analysis.tuning import AGAIN, ConfigurationCapacity, TuneVerdict, tune_verdict
from servebench.spec.campaign import ModeSpec
from servebench.warehouse.store import session


@task(name="land-run", cache_policy=NONE)
def land_run_start(path: str, **fields) -> None:
    with session(path) as con:
        landing.insert_run(con, **fields)


@task(name="land-run-update", cache_policy=NONE)
def land_run_update(path: str, run_id: str, **fields) -> None:
    with session(path) as con:
        landing.update_run(con, run_id, **fields)


@task(name="land-nodes", cache_policy=NONE)
def land_nodes(path: str, run_id: str, nodes, inventories: dict[str, dict],
               clock_offsets: dict[str, float | None] | None = None, client_node: str | None = None) -> None:
    with session(path) as con:
        for node in nodes:
            role = "client" if node.name == client_node else "server"
            landing.land_node(con, run_id, node.name, node.address, inventories[node.name],
                              (clock_offsets or {}).get(node.name), role=role)


@task(name="land-placements", cache_policy=NONE)
def land_placements(path: str, run_id: str, placements: list[dict]) -> None:
    with session(path) as con:
        landing.land_placements(con, run_id, placements)


@task(name="land-build", cache_policy=NONE)
def land_build(path: str, run_id: str, build) -> None:
    with session(path) as con:
        landing.land_build(con, build)
        landing.update_run(con, run_id, build_key=build.key)


@task(name="land-server", cache_policy=NONE)
def land_server(path: str, run_id: str, **fields) -> None:
    with session(path) as con:
        landing.land_server(con, run_id, **fields)


def land_capacity(path: str, run_id: str, mode: ModeSpec, over: str, slo: dict, result: CapacityResult,
                  probe_cells: list[str]) -> None:
    """A mode's capacity search (`servebench.analysis.capacity.CapacityResult`) and its probe cells."""
    with session(path) as con:
        store.land_capacity(con, run_id, mode, over, slo, result, probe_cells)


def land_tuning(path: str, run_id: str, default_mode: str, over: str, slo: dict) -> TuneVerdict:
    """The tuner's verdict over the run's capacities (`servebench.analysis.tuning`), landed in `tuning`."""
    with session(path) as con:
        found = [ConfigurationCapacity(**row) for row in landing.capacity_configurations(con, run_id)]
        verdict = tune_verdict(found, default_mode)
        store.land_tuning(con, run_id, over, slo, verdict,
                                 configurations=len([c for c in found if c.mode != default_mode + AGAIN]))
    return verdict


@task(name="land-cell", cache_policy=NONE)
def land_cell(path: str, run_id: str, cell, **fields) -> str:
    with session(path) as con:
        return landing.land_cell(con, run_id, cell, **fields)


@task(name="land-cell-attempt", cache_policy=NONE)
def land_cell_attempt(path: str, run_id: str, cell_key: str, attempt: int, superseded: bool, summary: dict,
                      result_path: str | None) -> None:
    with session(path) as con:
        landing.land_cell_attempt(con, run_id, cell_key, attempt, superseded, summary, result_path)
