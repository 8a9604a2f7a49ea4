"""The tests the README's test command leaves to the night (docs/development.md, "Two lanes"):
the tests-nightly deployment of prefect.yaml runs them from the checkout."""

from __future__ import annotations

from prefect import flow

from servebench.tasks.tests import run_test_lane


@flow(name="nightly-tests", log_prints=False)
def nightly_tests(marker: str = "nightly") -> dict:
    """pytest -m MARKER with SERVEBENCH_NIGHTLY=1; fails when a test fails, naming the log."""
    return run_test_lane(marker)
