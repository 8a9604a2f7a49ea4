"""prefect.yaml and `servebench deployments serve` describe the same nightly deployments.

The real server, worker and runs are in tests/e2e/test_e2e_nightly.py; this checks the file
a user edits: every shipped campaign has a nightly deployment with a timezone, the
parameters point at files that exist, and `servebench deployments serve` reads the same schedules.
"""

import subprocess
import sys

import pytest
import yaml

from servebench.campaign.loading import load_campaign
from servebench.flows.serve import ROOT, nightly_deployments

DECLARED = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]


def test_every_shipped_campaign_has_a_nightly_deployment_on_one_queue_per_cluster():
    shipped = {str(p.relative_to(ROOT)) for p in (ROOT / "campaigns").glob("*.yaml")}
    campaigns = [d for d in DECLARED if d["entrypoint"] == "flows/campaign.py:campaign_run"]
    assert {d["parameters"]["campaign_file"] for d in campaigns} == shipped
    for deployment in campaigns:
        load_campaign(ROOT / deployment["parameters"]["campaign_file"])
    for deployment in DECLARED:
        assert deployment["schedules"][0]["cron"] and deployment["schedules"][0]["timezone"]
        assert deployment["concurrency_limit"] == 1
        assert deployment["work_pool"]["work_queue_name"] == "cluster-local"


def test_every_deployment_has_the_keys_and_one_of_the_entrypoints_the_real_deploy_is_shown():
    """tests/e2e/test_e2e_nightly.py deploys smoke-nightly and tests-nightly with `prefect deploy` on a real
    server: every other entry is one of the same shape."""
    shown = [d for d in DECLARED if d["name"] in ("smoke-nightly", "tests-nightly")]
    for deployment in DECLARED:
        like = next(d for d in shown if d["entrypoint"] == deployment["entrypoint"])
        assert set(deployment) == set(like) and set(deployment["work_pool"]) == set(like["work_pool"]), deployment
        assert [set(s) for s in deployment["schedules"]] == [set(s) for s in like["schedules"]], deployment
        assert set(deployment["parameters"]) == set(like["parameters"]), deployment


def test_serve_builds_the_same_deployments_and_schedules():
    served = {d.name: d for d in nightly_deployments()}
    assert set(served) == {d["name"] for d in DECLARED}
    for declared in DECLARED:
        schedule = served[declared["name"]].schedules[0].schedule
        assert schedule.cron == declared["schedules"][0]["cron"]
        assert schedule.timezone == declared["schedules"][0]["timezone"]
        assert served[declared["name"]].parameters == declared["parameters"]


def test_the_nightly_test_lane_is_a_deployment_running_the_tests_the_command_skips(tmp_path):
    """tests-nightly runs `pytest -m nightly` from the checkout with SERVEBENCH_NIGHTLY=1; an installed
    wheel (no tests beside it) is told where the lane runs from."""
    from servebench.devtools.nightly_lane import NoTestSuite, lane_command

    lane = [d for d in DECLARED if d["entrypoint"] == "flows/nightly_tests.py:nightly_tests"]
    assert [(d["name"], d["parameters"]) for d in lane] == [("tests-nightly", {"marker": "nightly"})]
    assert lane_command(ROOT)[1:] == ["-m", "pytest", "-m", "nightly", "-rs", str(ROOT / "tests")]
    with pytest.raises(NoTestSuite, match="runs from a checkout"):
        lane_command(tmp_path)
    with pytest.raises(NoTestSuite):
        lane_command(None)


def test_serve_without_a_prefect_server_says_how_to_start_one(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PREFECT_HOME": str(tmp_path / "p")}
    done = subprocess.run([sys.executable, "-m", "servebench", "deployments", "serve"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 1 and "prefect server start" in done.stderr


def test_a_nightly_test_is_skipped_with_its_reason_unless_the_lane_runs_it():
    from tests.support.nightly import nightly_skip

    mark = pytest.mark.nightly(reason="PP=2 over Ray").mark
    skip = nightly_skip(mark, {})
    assert skip is not None and skip.kwargs["reason"] == (
        "nightly lane: PP=2 over Ray; it runs in the tests-nightly deployment (prefect.yaml), and here with "
        "SERVEBENCH_NIGHTLY=1")
    assert nightly_skip(mark, {"SERVEBENCH_NIGHTLY": "1"}) is None
    assert nightly_skip(None, {}) is None
    with pytest.raises(pytest.UsageError, match="needs reason"):
        nightly_skip(pytest.mark.nightly.mark, {})
