"""The end-of-run summary: every cell of a run with its verdicts, read back from the warehouse.

Read from the warehouse, not from the flow's outcome, so it shows what was landed (what
`servebench query` and the report show) including the invalid reasons and errors the
outcome does not carry. Invalid cells get their own loud lines: a run whose cells all
completed can still hold measurements that must not be trusted. With repeats, each load point
measured validly at least twice gets a row of its own after its last cell: the median of its
repeats, ±CV and the 95% interval (servebench/analysis/dispersion.py), so a reader sees how far
apart the repeats were before comparing two figures.
"""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from servebench.analysis.cell_dispersion import PointMetric, run_spreads
from servebench.analysis.dispersion import Spread
from servebench.analysis.regression.series import cell_point

COLUMNS = ("cell", "status", "correctness", "valid", "tok/s", "reasons / error")

_QUERY = """
select cell_key, status, correctness, valid, output_throughput, invalid_reasons, error, warmup_steady,
       warmup_why, attempts
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
    rows: list[tuple[str, ...]]  # formatted for display, one per cell (and per repeated load point)
    invalid: list[InvalidCell]
    cells: int = 0               # how many of the rows are cells
    retried: int = 0             # cells measured again because a measurement was invalid (validity.retries)

    def retry_line(self) -> str | None:
        """How many cells needed a second measurement (None: none did)."""
        if not self.retried:
            return None
        return f"{self.retried} of {self.cells} cells measured again after an invalid measurement (cell_attempts)"

    def alarm_lines(self) -> list[str]:
        """Nothing when every cell is valid; else a count and one line of reasons per invalid cell."""
        if not self.invalid:
            return []
        lines = [f"INVALID: {len(self.invalid)} of {self.cells} cells failed their validity checks; "
                 "their numbers are not trustworthy measurements"]
        lines += [f"  {cell.key}: {'; '.join(cell.reasons) or 'no reason recorded'}" for cell in self.invalid]
        return lines


def summarize(con: duckdb.DuckDBPyConnection, run_id: str) -> RunSummary:
    """The run's cells in sweep order (mode, load point, repeat) with their verdicts; after the
    last cell of a load point measured validly twice or more, the point's spread."""
    cells = con.execute(_QUERY, [run_id]).fetchall()
    spreads = run_spreads(con, run_id)
    last_of_point = {cell_point(key): index for index, (key, *_) in enumerate(cells)}
    rows, invalid = [], []
    for index, (key, status, correctness, valid, throughput, reasons, error, steady, warmup_why,
                attempts) in enumerate(cells):
        reasons = list(reasons or [])
        retried = [f"measured {attempts} times"] if attempts and attempts > 1 else []
        unsteady = [f"warm-up: {warmup_why}"] if steady is False else []   # measured all the same: said
        rows.append((key, status, correctness or "-", validity_word(valid), throughput_text(throughput),
                     cell_notes(error, reasons + unsteady + retried)))
        if valid is False:
            invalid.append(InvalidCell(key, reasons))
        point = cell_point(key)
        if last_of_point[point] == index and (row := spread_row(point, spreads)) is not None:
            rows.append(row)
    retried = sum(1 for cell in cells if cell[-1] and cell[-1] > 1)
    return RunSummary(COLUMNS, rows, invalid, cells=len(cells), retried=retried)


# the latencies a point's row lists beside its throughput
SPREAD_LATENCIES = (("TTFT p50", "ttft_p50_ms"), ("TPOT p50", "tpot_p50_ms"), ("E2EL p50", "e2el_p50_ms"))


def spread_row(point: str, spreads: dict[PointMetric, Spread]) -> tuple[str, ...] | None:
    """A load point's row: the median of its repeats in the tok/s column, and in the notes (the
    one column that wraps, so the table keeps fitting 80 columns) each figure as median ±CV [95%
    interval]; None below two valid repeats (nothing to spread)."""
    throughput = spreads.get((point, "output_throughput"))
    if throughput is None or throughput.repeats < 2:
        return None
    figures = [f"tok/s {throughput.text()}"] + [f"{label} {s.text()} ms" for label, metric in SPREAD_LATENCIES
                                                if (s := spreads.get((point, metric))) is not None and s.repeats >= 2]
    return (point, f"median of {throughput.repeats}", "", "", throughput_text(throughput.median),
            "±CV [95% interval]: " + "; ".join(figures))


def validity_word(valid: bool | None) -> str:
    """NULL: the cell has no measurement to judge (it failed before or during its load)."""
    return "-" if valid is None else ("yes" if valid else "NO")


def throughput_text(tokens_per_s: float | None) -> str:
    return "-" if tokens_per_s is None else f"{tokens_per_s:.1f}"


def cell_notes(error: str | None, reasons: list[str] | None) -> str:
    """A cell's error and its invalid reasons, in one line (the report's cell table says the same)."""
    return "; ".join(([error] if error else []) + list(reasons or []))
