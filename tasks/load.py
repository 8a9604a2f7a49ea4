"""Load stage: one cell's load, by the load generator in a process of its own
(`servebench.serving.cell_load`)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.load.config import LoadConfig
from servebench.serving import cell_load
from servebench.serving.deployment import ClientNode


@task(name="load", cache_policy=NONE)
def run_cell_load(config: LoadConfig, output: str, client: ClientNode | None = None, mark: str | None = None) -> dict:
    """The cell's result; raises with the generator's own words if it produced none."""
    return cell_load.run_cell_load(config, output, client, mark)
