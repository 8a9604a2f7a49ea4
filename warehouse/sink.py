"""Where a run's results go: `RunResults`, the one place the orchestration, its Prefect tasks and the
bisect hand what they measured and decided to the warehouse, and read back what a run landed.

One method per kind of result (the run's row, its nodes, builds, placements and rooflines, a server,
its samples, a cell with its attempts, a cell's faults, a capacity search, the tuner's verdict, a
bisect step), each a plain call that opens one connection (`store.session`), lands through
`landing` or `store` in their transactions (a cell's row, its requests and its attempts in one) and
closes it: a measured cell lands even when Prefect's API falters or a Ctrl-C unwinds, and `servebench
query` reads the warehouse between two landings. The reads are what a run needs of its own rows (a resume,
a search that goes on, a bisect step's numbers).

It sits in the warehouse's layer, below serving, analysis and campaign: it takes the records of
`landing` and the fields `store` reads of their results (its Protocols), never their types; what
analysis derives from the landed rows it runs through its own connection (`derived`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from servebench.builds.venv import EngineBuild
from servebench.config.node import Node

from . import connect, landing, store
from .landing import CellAttempt, CellRecord, Connection, RunRecord, RunUpdate, ServerRecord
from .stage_timings import StageTiming, land_stage_timings

if TYPE_CHECKING:
    from servebench.config.campaign import ModeSpec

T = TypeVar("T")


@dataclass(frozen=True)
class RunResults:
    """The results of one run (`run_id`) in one warehouse file: a value, so every stage may hold it."""

    warehouse: str
    run_id: str

    # the run

    def started(self, run: RunRecord) -> None:
        with store.session(self.warehouse) as con:
            landing.insert_run(con, self.run_id, run)

    def updated(self, update: RunUpdate) -> None:
        with store.session(self.warehouse) as con:
            landing.update_run(con, self.run_id, update)

    def ended(self, status: str, error: str | None, allocation: str | None) -> None:
        """The run's outcome and what its provider held, whatever happened."""
        self.updated(RunUpdate(status=status, error=error, ended_at=landing.now(), allocation=allocation))

    def resumed(self, note: dict[str, Any]) -> None:
        """What a resume found and will do, appended to the run's notes; the run is running again."""
        with store.session(self.warehouse) as con:
            landing.note_resume(con, self.run_id, note)

    # its deployment

    def nodes(self, nodes: list[Node], inventories: dict[str, dict[str, Any]],
              clock_offsets: dict[str, float | None] | None = None, client_node: str | None = None) -> None:
        with store.session(self.warehouse) as con:
            landing.land_nodes(con, self.run_id, nodes, inventories, clock_offsets, client_node)

    def build(self, build: EngineBuild) -> None:
        """A build the run uses, recorded once and named as the run's."""
        with store.session(self.warehouse) as con:
            landing.land_run_build(con, self.run_id, build)

    def placements(self, placements: list[dict[str, Any]]) -> None:
        with store.session(self.warehouse) as con:
            landing.land_placements(con, self.run_id, placements)

    def stage_timings(self, timings: Sequence[StageTiming]) -> None:
        """Each stage's wall time, hosts and the orchestrator's own cost, in one transaction."""
        with store.session(self.warehouse) as con:
            land_stage_timings(con, self.run_id, list(timings))

    def roofline(self, figures: dict[str, dict[str, Any]]) -> None:
        with store.session(self.warehouse) as con:
            landing.land_roofline(con, self.run_id, figures)

    # servers and cells

    def server(self, server: ServerRecord) -> None:
        with store.session(self.warehouse) as con:
            landing.land_server(con, self.run_id, server)

    def samples(self, mode: str, node_files: list[Path], server_files: list[Path]) -> tuple[int, int]:
        """A mode's telemetry, in place of its earlier rows: how many node and server samples it has."""
        with store.session(self.warehouse) as con:
            return landing.land_samples(con, self.run_id, mode, node_files, server_files)

    def cell(self, cell: CellRecord, attempts: Sequence[CellAttempt] = ()) -> str:
        """The cell's row, its requests and its attempts (every measurement of it, the last included), in
        place of an earlier landing of it and in one transaction; its cell_id."""
        with store.session(self.warehouse) as con:
            return landing.land_cell(con, self.run_id, cell, attempts)

    def faults(self, cell_key: str, mode: str, injected: list[store.InjectedFault]) -> None:
        with store.session(self.warehouse) as con:
            store.land_faults(con, self.run_id, cell_key, mode, injected)

    # searches, the tuner, a bisect

    def capacity(self, mode: ModeSpec, over: str, slo: dict[str, float], result: store.CapacityResult,
                 probe_cells: list[str]) -> None:
        with store.session(self.warehouse) as con:
            store.land_capacity(con, self.run_id, mode, over, slo, result, probe_cells)

    def tuning(self, over: str, slo: dict[str, float], verdict: store.TuneVerdict, configurations: int) -> None:
        with store.session(self.warehouse) as con:
            store.land_tuning(con, self.run_id, over, slo, verdict, configurations)

    def bisect_step(self, step: dict[str, Any]) -> None:
        """A bisect step that measured this run: its commit, repeats and verdict."""
        with store.session(self.warehouse) as con:
            store.land_bisect_step(con, {**step, "run_id": self.run_id})

    def derived(self, derive: Callable[[Connection, str], object]) -> None:
        """What analysis derives from the run's landed rows and lands beside them (the repeats'
        intervals): `derive(connection, run_id)`, in one connection."""
        with store.session(self.warehouse) as con:
            derive(con, self.run_id)

    # what the run landed

    def cell_statuses(self) -> dict[str, str]:
        with store.session(self.warehouse) as con:
            return landing.cell_statuses(con, self.run_id)

    def invalid_cells(self) -> dict[str, list[str]]:
        with store.session(self.warehouse) as con:
            return landing.invalid_cells(con, self.run_id)

    def landed_cell(self, cell_key: str) -> dict[str, Any]:
        with store.session(self.warehouse) as con:
            return store.landed_cell(con, self.run_id, cell_key)

    def capacities(self) -> list[tuple[str, float | None]]:
        with store.session(self.warehouse) as con:
            return store.capacities(con, self.run_id)

    def capacity_configurations(self) -> list[dict[str, Any]]:
        with store.session(self.warehouse) as con:
            return landing.capacity_configurations(con, self.run_id)

    def finished_modes(self) -> set[str]:
        with store.session(self.warehouse) as con:
            return store.finished_modes(con, self.run_id)

    def completed_metric(self, mode: str, metric: str) -> list[float]:
        with self._reading() as con:
            return store.completed_metric(con, self.run_id, mode, metric)

    def build_key(self) -> str | None:
        with self._reading() as con:
            return store.run_build_key(con, self.run_id)

    def read(self, read: Callable[[Connection, str], T]) -> T:
        """A read of the landed run for its report: `read(connection, run_id)`, read-only."""
        with self._reading() as con:
            return read(con, self.run_id)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[Connection]:
        with contextlib.closing(connect(self.warehouse, read_only=True)) as con:
            yield con


def now() -> datetime:
    """The clock results are stamped with (UTC)."""
    return landing.now()
