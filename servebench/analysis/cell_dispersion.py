"""The repeats' spread of a run's load points, read from the warehouse (the view
`cell_repeat_values`) and summed up by `servebench/analysis/dispersion.py`; and the landing of their
bootstrap intervals into `cell_intervals`, which the `cell_dispersion` view shows beside the CV.

The interval is computed in Python (a seeded bootstrap is not SQL), once a run's cells are
landed; the end-of-run table, the report and `servebench compare` compute it again from the same
values with the same seed, so each shows the numbers `servebench query` shows, also for a run
landed before this existed.
"""

from __future__ import annotations

from datetime import datetime, timezone

from servebench.analysis.dispersion import LEVEL, RESAMPLES, SEED, Spread, spread
from servebench.warehouse import Connection, findings, reads

# the cells' main figures, in the order the views list them
METRICS = ("output_throughput", "request_throughput", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms", "e2el_p50_ms",
           "goodput")

PointMetric = tuple[str, str]   # (load point, e.g. tp2.c4; metric)


def repeat_values(con: Connection, run_id: str) -> dict[PointMetric, list[float]]:
    """(load point, metric) -> the valid repeats' values of one run, in repeat order."""
    found: dict[PointMetric, list[float]] = {}
    for row in reads.repeat_values(con, run_id):
        found.setdefault((row["cell_point"], row["metric"]), []).append(row["value"])
    return found


def run_spreads(con: Connection, run_id: str) -> dict[PointMetric, Spread]:
    """(load point, metric) -> its spread over the repeats (no interval for a single repeat)."""
    return {key: spread(values) for key, values in repeat_values(con, run_id).items()}


def most_repeats(spreads: dict[PointMetric, Spread]) -> int:
    """The largest number of valid repeats of any load point (0: nothing measured)."""
    return max((s.repeats for s in spreads.values()), default=0)


def land_intervals(con: Connection, run_id: str) -> int:
    """Replace the run's rows of `cell_intervals` with the intervals of its load points measured
    at least twice; return how many were landed. Idempotent: call it after every landing of the
    run's cells (a resumed run's new repeats change the values, and the view hides a stale row)."""
    now = datetime.now(timezone.utc)
    intervals = [dict(run_id=run_id, cell_point=point, metric=metric, repeat_values=values, ci_low=s.low,
                      ci_high=s.high, level=LEVEL, resamples=RESAMPLES, seed=SEED, computed_at=now)
                 for (point, metric), values in repeat_values(con, run_id).items()
                 if (s := spread(values)).low is not None]
    findings.land_intervals(con, run_id, intervals)
    return len(intervals)
