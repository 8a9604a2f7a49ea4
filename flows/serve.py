"""`servebench serve`: the nightly deployments of prefect.yaml, served from one machine.

For a single machine without a worker: the same deployments, schedules and parameters as
prefect.yaml (read from it, so there is one source), run by Prefect's own `serve`, one
flow run at a time (the machine is the cluster). Needs a persistent Prefect server
(PREFECT_API_URL), since schedules live there.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from prefect import serve
from prefect.deployments.runner import RunnerDeployment
from prefect.schedules import Cron

from servebench.flows.campaign import campaign_run
from servebench.flows.nightly_tests import nightly_tests
from servebench.paths import home

ROOT = home()  # prefect.yaml: the checkout's, or the current directory's for an installed wheel
FLOWS = {"flows/campaign.py:campaign_run": campaign_run, "flows/nightly_tests.py:nightly_tests": nightly_tests}


def nightly_deployments(prefect_yaml: Path = ROOT / "prefect.yaml", only: list[str] | None = None
                        ) -> list[RunnerDeployment]:
    """prefect.yaml's deployments (campaigns, and the test suite's nightly lane) as runner deployments
    (work pools are a worker's business)."""
    declared = (yaml.safe_load(prefect_yaml.read_text()) or {}).get("deployments") or []
    unknown = sorted(set(only or []) - {d.get("name") for d in declared})
    if unknown:
        raise ValueError(f"{prefect_yaml}: no deployment named {', '.join(unknown)}")
    deployments = []
    for declared_deployment in declared:
        flow = FLOWS.get(declared_deployment.get("entrypoint", ""))
        if flow is None or (only and declared_deployment["name"] not in only):
            continue
        schedules = [Cron(s["cron"], timezone=s.get("timezone"), active=s.get("active", True))
                     for s in declared_deployment.get("schedules") or [] if "cron" in s]
        deployments.append(flow.to_deployment(
            name=declared_deployment["name"], description=declared_deployment.get("description"),
            parameters=declared_deployment.get("parameters") or {}, schedules=schedules,
            concurrency_limit=declared_deployment.get("concurrency_limit"),
            tags=declared_deployment.get("tags")))
    return deployments


def serve_nightly(only: list[str] | None = None) -> None:
    serve(*nightly_deployments(only=only), limit=1)
