"""Roofline stage: each server node's memory bandwidth and peak matmul rate, measured once the engine
build is placed there (`servebench.roofline.nodes`), and landed on its `nodes` row."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.builds.venv import EngineBuild
from servebench.progress import reporter
from servebench.providers import Node, Provider
from servebench.roofline.nodes import measure_nodes
from servebench.warehouse.sink import RunResults


@task(name="measure-roofline", cache_policy=NONE)
def measure_roofline(provider: Provider, nodes: list[Node], inventories: dict[str, dict],
                     build: EngineBuild) -> dict[str, dict]:
    return measure_nodes(provider, nodes, inventories, build, log=reporter().note)


@task(name="land-roofline", cache_policy=NONE)
def land_roofline(results: RunResults, figures: dict[str, dict]) -> None:
    results.roofline(figures)
