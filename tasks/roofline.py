"""Roofline stage: each server node's memory bandwidth and peak matmul rate, measured once the engine
build is placed there (`servebench.roofline.nodes`), and landed on its `nodes` row; and what one of the
engine's server processes holds there before any model (`servebench.planning.runtime_probe`), kept for the
next plan's memory check."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NONE

from servebench.builds.venv import EngineBuild
from servebench.config.campaign import RooflineSpec
from servebench.planning import runtime_probe
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


@task(name="measure-server-runtime", cache_policy=NONE)
def measure_server_runtime(provider: Provider, nodes: list[Node], inventories: dict[str, dict], build: EngineBuild,
                           modules: tuple[str, ...]) -> dict[str, dict]:
    """`modules`: what one of the engine's server processes imports (`Engine.runtime_modules`; none: nothing)."""
    return runtime_probe.measure_nodes(provider, nodes, inventories, build, modules, log=reporter().note)
