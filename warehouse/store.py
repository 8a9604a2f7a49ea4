"""The warehouse as a run's flows and tasks use it, so that no SQL lives in `flows/` or `tasks/`:
one connection per landing (`session`), the writes of what a run derives from its cells (a
capacity search, the tuner's verdict, a cell's faults, a bisect step) and the reads a run makes
of what it has landed so far (a resume, a search that goes on, a bisect step's numbers).

`warehouse/landing.py` lands the measurements themselves (runs, nodes, builds, servers, cells,
samples); this module builds on it. A module, not a `servebench/warehouse/` package: the schema,
migrations and connection are the top-level `warehouse` package, and one name for two packages
would make every `import warehouse` ambiguous to a reader.
"""

from __future__ import annotations

import contextlib
import json
from datetime import datetime
from typing import TYPE_CHECKING, Any, Iterator, Protocol

import duckdb

from . import connect, landing, rows

if TYPE_CHECKING:
    from servebench.config.campaign import FaultSpec, ModeSpec


# What the writes read of the searches' and faults' results: the warehouse sits below the layers that
# make them (servebench.analysis, servebench.serving), so it names the fields it lands, not their types.

class CapacityResult(Protocol):
    """A capacity search's outcome (servebench.analysis.capacity.CapacityResult)."""
    capacity: float | None
    upper: float | None
    probes: list[Any]
    converged: bool
    why: str


class TuneVerdict(Protocol):
    """The tuner's verdict (servebench.analysis.tuning.TuneVerdict): a model whose every field is a
    column of `tuning`, the Pareto front (a list of modes) landed as JSON."""
    pareto: list[str]

    def model_dump(self) -> dict[str, Any]: ...


class InjectedFault(Protocol):
    """One fault as it happened (servebench.serving.faults.InjectedFault)."""
    spec: FaultSpec
    node: str
    at: datetime | None
    t_mono: float | None
    hit: list[list[Any]]
    error: str | None
    fired_s: float | None


@contextlib.contextmanager
def session(path: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """One connection for one landing. DuckDB catches a Ctrl-C that arrives during a query and
    raises its own InterruptException (the transaction is rolled back): that is the user's
    interrupt, raised as one, so the run ends `interrupted` and the cell is landed again from its
    result file, not counted as a failed cell."""
    try:
        con = connect(path)
    except duckdb.InterruptException as exc:
        raise KeyboardInterrupt(f"interrupted while opening the warehouse: {exc}") from exc
    try:
        yield con
    except duckdb.InterruptException as exc:
        raise KeyboardInterrupt(f"interrupted during a warehouse write: {exc}") from exc
    finally:
        con.close()


# writes


def land_capacity(con: duckdb.DuckDBPyConnection, run_id: str, mode: ModeSpec, over: str, slo: dict[str, Any],
                  result: CapacityResult, probe_cells: list[str]) -> None:
    """A mode's capacity search, with the TPOT p50 its probe at the capacity measured (the median
    of that probe's repeats)."""
    tpot = None
    if result.capacity is not None and probe_cells:
        column = "clients" if over == "clients" else "offered_rate"
        median = con.execute(f"select median(tpot_p50_ms) from cells where run_id = ? and list_contains(?, cell_key) "
                             f"and {column} = ?", [run_id, probe_cells, result.capacity]).fetchone()
        assert median is not None  # an aggregate without GROUP BY always returns one row
        tpot = median[0]
    landing.insert_row(con, "capacity", dict(
        run_id=run_id, mode=mode.name, search_over=over, slo=json.dumps(slo), capacity=result.capacity,
        upper=result.upper, probes=len(result.probes), converged=result.converged, why=result.why,
        probe_cells=json.dumps(probe_cells), knobs=landing.knobs_json(mode.knobs), tpot_p50_ms=tpot),
        conflict="or replace")


def land_tuning(con: duckdb.DuckDBPyConnection, run_id: str, over: str, slo: dict[str, Any], verdict: TuneVerdict,
                configurations: int) -> None:
    """The tuner's verdict over the run's capacities; `configurations`: how many were searched
    (the default's second measurement aside). Launches: the servers that became ready for a search."""
    ready = con.execute("select count(*) from servers s join capacity c using (run_id, mode) "
                        "where s.run_id = ? and s.status = 'ready'", [run_id]).fetchone()
    assert ready is not None  # an aggregate without GROUP BY always returns one row
    launches = ready[0]
    landing.insert_row(con, "tuning", dict(
        verdict.model_dump(), run_id=run_id, search_over=over, slo=json.dumps(slo), configurations=configurations,
        launches=launches, pareto=json.dumps(verdict.pareto)), conflict="or replace")


def land_faults(con: duckdb.DuckDBPyConnection, run_id: str, cell_key: str, mode: str,
                injected: list[InjectedFault]) -> None:
    """What each of a cell's faults did (`at_s`: when it fired, else when it was planned to)."""
    for fault in injected:
        landing.insert_row(con, "faults", dict(
            run_id=run_id, cell_key=cell_key, mode=mode, action=fault.spec.action, node=fault.node,
            match=fault.spec.match, at_s=fault.fired_s if fault.fired_s is not None else fault.spec.at_s,
            injected_at=fault.at, t_mono=fault.t_mono, hit=json.dumps(fault.hit), error=fault.error))


def land_bisect_step(con: duckdb.DuckDBPyConnection, step: dict[str, Any]) -> None:
    """One step of a bisect: the commit, its run, its repeats and the verdict against the baseline."""
    landing.insert_row(con, "bisect_steps", step)


# reads


def landed_cell(con: duckdb.DuckDBPyConnection, run_id: str, cell_key: str) -> dict[str, Any]:
    """A landed cell's row, by column name."""
    return rows(con, "select * from cells where run_id = ? and cell_key = ?", [run_id, cell_key])[0]


def capacities(con: duckdb.DuckDBPyConnection, run_id: str) -> list[tuple[str, float | None]]:
    """Each capacity search the run landed: (mode, capacity; None: it met the SLO nowhere)."""
    return con.execute("select mode, capacity from capacity where run_id = ?", [run_id]).fetchall()


def finished_modes(con: duckdb.DuckDBPyConnection, run_id: str) -> set[str]:
    """Modes whose server failed to start or was stopped (their part of the run is over)."""
    return {mode for (mode,) in con.execute("select mode from servers where run_id = ? and "
                                            "(stopped_at is not null or status = 'failed')", [run_id]).fetchall()}


def completed_metric(con: duckdb.DuckDBPyConnection, run_id: str, mode: str, metric: str) -> list[float]:
    """A metric of each completed cell of a mode in a run, in repeat order (`metric`: a cells
    column, checked by the caller against the metrics it knows)."""
    rows = con.execute(f"select {metric} from cells where run_id = ? and mode = ? and status = 'completed' "
                       f"and {metric} is not null order by repeat", [run_id, mode]).fetchall()
    return [float(value) for (value,) in rows]


def run_build_key(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """The build a run's servers ran (the first landed with one)."""
    key = con.execute("select build_key from servers where run_id = ? and build_key is not null limit 1",
                      [run_id]).fetchone()
    return key[0] if key else None
