"""A cell's verdict and the run's status from its cells (servebench/campaign/outcome.py): one
judgement for a cell measured now or landed from its result file after an interrupt; an invalid
measurement is not a completed campaign unless the campaign says so (validity.on_invalid: warn)."""

from servebench.campaign.loading import parse_campaign
from servebench.campaign.outcome import (
    FAULT_INJECTED,
    FAULT_PLANNED,
    CellOutcome,
    FaultEvidence,
    blocked_reason,
    failed_outcome,
    measured_outcome,
    run_status,
)
from servebench.config.sweep import expand
from servebench.serving.correctness import GateResult
from tests.support.small_campaign import small_campaign_text


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


LOAD = "{clients: [1, 2], requests: 4}"


def campaign_and_cell(**blocks):
    """A small campaign with an SLO (and `blocks`), and its first cell."""
    campaign = parse_campaign(small_campaign_text(LOAD, slo="{ttft_p99_ms: 500}", **blocks))
    return campaign, expand(campaign)[0]


def summary(completed=4, failed=0, ttft_p99=100.0, valid=True, reasons=(), hung=None):
    return {"completed": completed, "failed": failed, "errors": {"timeout": failed} if failed else {},
            "ttft_ms": {"p50": ttft_p99 / 2, "p99": ttft_p99}, "valid": valid, "invalid_reasons": list(reasons),
            **({"hung": {"reason": hung}} if hung else {})}


def test_a_cell_that_answered_within_its_slo_is_completed_and_met_it():
    campaign, cell = campaign_and_cell()
    outcome = measured_outcome(campaign, cell, summary())
    assert (outcome.status, outcome.error, outcome.slo_met, outcome.invalid) == ("completed", None, True, False)
    assert measured_outcome(campaign, cell, summary(ttft_p99=900.0)).slo_met is False


def test_an_invalid_cell_is_completed_with_its_reasons_and_misses_the_slo():
    campaign, cell = campaign_and_cell()
    outcome = measured_outcome(campaign, cell, summary(valid=False, reasons=["schedule lag p99 11 ms exceeds 10 ms"]))
    assert outcome.status == "completed" and outcome.invalid_reasons == ["schedule lag p99 11 ms exceeds 10 ms"]
    assert outcome.slo_met is False


def test_every_request_failed_is_a_failed_cell_unless_errors_are_measurements():
    campaign, cell = campaign_and_cell()
    outcome = measured_outcome(campaign, cell, summary(completed=0, failed=4))
    assert outcome.status == "failed" and outcome.error.startswith("every request failed: {'timeout': 4}")
    overload, cell = campaign_and_cell(validity="{errors_are_measurements: true}")
    assert measured_outcome(overload, cell, summary(completed=0, failed=4)).status == "completed"


def test_a_server_that_hung_or_ended_during_the_cell_fails_it_with_the_cause_and_the_counts():
    campaign, cell = campaign_and_cell()
    outcome = measured_outcome(campaign, cell, summary(completed=3, failed=1, hung="no token for 30 s"),
                               server_problem="server of mode tp1 is no longer healthy",
                               faults=FaultEvidence.injected(["fault kill on n0 at 1.0 s: 123"], hit=True))
    assert outcome.status == "failed" and outcome.slo_met is False and not outcome.invalid
    assert outcome.error == ("no token for 30 s; server of mode tp1 is no longer healthy (during the cell: 3 requests "
                             "answered, 1 failed); injected: fault kill on n0 at 1.0 s: 123")


def test_a_fault_that_hit_or_may_have_hit_spoils_the_numbers():
    campaign, cell = campaign_and_cell()
    missed = measured_outcome(campaign, cell, summary(), faults=FaultEvidence.injected(["fault kill: none"], hit=False))
    assert missed.status == "completed"
    hit = measured_outcome(campaign, cell, summary(), faults=FaultEvidence.injected(["fault kill on n0: 7"], hit=True))
    assert hit.status == "failed" and hit.error == FAULT_INJECTED + "; injected: fault kill on n0: 7"
    planned_only = measured_outcome(campaign, cell, summary(), faults=FaultEvidence.planned(campaign, cell))
    assert planned_only.status == "completed"
    planned, cell = campaign_and_cell(faults=f"[{{cell: {cell.key}, action: kill}}]")
    landed = measured_outcome(planned, cell, summary(), faults=FaultEvidence.planned(planned, cell))
    assert (landed.status, landed.error) == ("failed", FAULT_PLANNED)


def test_a_cell_without_a_measurement_fails_and_misses_the_slo_only_if_there_is_one():
    campaign, _ = campaign_and_cell()
    assert failed_outcome(campaign, "server did not start") == CellOutcome("failed", "server did not start", False)
    no_slo = parse_campaign(small_campaign_text(LOAD))
    assert failed_outcome(no_slo, "x").slo_met is None
