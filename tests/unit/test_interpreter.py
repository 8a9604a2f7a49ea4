"""Where a node's engine python comes from (servebench/distribution/interpreter.py): the build's own
CPython placed beside the venv, or the node's own python3.X linked in its place, or refused naming
node, architecture and what is missing. The remote path under emulation: tests/unit/test_arm_partition.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from servebench.distribution.interpreter import (
    InterpreterMissing,
    link_tree,
    node_interpreter,
    python_minor,
)
from servebench.providers import Node
from servebench.providers.local import LocalProvider
from servebench.providers.local.spec import LocalProviderSpec

MINOR = f"{sys.version_info.major}.{sys.version_info.minor}"


class Remote(LocalProvider):
    """This host standing for another one that shares nothing (the commands run here, for real)."""

    def __init__(self):
        super().__init__(LocalProviderSpec(nodes=[{"name": "n1", "cpus": [0]}]))

    def shares(self, path: str) -> bool:
        return False


def venv_of_a_userland(cache: Path) -> tuple[Path, str]:
    """An aarch64-style build: a venv whose python links into a servebench userland of the cache."""
    userland = cache / "sysroots" / "debian-arm64-0123456789abcdef"
    (userland / "usr" / "bin").mkdir(parents=True)
    (userland / "usr" / "bin" / f"python{MINOR}").write_text("")
    venv = cache / "engines" / "vllm-aarch64-x"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(userland / "usr" / "bin" / f"python{MINOR}")
    (venv / "pyvenv.cfg").write_text(f"home = {userland / 'usr' / 'bin'}\ninclude-system-site-packages = false\n")
    return userland, str(venv / "bin" / "python")


def test_the_minor_version_is_read_from_the_base_interpreters_name(tmp_path):
    _, python = venv_of_a_userland(tmp_path)
    assert python_minor(python) == MINOR
    assert python_minor(sys.executable) in (MINOR, None)   # pyenv's python3.11, or a bare `python`


def test_a_build_of_this_hosts_own_cpython_places_no_interpreter(tmp_path):
    node = Node(name="n1", address="127.0.0.1", cpus=[0])
    chosen = node_interpreter(Remote(), node, sys.executable, "linux-x86_64", "x86_64", "placed", tmp_path)
    assert chosen.trees == {} and "the node's file system has it" in chosen.description


def test_placed_copies_the_builds_own_userland_to_the_same_path(tmp_path):
    userland, python = venv_of_a_userland(tmp_path)
    node = Node(name="n1", address="10.0.0.1", cpus=[0])   # a real aarch64 node: no emulation root
    chosen = node_interpreter(Remote(), node, python, "linux-aarch64", "aarch64", "placed", tmp_path)
    assert chosen.trees == {"interpreter": (userland, str(userland))}
    assert chosen.description == (f"placed: the build's own python{MINOR} (Debian userland "
                                  "debian-arm64-0123456789abcdef, by digest)")


def test_node_refuses_a_node_whose_python_is_of_another_platform_naming_node_arch_and_what(tmp_path):
    """This host's python3.X runs, but reports linux-x86_64 where the build is for aarch64."""
    _, python = venv_of_a_userland(tmp_path)
    node = Node(name="n1", address="10.0.0.1", cpus=[0], interpreter="node")
    if subprocess.run(["sh", "-c", f"command -v python{MINOR}"], capture_output=True).returncode != 0:
        pytest.fail(f"python{MINOR} is not on PATH here, though this test runs under it")
    with pytest.raises(InterpreterMissing) as refused:
        node_interpreter(Remote(), node, python, "linux-aarch64", "aarch64", "node", tmp_path)
    message = str(refused.value)
    assert message.startswith(f"node n1 (aarch64): interpreter: node, but its python{MINOR} (")
    assert "reports 'linux-x86_64'; the build is for linux-aarch64" in message, message


def test_node_refuses_a_node_without_the_minor_version_on_its_path(tmp_path):
    userland = tmp_path / "sysroots" / "debian-arm64-x"
    (userland / "usr" / "bin").mkdir(parents=True)
    (userland / "usr" / "bin" / "python3.99").write_text("")
    venv = tmp_path / "engines" / "v" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(userland / "usr" / "bin" / "python3.99")
    node = Node(name="n1", address="10.0.0.1", cpus=[0], emulate="graviton3", interpreter="node")
    with pytest.raises(InterpreterMissing, match=r"^node n1 \(aarch64, emulated graviton3\): interpreter: node, "
                       r"but it has no python3\.99 on its PATH, and the build \(linux-aarch64, CPython 3\.99\)"):
        node_interpreter(Remote(), node, str(venv / "python"), "linux-aarch64", "aarch64", "node", tmp_path)


def test_the_nodes_python_linked_in_place_of_the_builds_runs_the_venvs_packages(tmp_path):
    """What `node` places at the userland's path is one link; the venv then runs on the node's
    CPython with its own site-packages (Python finds its standard library from the link's target)."""
    userland, python = venv_of_a_userland(tmp_path / "orchestrator")
    tree = link_tree(tmp_path / "orchestrator", userland, python, sys.executable)
    assert [str(p.relative_to(tree)) for p in sorted(tree.rglob("*"))] == ["usr", "usr/bin", f"usr/bin/python{MINOR}"]
    # the node: the venv at its path, the link tree where the userland was
    (userland / "usr" / "bin" / f"python{MINOR}").unlink()
    (userland / "usr" / "bin" / f"python{MINOR}").symlink_to((tree / "usr" / "bin" / f"python{MINOR}").readlink())
    site = Path(python).parent.parent / "lib" / f"python{MINOR}" / "site-packages"
    site.mkdir(parents=True)
    (site / "only_in_the_venv.py").write_text("WHERE = 'venv'\n")
    done = subprocess.run([python, "-c", "import sys, only_in_the_venv, json; print(only_in_the_venv.WHERE, "
                           "sys.prefix != sys.base_prefix, json.__name__)"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["venv", "True", "json"]
