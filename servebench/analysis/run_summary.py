"""The end-of-run summary: every cell of a run with its verdicts, read back from the warehouse.

Read from the warehouse, not from the flow's outcome, so it shows what was landed (what
`servebench query` and the report show) including the invalid reasons and errors the
outcome does not carry. Invalid cells get their own loud lines: a run whose cells all
completed can still hold measurements that must not be trusted.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

COLUMNS = ("cell", "status", "correctness", "valid", "tok/s", "reasons / error")

_QUERY = """
select cell_key, status, correctness, valid, output_throughput, invalid_reasons, error
from cells
where run_id = ?
order by mode, load_kind, clients nulls last, rate nulls last, "repeat", cell_key
"""


@dataclass(frozen=True)
class InvalidCell:
    key: str
    reasons: list[str]


@dataclass(frozen=True)
class RunSummary:
    columns: tuple[str, ...]
    rows: list[tuple[str, ...]]  # formatted for display, one per cell
    invalid: list[InvalidCell]

    def alarm_lines(self) -> list[str]:
        """Nothing when every cell is valid; else a count and one line of reasons per invalid cell."""
        if not self.invalid:
            return []
        lines = [f"INVALID: {len(self.invalid)} of {len(self.rows)} cells failed their validity checks; "
                 "their numbers are not trustworthy measurements"]
        lines += [f"  {cell.key}: {'; '.join(cell.reasons) or 'no reason recorded'}" for cell in self.invalid]
        return lines


def summarize(con: duckdb.DuckDBPyConnection, run_id: str) -> RunSummary:
    """The run's cells in sweep order (mode, load point, repeat) with their verdicts."""
    rows, invalid = [], []
    for key, status, correctness, valid, throughput, reasons, error in con.execute(_QUERY, [run_id]).fetchall():
        reasons = list(reasons or [])
        rows.append((key, status, correctness or "-", validity_word(valid), throughput_text(throughput),
                     cell_notes(error, reasons)))
        if valid is False:
            invalid.append(InvalidCell(key, reasons))
    return RunSummary(COLUMNS, rows, invalid)


def validity_word(valid: bool | None) -> str:
    """NULL: the cell has no measurement to judge (it failed before or during its load)."""
    return "-" if valid is None else ("yes" if valid else "NO")


def throughput_text(tokens_per_s: float | None) -> str:
    return "-" if tokens_per_s is None else f"{tokens_per_s:.1f}"


def cell_notes(error: str | None, reasons: list[str] | None) -> str:
    """A cell's error and its invalid reasons, in one line (the report's cell table says the same)."""
    return "; ".join(([error] if error else []) + list(reasons or []))
