"""Roofline stage: each server node's memory bandwidth and peak matmul rate, measured once the engine
build is placed there (`servebench.roofline.nodes`), and landed on its `nodes` row."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.builds.venv import EngineBuild
from servebench.config.campaign import RooflineSpec
from servebench.progress import reporter
from servebench.providers import Node, Provider
from servebench.roofline.nodes import cache_limits, measure_nodes
from servebench.warehouse.sink import RunResults


@task(name="measure-roofline", cache_policy=NONE)
def measure_roofline(provider: Provider, nodes: list[Node], inventories: dict[str, dict],
                     build: EngineBuild, limits: RooflineSpec | None = None) -> dict[str, dict]:
    """`limits`: the campaign's `roofline:` block, how old and how busy a cached measurement may be."""
    return measure_nodes(provider, nodes, inventories, build, log=reporter().note, limits=cache_limits(limits))


@task(name="land-roofline", cache_policy=NONE)
def land_roofline(results: RunResults, figures: dict[str, dict]) -> None:
    results.roofline(figures)
