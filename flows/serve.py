"""`servebench deployments serve`: a prefect.yaml's deployments served from one machine.

For a machine without a worker: the deployments, schedules and parameters of a prefect.yaml (read
from it, so there is one source: this repository's own, or the one `servebench deployments init`
wrote for a user's campaigns), run by Prefect's own `serve`, one flow run at a time (the machine is
the cluster). Needs a persistent Prefect server (PREFECT_API_URL), since schedules live there.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from prefect import Flow, serve
from prefect.deployments.runner import RunnerDeployment
from prefect.flows import load_flow_from_entrypoint
from prefect.schedules import Cron

from servebench.flows.campaign import campaign_run
from servebench.flows.nightly_tests import nightly_tests
from servebench.paths import home

ROOT = home()  # prefect.yaml: the checkout's, or the current directory's for an installed wheel
# this repository's entrypoints are paths of its checkout; a user's file names modules (`deployments init`)
FLOWS: dict[str, Flow] = {"flows/campaign.py:campaign_run": campaign_run,
                          "servebench.flows.campaign:campaign_run": campaign_run,
                          "flows/nightly_tests.py:nightly_tests": nightly_tests}


def nightly_deployments(prefect_yaml: Path = ROOT / "prefect.yaml", only: list[str] | None = None
                        ) -> list[RunnerDeployment]:
    """A prefect.yaml's deployments as runner deployments (work pools are a worker's business)."""
    declared = (yaml.safe_load(prefect_yaml.read_text()) or {}).get("deployments") or []
    unknown = sorted(set(only or []) - {d.get("name") for d in declared})
    if unknown:
        raise ValueError(f"{prefect_yaml}: no deployment named {', '.join(unknown)}")
    deployments = []
    for entry in declared:
        if only and entry.get("name") not in only:
            continue
        entrypoint = entry.get("entrypoint", "")
        flow = FLOWS.get(entrypoint) or load_flow_from_entrypoint(entrypoint)
        schedules = [Cron(s["cron"], timezone=s.get("timezone"), active=s.get("active", True))
                     for s in entry.get("schedules") or [] if "cron" in s]
        deployment = flow.to_deployment(
            name=entry["name"], description=entry.get("description"), parameters=entry.get("parameters") or {},
            schedules=schedules, concurrency_limit=entry.get("concurrency_limit"), tags=entry.get("tags"))
        assert isinstance(deployment, RunnerDeployment)  # a synchronous caller gets the deployment itself
        deployments.append(deployment)
    return deployments


def serve_deployments(prefect_yaml: Path, only: list[str] | None = None) -> None:
    serve(*nightly_deployments(prefect_yaml, only), limit=1)
