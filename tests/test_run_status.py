"""The run's status from its cells: an invalid measurement is not a completed campaign
unless the campaign says so (validity.on_invalid: warn)."""

from servebench.campaign.outcome import blocked_reason, run_status
from servebench.serving.correctness import GateResult


def test_every_cell_completed_and_valid_is_completed():
    assert run_status({"a": "completed", "b": "completed"}, {}) == "completed"


def test_an_invalid_cell_fails_the_run_unless_the_campaign_only_warns():
    statuses, invalid = {"a": "completed", "b": "completed"}, {"b": ["schedule lag p99 11.00 ms exceeds 10 ms"]}
    assert run_status(statuses, invalid, "fail") == "invalid"
    assert run_status(statuses, invalid, "warn") == "completed"


def test_failed_cells_make_a_partial_or_failed_run():
    assert run_status({"a": "completed", "b": "failed"}, {}) == "partial"
    assert run_status({"a": "failed"}, {}) == "failed"
    assert run_status({}, {}) == "failed"


def test_a_blocked_mode_says_whether_its_gate_failed_or_was_only_close():
    close = GateResult(status="close", detail="prompt 2 token 1: near-tie")
    assert "demands equal tokens" in blocked_reason(close, "equal")
    assert blocked_reason(GateResult(status="failed", detail="x"), "close").startswith("correctness gate failed")
