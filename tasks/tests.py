"""The nightly test lane as one Prefect task: its pass or fail is the flow run's."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.devtools.nightly_lane import run_lane


@task(name="test-lane", cache_policy=NONE)
def run_test_lane(marker: str) -> dict:
    outcome = run_lane(marker)
    if outcome.exit_code != 0:
        raise RuntimeError(f"pytest -m {marker} exited {outcome.exit_code}: {outcome.summary} (log: {outcome.log})")
    return {"summary": outcome.summary, "log": outcome.log}
