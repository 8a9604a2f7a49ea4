"""Regression stage: analyze tonight's series against the history, land the findings and
tell the reader in a Prefect markdown artifact."""

from __future__ import annotations

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NONE

from servebench import warehouse
from servebench.analysis.regression.history import analyze_run, findings, run_verdicts
from servebench.analysis.regression.summary import markdown
from servebench.config.detection import DetectionSettings


@task(name="detect-regressions", cache_policy=NONE)
def detect_regressions(warehouse_path: str, run_id: str, settings: DetectionSettings) -> list[dict]:
    con = warehouse.connect(warehouse_path)
    try:
        analyze_run(con, run_id, settings)
        return findings(con, run_id=run_id)
    finally:
        con.close()


@task(name="regressions-artifact", cache_policy=NONE)
def publish_regressions(rows: list[dict], run_id: str, warehouse_path: str | None = None,
                        settings: DetectionSettings | None = None) -> str:
    """The findings and, given the warehouse, every series' verdict counted (no change, not enough history...)."""
    verdicts = None
    if warehouse_path is not None:
        con = warehouse.connect(warehouse_path)
        try:
            verdicts = run_verdicts(con, run_id, settings or DetectionSettings())
        finally:
            con.close()
    text = markdown(rows, run_id, verdicts)
    create_markdown_artifact(markdown=text, key="campaign-regressions",
                             description=f"regressions and improvements found in run {run_id}")
    return text
