"""Fault stage: a campaign's faults for one cell, injected on their node while its load runs,
and landed in the `faults` table (`servebench/serving/faults.py` does the injecting)."""

from __future__ import annotations

from pathlib import Path

from servebench.warehouse import store
from servebench.spec.campaign import FaultSpec
from servebench.providers import Node, Provider
from servebench.serving.faults import FaultTimer, InjectedFault
from servebench.warehouse.store import session


def start_cell_faults(faults: list[FaultSpec], cell_key: str, default_node: Node, nodes: list[Node],
                      provider: Provider, progress: Path | None = None) -> list[FaultTimer]:
    """A timer per fault of this cell, started now (the cell's load starts next); `progress`: the
    load generator's progress file, for faults injected after N requests (None: it runs elsewhere)."""
    by_name = {node.name: node for node in nodes}
    return [FaultTimer(provider, by_name.get(fault.node, default_node) if fault.node else default_node, fault,
                       progress).start()
            for fault in faults if fault.cell == cell_key]


def land_faults(path: str, run_id: str, cell_key: str, mode: str, injected: list[InjectedFault]) -> None:
    with session(path) as con:
        store.land_faults(con, run_id, cell_key, mode, injected)
