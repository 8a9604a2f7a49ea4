"""The repeats' spread of a run's load points, read from the warehouse (`cell_repeat_values`,
migration 019) and summed up by `servebench/analysis/dispersion.py`; and the landing of their
bootstrap intervals into `cell_intervals`, which the `cell_dispersion` view shows beside the CV.

The interval is computed in Python (a seeded bootstrap is not SQL), once a run's cells are
landed; the end-of-run table, the report and `servebench compare` compute it again from the same
values with the same seed, so each shows the numbers `servebench query` shows, also for a run
landed before this existed.
"""

from __future__ import annotations

from datetime import datetime, timezone

import duckdb

from servebench.analysis.dispersion import LEVEL, RESAMPLES, SEED, Spread, spread

# the cells' main figures, in the order the views list them
METRICS = ("output_throughput", "request_throughput", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "e2el_p50_ms",
           "goodput")

PointMetric = tuple[str, str]   # (load point, e.g. tp2.c4; metric)


def repeat_values(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[PointMetric, list[float]]:
    """(load point, metric) -> the valid repeats' values of one run, in repeat order."""
    found: dict[PointMetric, list[float]] = {}
    for point, metric, value in con.execute(
            'select cell_point, metric, value from cell_repeat_values where run_id = ? order by "repeat", cell_id',
            [run_id]).fetchall():
        found.setdefault((point, metric), []).append(value)
    return found


def run_spreads(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[PointMetric, Spread]:
    """(load point, metric) -> its spread over the repeats (no interval for a single repeat)."""
    return {key: spread(values) for key, values in repeat_values(con, run_id).items()}


def most_repeats(spreads: dict[PointMetric, Spread]) -> int:
    """The largest number of valid repeats of any load point (0: nothing measured)."""
    return max((s.repeats for s in spreads.values()), default=0)


def land_intervals(con: duckdb.DuckDBPyConnection, run_id: str) -> int:
    """Replace the run's rows of `cell_intervals` with the intervals of its load points measured
    at least twice; return how many were landed. Idempotent: call it after every landing of the
    run's cells (a resumed run's new repeats change the values, and the view hides a stale row)."""
    now = datetime.now(timezone.utc)
    rows = [[run_id, point, metric, values, s.low, s.high, LEVEL, RESAMPLES, SEED, now]
            for (point, metric), values in repeat_values(con, run_id).items()
            if (s := spread(values)).low is not None]
    con.execute("begin")
    try:
        con.execute("delete from cell_intervals where run_id = ?", [run_id])
        if rows:
            con.executemany("insert into cell_intervals (run_id, cell_point, metric, repeat_values, ci_low, ci_high, "
                            "level, resamples, seed, computed_at) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        con.execute("commit")
    except BaseException:
        con.execute("rollback")
        raise
    return len(rows)
