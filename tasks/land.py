"""Land stage: write what was measured to the warehouse, as soon as it is measured.

Each call opens and closes its own connection so that `servebench query` can read the
warehouse between cells while a campaign runs.
"""

from __future__ import annotations

import contextlib
import json
from typing import Iterator

import duckdb
from prefect import task
from prefect.cache_policies import NONE

import warehouse
from servebench import landing


@contextlib.contextmanager
def session(path: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """One connection for one landing. DuckDB catches a Ctrl-C that arrives during a query and
    raises its own InterruptException (the transaction is rolled back): that is the user's
    interrupt, raised as one, so the run ends `interrupted` and the cell is landed again from its
    result file, not counted as a failed cell."""
    try:
        con = warehouse.connect(path)
    except duckdb.InterruptException as exc:
        raise KeyboardInterrupt(f"interrupted while opening the warehouse: {exc}") from exc
    try:
        yield con
    except duckdb.InterruptException as exc:
        raise KeyboardInterrupt(f"interrupted during a warehouse write: {exc}") from exc
    finally:
        con.close()


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


def land_capacity(path: str, run_id: str, mode, over: str, slo: dict, result, probe_cells: list[str]) -> None:
    """A mode's capacity search (`servebench.analysis.capacity.CapacityResult`), with the TPOT p50
    its probe at the capacity measured (the median of that probe's repeats)."""
    with session(path) as con:
        tpot = None
        if result.capacity is not None and probe_cells:
            column = "clients" if over == "clients" else "rate"
            tpot = con.execute(f"select median(tpot_p50_ms) from cells where run_id = ? and list_contains(?, cell_key) "
                               f"and {column} = ?", [run_id, probe_cells, result.capacity]).fetchone()[0]
        con.execute("insert or replace into capacity (run_id, mode, search_over, slo, capacity, upper, probes, "
                    "converged, why, probe_cells, knobs, tpot_p50_ms) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [run_id, mode.name, over, json.dumps(slo), result.capacity, result.upper, len(result.probes),
                     result.converged, result.why, json.dumps(probe_cells), landing.knobs_json(mode.knobs), tpot])


def land_tuning(path: str, run_id: str, default_mode: str, over: str, slo: dict):
    """The tuner's verdict over the run's capacities (`servebench.analysis.tuning`), landed in `tuning`."""
    from servebench.analysis.tuning import AGAIN, ConfigurationCapacity, tune_verdict

    with session(path) as con:
        found = [ConfigurationCapacity(**row) for row in landing.capacity_configurations(con, run_id)]
        verdict = tune_verdict(found, default_mode)
        launches = con.execute("select count(*) from servers s join capacity c using (run_id, mode) "
                               "where s.run_id = ? and s.status = 'ready'", [run_id]).fetchone()[0]
        con.execute("insert or replace into tuning (run_id, search_over, slo, configurations, launches, probes, "
                    "default_mode, best_mode, default_capacity, best_capacity, ratio, ratio_low, ratio_high, pareto, "
                    "why, default_first, default_again, drift) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [run_id, over, json.dumps(slo), len([c for c in found if c.mode != default_mode + AGAIN]), launches, verdict.probes, verdict.default_mode,
                     verdict.best_mode, verdict.default_capacity, verdict.best_capacity, verdict.ratio,
                     verdict.ratio_low, verdict.ratio_high, json.dumps(verdict.pareto), verdict.why,
                     verdict.default_first, verdict.default_again, verdict.drift])
    return verdict


@task(name="land-cell", cache_policy=NONE)
def land_cell(path: str, run_id: str, cell, **fields) -> str:
    with session(path) as con:
        return landing.land_cell(con, run_id, cell, **fields)
