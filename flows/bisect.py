"""The bisect flow: which commit of the engine made a campaign's metric worse. Each step is a
`campaign_run` of its own; the bisecting is `servebench.bisect.run`, its decisions
`servebench.bisect.search`."""

from __future__ import annotations

from prefect import flow

from servebench.bisect.run import BisectRequest, find_first_bad, start_bisection
from servebench.flows.campaign import campaign_run


@flow(name="bisect", log_prints=False)
def bisect_run(campaign_file: str, good: str, bad: str, metric: str = "tpot_p50_ms", mode: str | None = None,
               threshold: float = 0.10, repeats: int = 3, warehouse_path: str | None = None,
               point: str | None = None) -> dict:
    """Find the first commit between good and bad whose metric is worse; return the steps and it."""
    request = BisectRequest(campaign_file, good, bad, metric, mode, threshold, repeats, warehouse_path, point)
    bisection = start_bisection(request, run_campaign=campaign_run)
    return find_first_bad(bisection)
