"""prefect.yaml and `servebench serve` describe the same nightly deployments.

The real server, worker and runs are in tests/test_e2e_nightly.py; this checks the file
a user edits: every shipped campaign has a nightly deployment with a timezone, the
parameters point at files that exist, and `servebench serve` reads the same schedules.
"""

import subprocess
import sys

import yaml

from servebench.campaign.loading import load_campaign
from servebench.flows.serve import ROOT, nightly_deployments

DECLARED = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]


def test_every_shipped_campaign_has_a_nightly_deployment_on_one_queue_per_cluster():
    shipped = {str(p.relative_to(ROOT)) for p in (ROOT / "campaigns").glob("*.yaml")}
    assert {d["parameters"]["campaign_file"] for d in DECLARED} == shipped
    for deployment in DECLARED:
        load_campaign(ROOT / deployment["parameters"]["campaign_file"])
        assert deployment["schedules"][0]["cron"] and deployment["schedules"][0]["timezone"]
        assert deployment["concurrency_limit"] == 1
        assert deployment["work_pool"]["work_queue_name"] == "cluster-local"


def test_serve_builds_the_same_deployments_and_schedules():
    served = {d.name: d for d in nightly_deployments()}
    assert set(served) == {d["name"] for d in DECLARED}
    for declared in DECLARED:
        schedule = served[declared["name"]].schedules[0].schedule
        assert schedule.cron == declared["schedules"][0]["cron"]
        assert schedule.timezone == declared["schedules"][0]["timezone"]
        assert served[declared["name"]].parameters == declared["parameters"]


def test_serve_without_a_prefect_server_says_how_to_start_one(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PREFECT_HOME": str(tmp_path / "p")}
    done = subprocess.run([sys.executable, "-m", "servebench", "serve"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 1 and "prefect server start" in done.stderr
