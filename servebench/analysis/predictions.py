"""A run's cells against the performance model (servebench/prediction/, docs/performance-model.md), landed in
`cell_predictions` once the run's cells are: each cell predicted from the rooflines the run landed for its
server nodes, with the efficiency factors fitted on the run's first single-worker mode's cells, beside the
measurement with their ratio and, for a cell far below its prediction, the causes the model names."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from servebench.planning.plan import Plan
from servebench.prediction.campaign import NetworkFigures
from servebench.prediction.hardware import figures_from_roofline
from servebench.prediction.plan import Inputs, cell_records
from servebench.prediction.step import Efficiency
from servebench.warehouse import Connection, landing, reads

FIGURES_SOURCE = "the roofline the run landed"


def run_inputs(con: Connection, run_id: str, base_dir: Path) -> Inputs | None:
    """The run's server nodes (their CPUs as landed) and the figures of each measured one; None: no roofline."""
    servers = [row for row in reads.server_hardware(con, run_id) if row["role"] != "client"]
    figures = {}
    for row in servers:
        found = figures_from_roofline(row["node"], {**row, "method": f"landed by run {run_id}"})
        if found is not None:
            figures[row["node"]] = found
    if not figures:
        return None
    nodes = [(row["node"], list(row["cpus"] or [])) for row in servers]
    return Inputs(nodes, figures, NetworkFigures(), Efficiency(), os.cpu_count() or 1, base_dir, [])


def land_run_predictions(plan: Plan, base_dir: Path) -> Callable[[Connection, str], None]:
    """What `RunResults.derived` runs: the run's predictions, or nothing where no roofline was landed."""
    def derive(con: Connection, run_id: str) -> None:
        inputs = run_inputs(con, run_id, base_dir)
        if inputs is None:
            return
        measured = {row["cell_key"]: row for row in reads.report_cells(con, run_id) if row["status"] == "completed"}
        landing.land_predictions(con, run_id, cell_records(plan, inputs, measured, FIGURES_SOURCE))
    return derive
