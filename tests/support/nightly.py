"""The nightly lane: tests the README's test command leaves to the `tests-nightly` deployment.

A test joins it with `@pytest.mark.nightly(reason=...)`, the reason saying what it proves that the
command does not, and what the command keeps of that claim (docs/development.md, "Two lanes"). Without
`SERVEBENCH_NIGHTLY=1` such a test is skipped and pytest's summary prints that reason; with it, it
runs like any other (the deployment runs `pytest -m nightly` so).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from servebench.devtools.nightly_lane import NIGHTLY_ENV as ENV  # the variable the lane's deployment sets

WHERE = f"it runs in the tests-nightly deployment (prefect.yaml), and here with {ENV}=1"


def nightly_skip(mark: pytest.Mark | None, env: Mapping[str, str]) -> pytest.MarkDecorator | None:
    """The skip a test of the nightly lane gets in the test command; None when it runs (outside the
    lane, or with SERVEBENCH_NIGHTLY=1). A nightly mark without a reason is refused: a skip must say why."""
    if mark is None or env.get(ENV):
        return None
    reason = mark.kwargs.get("reason") or (mark.args[0] if mark.args else "")
    if not reason:
        raise pytest.UsageError("@pytest.mark.nightly needs reason=...: what the test proves that the test "
                                "command does not (docs/development.md)")
    return pytest.mark.skip(reason=f"nightly lane: {reason}; {WHERE}")
