"""The plan of a run: what a validated campaign expands to on this host, computed once.

The flow and `servebench plan` both consume a `Plan`: the cells in run order and where the
load generator runs. Pure: the host's CPUs are given (the provider reads them).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import groupby

from servebench.config.campaign import Campaign, ModeSpec
from servebench.config.sweep import Cell, expand
from servebench.planning.placement import ClientPlacement, client_placement


@dataclass(frozen=True)
class Plan:
    campaign: Campaign
    cells: list[Cell]
    client: ClientPlacement

    def modes(self) -> list[tuple[ModeSpec, list[Cell]]]:
        """Each mode with its cells, in campaign order (one server serves all of a mode's cells)."""
        return group_by_mode(self.cells)


def group_by_mode(cells: list[Cell]) -> list[tuple[ModeSpec, list[Cell]]]:
    """Cells (in run order) grouped by their mode: one server serves all of a group."""
    return [(group[0].mode, group) for group in (list(g) for _, g in groupby(cells, key=lambda c: c.mode.name))]


def make_plan(campaign: Campaign, host_cpus: set[int]) -> Plan:
    return Plan(campaign=campaign, cells=expand(campaign), client=client_placement(campaign, host_cpus))
