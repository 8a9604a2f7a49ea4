"""Report stage: render the run's charts from the warehouse."""

from __future__ import annotations

from pathlib import Path

from prefect import task
from prefect.cache_policies import NONE

from servebench import warehouse
from servebench.analysis.report import run_report


@task(name="report", cache_policy=NONE)
def render_report(warehouse_path: str, run_id: str, out_dir: str) -> str:
    con = warehouse.connect(warehouse_path, read_only=True)
    try:
        return str(run_report(con, run_id, Path(out_dir)))
    finally:
        con.close()
