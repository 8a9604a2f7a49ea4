"""Before a mode's server starts: can its build run on the mode's nodes at all?

A build for another architecture, or one that needs CPU features a node lacks (a Graviton3 build
on a Graviton2), would start and die with SIGILL at its first vector instruction, or worse, only
on some requests. The preflight measures each node's CPU (its /proc/cpuinfo; an emulated node's
qemu CPU model, by the hwcap probe) and refuses naming what is missing.
"""

from __future__ import annotations

from pathlib import Path

from servebench.platform.cpu_features import build_refusal, cpuinfo_features, emulated_features
from servebench.platform.targets import profile
from servebench.providers.base import Node, Provider
from servebench.serving.server import ServerFailed


class ServerRefused(ServerFailed):
    """The mode's build cannot run on its nodes: nothing was started."""


def node_cpu(provider: Provider, node: Node, cache: Path) -> tuple[str, set[str], str]:
    """(architecture, feature names, a description of the CPU) of the node as its processes see it."""
    if node.emulate is not None:
        target = profile(node.emulate)
        return target.arch, emulated_features(target, cache), f"emulated {target.name}, qemu -cpu {target.emulator_cpu}"
    done = provider.run(node, ["sh", "-c", "uname -m; cat /proc/cpuinfo"], timeout=60)
    arch, _, cpuinfo = done.stdout.partition("\n")
    model = next((line.partition(":")[2].strip() for line in cpuinfo.splitlines()
                  if line.split(":")[0].strip() in ("model name", "CPU part")), "unknown CPU")
    return arch.strip(), cpuinfo_features(cpuinfo), model


def check_build_fits(build_inputs: dict, nodes: list[Node], provider: Provider, cache: Path) -> None:
    """Raise ServerRefused when the build cannot run on one of the nodes (the first such, by name).
    A build for this host's kind (no target) on real nodes was checked at placement already (their
    inventory's architecture): nothing more is asked of the nodes then."""
    if not build_inputs.get("features") and "arch" not in build_inputs and all(n.emulate is None for n in nodes):
        return
    for node in nodes:
        arch, features, cpu = node_cpu(provider, node, cache)
        if (refusal := build_refusal(build_inputs, node.name, arch, features, cpu)) is not None:
            raise ServerRefused(refusal)
