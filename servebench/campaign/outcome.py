"""What a cell's measurement says, and what the run's cells say together: pure decisions, made in
one place for every path that judges a cell (measured now, landed from its result file after an
interrupt, failed without a measurement), so the paths cannot drift apart.

A cell is `completed` when its server answered requests and nothing spoiled the numbers: a server
that ended or hung during it, a fault that hit it. A completed cell can still be invalid (the
load generator's own limits: schedule lag, achieved rate, client CPU; a hang watch that broke),
or because another process took its server's cores (`foreign_cpu_reasons`, over
`validity.max_foreign_cpu`); the campaign's `validity.on_invalid` says whether that fails the run.
"""

from __future__ import annotations

from dataclasses import dataclass

from servebench.analysis.capacity import judge, observed_from_summary
from servebench.config.campaign import Campaign
from servebench.config.sweep import Cell
from servebench.serving.correctness import GateResult

FAULT_INJECTED = "a fault was injected into the cell (what it measured lands with it)"
FAULT_PLANNED = ("a fault was planned for the cell (landed from its result file after an interrupt: whether it "
                 "hit is not known)")


@dataclass(frozen=True)
class FaultEvidence:
    """What is known of the cell's faults: `clause` is added to the cell's error ('' for none), and
    `spoiled` says why its numbers measure a fault rather than the server (None: they do not)."""

    clause: str = ""
    spoiled: str | None = None

    @classmethod
    def injected(cls, descriptions: list[str], hit: bool) -> "FaultEvidence":
        """Faults injected during the cell: what each did; the numbers are spoiled if any hit."""
        if not descriptions:
            return cls()
        return cls("; injected: " + "; ".join(descriptions), FAULT_INJECTED if hit else None)

    @classmethod
    def planned(cls, campaign: Campaign, cell: Cell) -> "FaultEvidence":
        """A cell landed from its result file: a fault planned for it may have hit, and nobody saw."""
        return cls(spoiled=FAULT_PLANNED if any(fault.cell == cell.key for fault in campaign.faults) else None)


NO_FAULTS = FaultEvidence()


@dataclass(frozen=True)
class CellOutcome:
    """A cell's verdict as it lands: `status` completed | failed, the cause of a failure, whether it
    met the campaign's SLO (None: the campaign has none), and, for a completed cell the load
    generator judged invalid, its reasons."""

    status: str
    error: str | None
    slo_met: bool | None
    invalid_reasons: list[str] | None = None       # None: valid (or failed)

    @property
    def invalid(self) -> bool:
        return self.invalid_reasons is not None


def measured_outcome(campaign: Campaign, cell: Cell, summary: dict, server_problem: str | None = None,
                     faults: FaultEvidence = NO_FAULTS) -> CellOutcome:
    """The verdict on a cell whose load ran to its end (`summary`: the load generator's), given
    what the server was like afterwards (`server_problem`: why it can no longer serve) and what its
    faults did. Errors count as measurements when the campaign says so (an overload study). A summary
    whose server nodes lost their cores to others is first marked invalid, in place (`judge_foreign_cpu`)."""
    judge_foreign_cpu(summary, campaign.validity.max_foreign_cpu)
    hung = (summary.get("hung") or {}).get("reason")
    overloaded = campaign.validity.errors_are_measurements and summary["failed"] > 0
    if hung or server_problem:  # what it measured lands, but the cell failed, with the cause
        cause = "; ".join(filter(None, [hung, server_problem]))
        status, error = "failed", (f"{cause} (during the cell: {summary['completed']} requests answered, "
                                   f"{summary['failed']} failed){faults.clause}")
    elif summary["completed"] == 0 and not overloaded:
        status, error = "failed", f"every request failed: {summary['errors']}{faults.clause}"
    elif faults.spoiled:  # the server survived it, but these numbers measure the fault: never a night's result
        status, error = "failed", faults.spoiled + faults.clause
    else:
        status, error = "completed", None
    valid = bool(summary.get("valid", True))
    return CellOutcome(status=status, error=error, slo_met=slo_verdict(campaign.slo, cell, summary, status),
                       invalid_reasons=list(summary["invalid_reasons"]) if status == "completed" and not valid
                       else None)


def foreign_cpu_reasons(node_cpu: list[dict], limit: float) -> list[str]:
    """Why a cell is invalid because processes not its server's (nor servebench's) took more than
    `limit` of its server's cores' time on a node, one reason per such node."""
    reasons = []
    for node in node_cpu:
        if node["foreign_share"] > limit:
            top = f"; the busiest of them: {node['top_foreign']}" if node.get("top_foreign") else ""
            reasons.append(f"other processes took {node['foreign_share']:.0%} of the server's cores on node "
                           f"{node['node']} (cores {node['cores']}, {node['seconds']:.1f} s; limit "
                           f"{limit:.0%} of their time){top}")
    return reasons


def judge_foreign_cpu(summary: dict, limit: float) -> None:
    """Mark the summary invalid with `foreign_cpu_reasons` (once: judging it again adds nothing), in
    place, so what lands (the cell and its attempts, both read from the summary) says so too."""
    reasons = [r for r in foreign_cpu_reasons(summary.get("node_cpu") or [], limit)
               if r not in summary.setdefault("invalid_reasons", [])]
    if reasons:
        summary["invalid_reasons"] += reasons
        summary["valid"] = False


def measure_again(outcome: CellOutcome, attempt: int, retries: int, faults: FaultEvidence = NO_FAULTS) -> bool:
    """Whether a cell is measured again right away: its measurement completed but the load
    generator found it invalid (its own limits: a busy core, a lagging schedule), and retries
    remain. A failed cell is not (its server or a fault is the cause, and a second measurement
    would hide it), nor one that had faults (they were meant for one measurement)."""
    return outcome.status == "completed" and outcome.invalid and attempt < retries and not faults.clause


def failed_outcome(campaign: Campaign, error: str) -> CellOutcome:
    """The verdict on a cell that failed without a measurement (its server gone, its load not run)."""
    return CellOutcome(status="failed", error=error, slo_met=False if campaign.slo else None)


def slo_verdict(slo: dict[str, float], cell: Cell, summary: dict, status: str) -> bool | None:
    """Whether the cell met the campaign's SLO (valid, every limit held); None without an SLO."""
    if not slo:
        return None
    point = cell.point.rate if cell.point.kind == "open" else cell.point.clients
    assert point is not None  # an open point has its rate, a closed one its clients (spec/sweep.py)
    return judge(point, observed_from_summary(summary, slo), slo,
                 valid=status == "completed" and bool(summary.get("valid", True))).met


def blocked_reason(gate: GateResult, accept: str) -> str:
    """Why a mode's cells are not measured: its correctness gate failed, or was only close and the
    campaign accepts equal tokens only."""
    if gate.status == "close":
        return f"correctness gate close but the campaign demands equal tokens (correctness.accept: {accept}): " \
               f"{gate.detail}"
    return f"correctness gate failed: {gate.detail}"


def run_status(statuses: dict[str, str], invalid: dict[str, list[str]], on_invalid: str = "fail") -> str:
    """completed | invalid (every cell measured, some not to be trusted, and the campaign fails on that)
    | partial | failed."""
    if statuses and all(s == "completed" for s in statuses.values()):
        return "invalid" if invalid and on_invalid == "fail" else "completed"
    return "partial" if any(s == "completed" for s in statuses.values()) else "failed"
