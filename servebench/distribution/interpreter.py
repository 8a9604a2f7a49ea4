"""Where a node's engine python comes from: the interpreter goes where the venv goes.

A venv names its base interpreter by path (`pyvenv.cfg`'s `home`, `bin/python` a link to it). For
a build of this host's architecture that is this host's CPython, which a node has when the
campaign says so (a shared file system, or a testbed host given the same software prefix). A
build for another architecture (an aarch64 venv made on an x86 login node) links a CPython of a
Debian userland unpacked by servebench (`servebench/platform/sysroot.py`), which no node has. Two
ways to give a node one, chosen by the provider block's `interpreter:`:

- `placed` (the default): the build's own CPython, i.e. that userland, placed at the same path by
  its digest like the venv (about 65 MB, once per node and userland). The program runs with the
  userland's loader and libraries: under qemu-user the node root makes them the program's view
  (`servebench/platform/emulation.py`; that root is placed as well); on real hardware the kernel
  starts the interpreter with the node's own loader, so a node whose C library is older than
  the userland's (glibc 2.36, Debian 12) refuses it at the check, by name.
- `node`: the node's own `python3.<minor>` of the build's minor version (found on the node's
  PATH, run there and asked its platform): the venv's link is pointed at it by a tree of one
  symlink placed at the userland's path (Python finds its standard library from the link's
  target, so the node's CPython runs the venv's packages). Nothing large is copied; a node
  without such a python is refused before serving, naming node, architecture and what is missing.

A build of the wheels way (`servebench/builds/target_venv.py`: wheels chosen by pip for the target's
platform, no dpkg on this host) has no CPython of its own: its venv names
`<cache>/node-pythons/<arch>-python3.X/usr/bin/python3.X`, and every node, whatever `interpreter:`
says, gets its own python3.X linked there as `node` does (on a shared file system, one link for all:
the nodes must find the same path), so the venv runs on the node's CPython, offline.

What was chosen, and why, lands in the node's `nodes.interpreter` column.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from servebench.builds.target_venv import NODE_PYTHONS, WAY_VARIABLE
from servebench.platform.emulation import node_argv, node_root, userland_of
from servebench.platform.targets import profile
from servebench.providers import Node, Provider

InterpreterPolicy = Literal["placed", "node"]
LINKS = "interpreter-links"
PROBE = ("import platform, sys; print(sys.platform + '-' + platform.machine()); print(sys.version.split()[0]); "
         "print(sys.executable)")
PLACED_INSTEAD = "interpreter: placed copies the build's own"
WHEELS_INSTEAD = (f"the build has no CPython of its own (its wheels were chosen by pip): give the node one on its "
                  f"PATH, or build the Debian sysroot way ({WAY_VARIABLE}=sysroot, which an emulated node needs)")


class InterpreterMissing(RuntimeError):
    """The node has no interpreter the build can run with, under the campaign's choice."""


@dataclass(frozen=True)
class NodeInterpreter:
    """What a node's engine python is: the trees that give it (what -> (local tree, path on the node))
    and a sentence for the node's row."""

    trees: dict[str, tuple[Path, str]]
    description: str


def python_minor(python: str) -> str | None:
    """`3.11` for a venv whose base interpreter is `.../python3.11`, read from the link's name."""
    name = Path(python).resolve().name
    return name.removeprefix("python") if name.startswith("python3.") else None


def describe_node(node: Node, arch: str | None) -> str:
    emulated = f", emulated {node.emulate}" if node.emulate else ""
    return f"node {node.name} ({arch or 'architecture unknown'}{emulated})"


def build_userland(python: str, cache: Path) -> Path | None:
    """The servebench userland the build's interpreter belongs to, or None (this host's own CPython)."""
    return userland_of(Path(python), cache)


def placed_interpreter(node: Node, userland: Path, cache: Path) -> NodeInterpreter:
    """The build's own CPython: its userland, and on an emulated node the node root over it."""
    trees = {"interpreter": (userland, str(userland))}
    if node.emulate:
        root = node_root(profile(node.emulate), userland, cache)
        trees["emulation-root"] = (root, str(root))
    version = (userland / "usr" / "bin").glob("python3.*")
    name = next((p.name for p in sorted(version) if p.name[len("python3."):].isdigit()), "python3")
    return NodeInterpreter(trees, f"placed: the build's own {name} (Debian userland {userland.name}, by digest)")


def link_tree(cache: Path, userland: Path, python: str, node_python: str) -> Path:
    """A local tree of one symlink, `usr/bin/<python's name>` -> the node's python, cached by both."""
    name = Path(python).resolve().name
    key = hashlib.sha256(f"{userland}\0{name}\0{node_python}".encode()).hexdigest()[:16]
    tree = cache / LINKS / f"{userland.name}-{key}"
    if not tree.is_dir():
        partial = tree.with_name(tree.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        (partial / "usr" / "bin").mkdir(parents=True)
        (partial / "usr" / "bin" / name).symlink_to(node_python)
        partial.rename(tree)
    return tree


def node_python_home(python: str, cache: Path) -> Path | None:
    """The wheels way's `<cache>/node-pythons/<arch>-python3.X` that the build's python links to, or None.
    Read from the link itself, not its resolution: on a shared file system that path is a link to the
    nodes' python."""
    link = Path(python)
    target = Path(os.readlink(link)) if link.is_symlink() else link
    for root in {cache / NODE_PYTHONS, (cache / NODE_PYTHONS).resolve()}:
        if target.is_relative_to(root) and target != root:
            return root / target.relative_to(root).parts[0]
    return None


def find_node_python(provider: Provider, node: Node, minor: str, build_platform: str, arch: str | None,
                     instead: str = PLACED_INSTEAD) -> str:
    """The node's `python3.<minor>`: on its PATH, and running as the build's platform there (under the
    node's emulation on an emulated node); else InterpreterMissing naming what is missing and `instead`,
    the other way."""
    wanted = f"python{minor}"
    found = provider.run(node, ["sh", "-c", f"command -v {wanted}"], timeout=60)
    path = found.stdout.strip().splitlines()[-1] if found.returncode == 0 and found.stdout.strip() else ""
    if not path:
        raise InterpreterMissing(f"{describe_node(node, arch)}: interpreter: node, but it has no {wanted} on its "
                                 f"PATH, and the build ({build_platform}, CPython {minor}) needs one; {instead}")
    result = provider.run(node, node_argv(node, [path, "-c", PROBE]), timeout=300)
    lines = result.stdout.strip().splitlines() if result.returncode == 0 else []
    reported = lines[:1]
    if reported != [build_platform]:
        why = (f"reports {reported[0]!r}" if reported else
               f"does not run there (exit {result.returncode}: {(result.stderr or '').strip()[-300:]})")
        raise InterpreterMissing(f"{describe_node(node, arch)}: interpreter: node, but its {wanted} ({path}) {why}; "
                                 f"the build is for {build_platform}; {instead}")
    # the interpreter itself: a wrapper script on PATH (pyenv's shims, a site's) would not run the venv
    return lines[2] if len(lines) > 2 and lines[2].startswith("/") else path


def shared_link(home: Path, name: str, node_python: str) -> None:
    """`home/usr/bin/<name>` -> the nodes' python, made here on the file system the nodes share; a node
    whose python is elsewhere cannot be given its own: refused, naming both."""
    link = home / "usr" / "bin" / name
    if link.is_symlink():
        if os.readlink(link) == node_python:
            return
        raise InterpreterMissing(f"{home} is shared with the nodes and links {os.readlink(link)}, but this node's "
                                 f"{name} is {node_python}: nodes that share it need their python at one path")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(node_python)


def wheels_interpreter(provider: Provider, node: Node, python: str, home: Path, build_platform: str,
                       arch: str | None, cache: Path) -> NodeInterpreter:
    """A build of the wheels way: the node's own python3.X linked at the path its venv names."""
    minor = python_minor(python)
    if minor is None:
        raise InterpreterMissing(f"{describe_node(node, arch)}: the build's python {python} names no python3.X")
    found = find_node_python(provider, node, minor, build_platform, arch, WHEELS_INSTEAD)
    why = "the build's wheels were chosen by pip for the platform, it has no CPython of its own"
    if provider.shares(str(home)):
        shared_link(home, f"python{minor}", found)
        return NodeInterpreter({}, f"node: its own {found} (python{minor}, linked at the shared {home}: {why})")
    tree = link_tree(cache, home, python, found)
    return NodeInterpreter({"interpreter": (tree, str(home))},
                           f"node: its own {found} (python{minor}, linked at {home}: {why})")


def node_interpreter(provider: Provider, node: Node, python: str, build_platform: str, arch: str | None,
                     policy: InterpreterPolicy, cache: Path) -> NodeInterpreter:
    """How the node gets the build's interpreter. A build of this host's own CPython places nothing
    (the node's file system has that path, or the python check refuses the node); one of the wheels way
    takes the node's own whatever the policy (nothing to place)."""
    home = node_python_home(python, cache)
    if home is not None:
        return wheels_interpreter(provider, node, python, home, build_platform, arch, cache)
    userland = build_userland(python, cache)
    if userland is None:
        return NodeInterpreter({}, f"the build's python {Path(python).resolve()} (the node's file system has it)")
    if provider.shares(str(userland)):
        return NodeInterpreter({}, f"shared: the build's own CPython (Debian userland {userland.name}, shared path)")
    if policy == "placed":
        return placed_interpreter(node, userland, cache)
    minor = python_minor(python)
    if minor is None:
        raise InterpreterMissing(f"{describe_node(node, arch)}: the build's python {python} names no python3.X")
    found = find_node_python(provider, node, minor, build_platform, arch)
    tree = link_tree(cache, userland, python, found)
    return NodeInterpreter({"interpreter": (tree, str(userland))},
                           f"node: its own {found} (python{minor}, linked in place of the build's)")
