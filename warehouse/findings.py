"""Landing what analysis derives from landed cells: series ids and the hardware fingerprint,
regression findings, the users' annotations and the repeats' bootstrap intervals.

Each write replaces what an earlier analysis of the same run landed, in one transaction, so
analyzing a run again never doubles its rows. The analysis itself (`servebench/analysis/`) hands
plain rows in.
"""

from __future__ import annotations

from typing import Any

from . import Connection
from .landing import insert_row


def land_series_ids(con: Connection, run_id: str, fingerprint: str, cell_series: dict[str, str],
                    capacity_series: dict[str, str]) -> None:
    """The run's hardware fingerprint, and the series id of each of its cells (by cell_id) and
    capacity searches (by mode)."""
    con.execute("update runs set hardware_fingerprint = ? where run_id = ?", [fingerprint, run_id])
    if cell_series:
        con.executemany("update cells set series_id = ? where cell_id = ?",
                        [[series, cell] for cell, series in cell_series.items()])
    if capacity_series:
        con.executemany("update capacity set series_id = ? where run_id = ? and mode = ?",
                        [[series, run_id, mode] for mode, series in capacity_series.items()])


def land_regressions(con: Connection, run_id: str, findings: list[dict[str, Any]]) -> None:
    """Replace the run's findings (rows of the `regressions` table, by column name)."""
    _replace(con, "regressions", run_id, findings)


def land_annotation(con: Connection, annotation: dict[str, Any]) -> None:
    """A user's word on a night (a row of `annotations`, by column name)."""
    insert_row(con, "annotations", annotation)


def land_intervals(con: Connection, run_id: str, intervals: list[dict[str, Any]]) -> None:
    """Replace the run's bootstrap intervals (rows of `cell_intervals`, by column name)."""
    _replace(con, "cell_intervals", run_id, intervals)


def _replace(con: Connection, table: str, run_id: str, new_rows: list[dict[str, Any]]) -> None:
    con.execute("begin transaction")
    try:
        con.execute(f"delete from {table} where run_id = ?", [run_id])
        for row in new_rows:
            insert_row(con, table, row)
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise
