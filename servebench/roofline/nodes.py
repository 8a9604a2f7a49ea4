"""Each server node's roofline measured once its engine build is placed there (docs/roofline.md): the
micro-benchmark of `servebench/roofline/benchmark.py` run through `Provider.run` by the build's python
(the node's python3 for a build of binaries only), under qemu-user on an emulated node, pinned to the
node's CPUs; cached per (hostname, CPU model, CPUs, build key) with when it was measured and how busy
others kept the cores then, and measured again once older than the campaign's `roofline.max_age_days`
or at once when it was measured on cores busier than `roofline.max_busy`. A failure is a note, never
the run's."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from servebench.builds.venv import EngineBuild
from servebench.config.campaign import RooflineSpec
from servebench.distribution.distribute import arch_problem
from servebench.paths import cache_dir
from servebench.platform.emulation import node_argv
from servebench.providers import Node, Provider
from servebench.roofline import benchmark as roofline

TIMEOUT_S = 120.0   # torch's import and the matmuls take seconds natively; minutes under qemu at most
DAY_S = 86400.0


@dataclass(frozen=True)
class CacheLimits:
    """When cached figures are measured again (the campaign's `roofline:` block): older than
    `max_age_days`, or measured while others kept the cores busier than `max_busy`."""

    max_age_days: float = 7.0
    max_busy: float = 0.25


DEFAULT_LIMITS = CacheLimits()


def cache_limits(spec: RooflineSpec | None) -> CacheLimits:
    """The campaign's `roofline:` block as the cache's limits (None: the defaults, the block's own)."""
    return DEFAULT_LIMITS if spec is None else CacheLimits(max_age_days=spec.max_age_days, max_busy=spec.max_busy)


def measure_node(provider: Provider, node: Node, inventory: dict, build: EngineBuild,
                 limits: CacheLimits = DEFAULT_LIMITS) -> dict:
    """The node's figures (`roofline.parse`'s dict, with `emulated`, `method`, `measured_at` [unix s],
    `busy_before`, `cached`), from the cache when this node and build were measured before and the
    figures are neither too old nor taken on busy cores (then `remeasured` says why they were not used)."""
    emulated = node.emulate is not None
    key = roofline.cache_key(str(inventory.get("hostname") or node.address), str(inventory.get("cpu_model") or "?"),
                             node.cpus, build.key, emulated)
    kept = roofline.cached(cache_dir(), key)
    why = None if kept is None else roofline.stale(kept, time.time(), limits.max_age_days * DAY_S, limits.max_busy)
    if kept is not None and why is None:
        return {**kept, "cached": True}
    if build.python_version:
        python = build.python
    elif emulated:
        raise RuntimeError("the build has no python of the emulated architecture to measure with")
    else:
        python = provider.node_python(node)
    started = time.monotonic()
    argv = [python, "-c", roofline.PROGRAM, roofline.program_args(node.cpus, emulated)]
    result = provider.run(node, node_argv(node, argv), timeout=TIMEOUT_S)
    if result.returncode != 0:
        raise RuntimeError(f"exit {result.returncode}: {(result.stderr or '').strip()[-300:]}")
    figures = roofline.parse(result.stdout)
    figures.update(emulated=emulated, method=roofline.method(figures), seconds=round(time.monotonic() - started, 1),
                   measured_at=round(time.time(), 3))
    roofline.keep(cache_dir(), key, figures)
    return {**figures, "cached": False} | ({"remeasured": why} if why else {})


def measure_nodes(provider: Provider, nodes: list[Node], inventories: dict[str, dict], build: EngineBuild,
                  log: Callable[[str], None] = print, limits: CacheLimits = DEFAULT_LIMITS) -> dict[str, dict]:
    """{node name: figures} for each node the build runs on; a node that could not be measured is
    said and left out (its columns stay NULL)."""
    found: dict[str, dict] = {}
    for node in nodes:
        inventory = inventories.get(node.name, {})
        if arch_problem(node, inventory, build.platform):
            continue
        try:
            figures = measure_node(provider, node, inventory, build, limits)
        except Exception as exc:  # the roofline is context, never a reason to stop the run
            log(f"node {node.name}: roofline not measured: {str(exc).splitlines()[0] if str(exc) else exc!r}")
            continue
        found[node.name] = figures
        how = "cached" if figures.get("cached") else f"measured in {figures.get('seconds')} s"
        how += f", again: the cached figures were {figures['remeasured']}" if figures.get("remeasured") else ""
        busy = figures.get("busy_before")
        how += f"; others kept its cores {busy:.0%} busy" if busy is not None and busy > limits.max_busy else ""
        log(f"node {node.name} roofline ({how}{', emulated' if figures.get('emulated') else ''}): "
            f"{roofline_summary(figures)}")
    return found


def roofline_summary(figures: dict) -> str:
    """The figures a node has, and the program's notes for those it has not: a build of binaries only is
    measured by the node's python3, which may have neither torch nor numpy to time matrix products with."""
    parts = [f"{figures['mem_bandwidth_gbps']} GB/s"] if figures.get("mem_bandwidth_gbps") is not None else []
    peaks = (("bf16", "matmul_peak_gflops_bf16"), ("fp32", "matmul_peak_gflops_fp32"))
    parts += [f"{dtype} {figures[key]} GFLOP/s" for dtype, key in peaks if figures.get(key) is not None]
    if figures.get("matmul_peak_gflops_fp32") is None:
        parts += figures.get("notes") or []
    if roofline.bf16_has_kernels(figures) is False and not figures.get("emulated"):
        ratio = figures["matmul_peak_gflops_fp32"] / figures["matmul_peak_gflops_bf16"]
        parts.append(f"no bf16 kernels on this CPU (bf16 {ratio:.0f}x slower than fp32: a bf16 model measures that)")
    return ", ".join(parts)
