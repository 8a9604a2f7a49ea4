"""Make the engine build, the model and the node tools present on every node, or refuse the node.

A build is made once, on the orchestrator, in the content-addressed cache; a node gets the
same tree at the same absolute path (a venv names its own path in its scripts), either
because the path is on a file system the campaign declares shared (`provider.shares`) or by
a copy, keyed by the tree's digest: a node that already holds a tree with that digest gets
nothing, a copy is verified by recomputing the digest on the node. Before anything is copied,
a node whose architecture is not the build's is refused; then the build's interpreter is given
to the node (`servebench.distribution.interpreter`: the build's own CPython placed beside the
venv, or the node's own), and a node where the engine's python still does not run (a wrong C
library) is refused, each with the node named. A client node (`load.client.node`) gets no engine
build: the load generator's own tree (`servebench.distribution.load_tree`) and the sampler's run
with the node's python3 (`Provider.node_python`), and the generator must import there.

Two ways to copy (`way`): `copies`, the orchestrator sends each tree to every node itself, four
at a time, so placement grows with the nodes; `relay`, every node that holds the verified tree
sends it on (`servebench.distribution.relay`), so it grows with log2 of the nodes; `sbcast`,
under Slurm, Slurm's own broadcast through its daemons (`SlurmProvider.broadcast_tree`). A node
a relay hop or a broadcast failed is named and the others still get their trees; the node is
refused at the end.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
import time
from pathlib import Path
from typing import Callable, Protocol, runtime_checkable

from pydantic import BaseModel

from servebench.distribution.interpreter import InterpreterMissing, NodeInterpreter, node_interpreter
from servebench.distribution.load_tree import IMPORT_CHECK
from servebench.distribution.relay import NODE_ERRORS, relay_tree
from servebench.paths import cache_dir
from servebench.platform.emulation import node_argv
from servebench.providers import Node, NodeFiles, Provider, node_tools
from servebench.providers.fanout import each_node, hosts_at_once

PLATFORM_SCRIPT = "import platform, sys; print(sys.platform + '-' + platform.machine())"
COPIES, RELAY, SBCAST = "copies", "relay", "sbcast"
PLACEMENT_WAYS = (COPIES, RELAY, SBCAST)
SAMPLER_FILES = ("servebench/__init__.py", "servebench/telemetry/__init__.py",
                 "servebench/telemetry/node_sampler.py", "servebench/telemetry/periodic.py")


@runtime_checkable
class Broadcasts(Protocol):
    """A provider with a broadcast of its own (Slurm: sbcast): its outcome names the nodes reached
    (`arrived`: node -> seconds) and those not (`failed`: node -> why)."""

    def broadcast_tree(self, nodes: list[Node], local: Path, remote: str, digest: str,
                       fanout: int | None = None) -> "BroadcastOutcome": ...


class BroadcastOutcome(Protocol):
    arrived: dict[str, float]
    failed: dict[str, str]


class NodeRefused(RuntimeError):
    """A node cannot serve this build: named, with the reason, before any server starts."""


class TreePlacement(BaseModel):
    node: str
    what: str               # engine | model | tools | interpreter | emulation-root | load-generator | python
    path: str
    how: str                # shared (same file system) | present (digest matched) | copied | runs (the python)
    digest: str | None
    seconds: float
    note: str | None = None  # for `python`: which interpreter the node runs the build with, and why; a copy
    # by relay: `relayed from <node>` (or the orchestrator); by Slurm's broadcast: `sbcast`
    bytes: int | None = None  # what a copy sent (the tree's files; links as links); None when nothing was copied


def tree_bytes(path: Path) -> int:
    """The bytes of a tree's files, symlinks not followed: what a copy of it sends."""
    return sum(p.lstat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink())


def local_digest(path: Path) -> str:
    """The tree's digest, computed once per immutable artifact and kept beside it."""
    kept = path.with_name(path.name + ".tree-sha256")
    if kept.exists() and kept.stat().st_mtime >= path.stat().st_mtime:
        return kept.read_text().strip()
    digest = node_tools.tree_digest(str(path))
    if digest is None:
        raise FileNotFoundError(f"{path} is not a directory")
    kept.write_text(digest + "\n")
    return digest


def node_tools_tree(cache: Path, project_dir: Path) -> Path:
    """The node sampler as a tree of its own (standard library only: it runs with the node's python3
    on a node that has no servebench), cached by its content."""
    digest = hashlib.sha256()
    for name in SAMPLER_FILES:
        digest.update(name.encode() + b"\0" + (project_dir / name).read_bytes())
    target = cache / "tools" / f"node-sampler-{digest.hexdigest()[:16]}"
    if not target.is_dir():
        scratch = target.with_name(target.name + ".tmp")
        shutil.rmtree(scratch, ignore_errors=True)
        for name in SAMPLER_FILES:
            (scratch / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(project_dir / name, scratch / name)
        scratch.rename(target)
    return target


def arch_problem(node: Node, inventory: dict, build_platform: str) -> str | None:
    """Why the node cannot run a build made for `build_platform` ('linux-x86_64'), or None."""
    wanted = build_platform.rsplit("-", 1)[-1]
    arch = inventory.get("arch")
    if arch and arch != wanted:
        return f"node {node.name} ({node.address}) is {arch}, the engine build is for {wanted}"
    return None


def place_tree(provider: NodeFiles, node: Node, what: str, path: Path, at: str | None = None) -> TreePlacement:
    """One tree on one node, at the same path (or at `at`): shared, already there, or copied and verified."""
    started = time.monotonic()
    remote = at or str(path)
    if provider.shares(remote):
        return TreePlacement(node=node.name, what=what, path=remote, how="shared", digest=None, seconds=0.0)
    digest = local_digest(path)
    how = "present"
    if provider.tree_digest(node, remote) != digest:
        provider.put_tree(node, path, remote)
        found = provider.tree_digest(node, remote)
        if found != digest:
            raise NodeRefused(f"node {node.name}: the copy of {path} at {remote} does not verify (sha256 {found} "
                              f"there, {digest} here)")
        how = "copied"
    return TreePlacement(node=node.name, what=what, path=remote, how=how, digest=digest,
                         seconds=round(time.monotonic() - started, 2),
                         bytes=tree_bytes(path) if how == "copied" else None)


def check_python_runs(provider: Provider, node: Node, python: str, build_platform: str) -> None:
    """The build's python starts on the node (under its emulation, on an emulated node) and reports
    the build's platform."""
    result = provider.run(node, node_argv(node, [python, "-c", PLATFORM_SCRIPT]), timeout=300)
    if result.returncode != 0:
        raise NodeRefused(f"node {node.name}: the engine build's python {python} does not run there (exit "
                          f"{result.returncode}): {(result.stderr or '').strip()[-500:]}")
    found = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    if found != build_platform:
        raise NodeRefused(f"node {node.name}: the engine build's python reports {found!r}, the build is for "
                          f"{build_platform!r}")


def interpreter_for(provider: Provider, node: Node, python: str, build_platform: str,
                    inventories: dict[str, dict]) -> NodeInterpreter:
    """How the node gets the build's interpreter (servebench/distribution/interpreter.py), or refused."""
    try:
        return node_interpreter(provider, node, python, build_platform, inventories.get(node.name, {}).get("arch"),
                                node.interpreter, cache_dir())
    except InterpreterMissing as exc:
        raise NodeRefused(str(exc)) from None


def place_on_nodes(provider: Provider, nodes: list[Node], inventories: dict[str, dict],
                   trees: dict[str, dict[str, Path]], python: str | None, build_platform: str,
                   log: Callable[[str], None] = print, way: str = COPIES) -> list[TreePlacement]:
    """Each node's trees (`trees[node name]`, what -> path) on it, arch refused first, the python
    checked last (a build without one, binaries only, is not); what was done where. Only nodes
    that get the engine tree are held to its architecture. `way`: COPIES, RELAY or SBCAST (the
    module's docstring); a node a relay or a broadcast could not reach is refused, named, after every
    other node is done."""
    if way not in PLACEMENT_WAYS:
        raise ValueError(f"placement way {way!r}: one of {', '.join(PLACEMENT_WAYS)}")
    if way == SBCAST and not isinstance(provider, Broadcasts):
        raise ValueError(f"placement way {SBCAST}: the {provider.kind} provider has no broadcast of its own")
    problems = [p for p in (arch_problem(n, inventories.get(n.name, {}), build_platform) for n in nodes
                            if "engine" in trees[n.name]) if p]
    if problems:
        raise NodeRefused("; ".join(problems))
    interpreters = {} if python is None else {
        node.name: interpreter_for(provider, node, python, build_platform, inventories)
        for node in nodes if "engine" in trees[node.name]}
    copies = {path for node_trees in trees.values() for path in node_trees.values() if not provider.shares(str(path))}
    copies |= {local for i in interpreters.values() for local, at in i.trees.values() if not provider.shares(at)}
    for path in copies:
        local_digest(path)  # once, before the nodes' threads need it
    relayed, unreached = relay_trees(provider, nodes, trees, log, way) if way != COPIES else ({}, {})

    def place(node: Node) -> list[TreePlacement]:
        done: list[TreePlacement] = []
        if node.name in unreached:
            return done
        for what, path in trees[node.name].items():
            placement = relayed.get((node.name, str(path))) or place_tree(provider, node, what, path)
            if placement.how == "copied":
                log(f"{what} copied to {node.name} in {placement.seconds:.1f} s ({path})")
            done.append(placement)
        interpreter = interpreters.get(node.name)
        if interpreter is not None:   # (a build with a python, on a node that runs the engine)
            assert python is not None
            for what, (local, at) in interpreter.trees.items():
                placement = place_tree(provider, node, what, local, at)
                if placement.how == "copied":
                    log(f"{what} copied to {node.name} in {placement.seconds:.1f} s ({at})")
                done.append(placement)
            check_python_runs(provider, node, python, build_platform)
            done.append(TreePlacement(node=node.name, what="python", path=python, how="runs", digest=None,
                                      seconds=0.0, note=interpreter.description))
        return done

    # copies overlap, `hosts_at_once` of them; a failure names its node once every other node is done
    placements = [placement for done in each_node(nodes, place, hosts_at_once(provider), name=lambda node: node.name)
                  for placement in done]
    if unreached:
        raise NodeRefused("; ".join(f"node {name}: {why}" for name, why in sorted(unreached.items()))
                          + f" (the {way} placed every tree on the other {len(nodes) - len(unreached)} node(s))")
    return placements


def relay_trees(provider: Provider, nodes: list[Node], trees: dict[str, dict[str, Path]],
                log: Callable[[str], None], way: str) -> tuple[dict[tuple[str, str], TreePlacement], dict[str, str]]:
    """Each tree more than one node needs, by relay or broadcast (`way`): (node, path) -> its placement;
    node -> why it did not get one (a node that failed one tree gets no other)."""
    placed: dict[tuple[str, str], TreePlacement] = {}
    unreached: dict[str, str] = {}
    by_path: dict[Path, list[Node]] = {}
    for node in nodes:
        for path in trees[node.name].values():
            if not provider.shares(str(path)):
                by_path.setdefault(path, []).append(node)
    for path, wanting in by_path.items():
        wanting = [node for node in wanting if node.name not in unreached]
        if len(wanting) < 2:
            continue  # one node: a plain copy (the per-node loop)
        what = {node.name: next(w for w, p in trees[node.name].items() if p == path) for node in wanting}
        digest = local_digest(path)

        def held_digest(node: Node) -> str | None:
            try:
                return provider.tree_digest(node, str(path))
            except NODE_ERRORS:
                return None  # not a holder: its hop then names what is wrong with it

        found = dict(zip([n.name for n in wanting], each_node(wanting, held_digest, hosts_at_once(provider))))
        holders = [node for node in wanting if found[node.name] == digest]
        for node in holders:
            placed[(node.name, str(path))] = TreePlacement(node=node.name, what=what[node.name], path=str(path),
                                                           how="present", digest=digest, seconds=0.0)
        targets = [n for n in wanting if n not in holders]
        if not targets:
            continue
        if way == SBCAST:
            assert isinstance(provider, Broadcasts)  # place_on_nodes refused any other provider
            sent = provider.broadcast_tree(targets, path, str(path), digest)
            arrived, failed = {name: (seconds, "sbcast") for name, seconds in sent.arrived.items()}, sent.failed
        else:
            result = relay_tree(provider, targets, path, str(path), digest, holders=holders, log=log)
            arrived = {name: (hop.seconds, f"relayed from {hop.source}") for name, hop in result.arrived.items()}
            failed = result.failed
        size = tree_bytes(path) if arrived else None
        for name, (seconds, note) in arrived.items():
            placed[(name, str(path))] = TreePlacement(node=name, what=what[name], path=str(path), how="copied",
                                                      digest=digest, seconds=round(seconds, 2), note=note, bytes=size)
        unreached |= {name: f"{what[name]} {path}: {why}" for name, why in failed.items()}
    return placed, unreached


def check_load_generator_runs(provider: Provider, node: Node, python: str, tree: Path) -> None:
    """The load generator's tree imports on the client node with the node's python, alone (-S)."""
    result = provider.run(node, ["env", f"PYTHONPATH={tree}", python, "-S", "-c", IMPORT_CHECK], timeout=120)
    if result.returncode != 0:
        raise NodeRefused(f"client node {node.name}: the load generator does not start there with {python} "
                          f"(exit {result.returncode}): {(result.stderr or '').strip()[-500:]}")


def project_dir() -> Path:
    """The checkout servebench runs from (where the sampler's source files are)."""
    init = sys.modules["servebench"].__file__
    assert init is not None  # a regular package (servebench/__init__.py), not a namespace one
    return Path(init).resolve().parent.parent
