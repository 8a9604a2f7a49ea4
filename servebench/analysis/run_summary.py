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

from servebench.analysis.cell_dispersion import PointMetric, run_spreads
from servebench.analysis.dispersion import Spread
from servebench.analysis.regression.series import cell_point
from servebench.warehouse import Connection, reads

COLUMNS = ("cell", "status", "correctness", "valid", "tok/s", "reasons / error")


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


def summarize(con: Connection, run_id: str) -> RunSummary:
    """The run's cells in sweep order (mode, load point, repeat) with their verdicts; after the
    last cell of a load point measured validly twice or more, the point's spread."""
    cells = reads.summary_cells(con, run_id)
    spreads = run_spreads(con, run_id)
    last_of_point = {cell_point(cell["cell_key"]): index for index, cell in enumerate(cells)}
    rows: list[tuple[str, ...]] = []
    invalid: list[InvalidCell] = []
    for index, cell in enumerate(cells):
        key, valid, attempts = cell["cell_key"], cell["valid"], cell["attempts"]
        reasons = list(cell["invalid_reasons"] or [])
        retried = [f"measured {attempts} times"] if attempts and attempts > 1 else []
        # an unsteady warm-up: measured all the same, and said
        unsteady = [f"warm-up: {cell['warmup_why']}"] if cell["warmup_steady"] is False else []
        rows.append((key, cell["status"], cell["correctness"] or "-", validity_word(valid),
                     throughput_text(cell["output_throughput"]),
                     cell_notes(cell["error"], reasons + unsteady + retried)))
        if valid is False:
            invalid.append(InvalidCell(key, reasons))
        point = cell_point(key)
        if last_of_point[point] == index and (row := spread_row(point, spreads)) is not None:
            rows.append(row)
    measured_again = sum(1 for cell in cells if cell["attempts"] and cell["attempts"] > 1)
    return RunSummary(COLUMNS, rows, invalid, cells=len(cells), retried=measured_again)


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
