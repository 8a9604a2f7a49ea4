"""A venv for another architecture, made on this host: an x86 orchestrator builds the aarch64
engine its ARM nodes serve (docs/builds.md, "Builds for a node's architecture").

Three things differ from a venv for this host (venv.py):
- **The python** is a CPython of the target architecture, by one of two ways (`choose_way`):
  - `sysroot`: Debian's, unpacked from its .debs into a sysroot cached by key (sysroot.py). The
    venv is the usual layout (`pyvenv.cfg` whose `home` is the sysroot's `usr/bin`, `bin/python` a
    link to its interpreter, `lib/python3.X/site-packages`), so the target's python finds it as any
    venv; on this host it runs only under qemu-user. It needs dpkg to know the architecture (adding
    it takes root), apt and qemu-user: the way for emulated nodes, which have no python of their own.
  - `wheels`: none here. The venv names a path, `<cache>/node-pythons/<arch>-python3.X/usr/bin/python3.X`,
    at which each node gets its own python3.X linked (servebench/distribution/interpreter.py), and the
    node's CPython runs the venv; nothing of the target's runs on this host, so no dpkg, root or
    qemu. The venv's post-install steps (pure Python: the `vllm` metadata alias) run with this
    host's CPython of the same minor version on the venv, before it is pointed at the node's path.
  Without a choice (`SERVEBENCH_TARGET_VENV=sysroot|wheels`), `sysroot` where dpkg knows the
  architecture, else `wheels`; a way whose needs this host does not meet is refused in one line
  naming what is missing and the other way (`refusal`), before anything is built.
- **The wheels** are resolved by this host's pip for the target's platform tags (`pip install
  --target SITE --platform ... --only-binary=:all:`). pip then evaluates environment markers for
  this host and takes only the exact tags given, so the requirements are read from the main
  package's wheel METADATA with the markers evaluated for the target, the recipe's `pins` replace
  what the target's index lacks (PyPI's aarch64 torch 2.13.0 has no `+cpu` build), the broken
  companions are left out, and the versions of the packages named are held to this host's venv of
  the same packages (its `pip freeze` as constraints), so both architectures run the same code. The main wheel
  itself is installed last, `--no-deps`.
- **Loading**: with `lazy_binding`, a hook in the venv (a `.pth` file) loads extension modules
  with RTLD_LAZY (vLLM's aarch64 `_C` names OpenBLAS's `sbgemm_`, which PyPI's aarch64 torch does
  not carry; resolved on first use, called only by bf16 kernels). A venv whose packages include an
  OpenBLAS that has it (`scipy-openblas32`) gets a forwarding shim instead (blas_shim.py), which the
  hook loads first with RTLD_GLOBAL: extension modules then bind at load. The same hook makes a process that
  runs under qemu-user start its children through the node's wrapper (emulation.py) when the
  node names one: without binfmt_misc the kernel cannot start an aarch64 program itself.

The key covers the platform (architecture, tags, CPython's Debian version, or the minor version
and `way: wheels`), the sysroot's package list, the main package and the other pins, the replaced
pins, what is left out, the host venv's key whose freeze constrains versions, and servebench's
engine-side package.
"""

from __future__ import annotations

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Literal

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel

from servebench.builds import blas_shim, venv
from servebench.builds.cache import ArtifactCache
from servebench.builds.recipe import TargetPlatform, VenvRecipe
from servebench.config.campaign import sha256_json
from servebench.paths import ENGINE_SOURCE_DIR
from servebench.platform.sysroot import (
    Sysroot,
    SysrootError,
    debian_arch,
    dpkg_architectures,
    ensure_sysroot,
    sysroot_in_use,
)
from servebench.platform.targets import TargetProfile, emulator_argv

HOOK_MODULE = "servebench_target_hooks"
HOOK = '''"""Installed by servebench (servebench/builds/target_venv.py) into a venv built for {arch}.

- Lazy binding ({lazy}): extension modules load with RTLD_LAZY, so a symbol that this platform's
  wheels do not provide (an engine extension naming OpenBLAS's sbgemm_, absent from aarch64 torch)
  fails only if it is called.
- BLAS shim ({shim}): loaded first, with RTLD_GLOBAL, so extension modules bind sbgemm_ at load
  (servebench/builds/blas_shim.py).
- Under qemu-user (the emulated node gives SERVEBENCH_EMULATED_PYTHON: a host program that starts
  $SERVEBENCH_GUEST_EXECUTABLE under the node's qemu): children started from sys.executable (the
  multiprocessing spawn, subprocesses) go through it; the kernel cannot start a {arch} program
  itself without binfmt_misc, which servebench never registers.
"""
import os
import sys

if {lazy}:
    sys.setdlopenflags(os.RTLD_LAZY)
BLAS_SHIM = None
if {shim!r}:
    import ctypes

    BLAS_SHIM = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), {shim!r}),
                            mode=os.RTLD_NOW | os.RTLD_GLOBAL)
if os.environ.get("SERVEBENCH_EMULATED_PYTHON"):
    os.environ["SERVEBENCH_GUEST_EXECUTABLE"] = sys.executable
    sys.executable = os.environ["SERVEBENCH_EMULATED_PYTHON"]
'''
# run by the target's python after the shim is compiled: the hook loaded it, and sbgemm_ is in the global scope
SHIM_CHECK = ("import ctypes, servebench_target_hooks as hooks; assert hooks.BLAS_SHIM is not None; "
              "ctypes.CDLL(None).sbgemm_")
MAIN_WHEEL = "<the main wheel>.whl"  # in the steps until it is downloaded (and in the dry run)
# Not a requirement of the engine's own (the alias distribution servebench writes, pip itself).
NOT_CONSTRAINED = {"pip", "setuptools-scm", "servebench-engine"}


class TargetBuildError(venv.BuildError):
    pass


Way = Literal["sysroot", "wheels"]
WAYS: tuple[Way, ...] = ("sysroot", "wheels")
WAY_VARIABLE = "SERVEBENCH_TARGET_VENV"
NODE_PYTHONS = "node-pythons"   # <cache>/node-pythons/<arch>-python3.X: where a node's own python is linked


class NodePython(BaseModel):
    """The wheels way's interpreter: no CPython of the target on this host, only the path the venv
    names for it, at which each node gets its own python3.X linked (distribution/interpreter.py)."""

    path: str                      # <cache>/node-pythons/aarch64-python3.11
    arch: str
    python_minor: str

    @property
    def python(self) -> Path:
        return Path(self.path) / "usr" / "bin" / f"python{self.python_minor}"

    @property
    def python_version(self) -> str:
        """Only the minor version is known before a node's python runs the venv."""
        return self.python_minor


TargetPython = Sysroot | NodePython


def node_python(cache: Path, platform: TargetPlatform) -> NodePython:
    name = f"{platform.arch}-python{platform.python_minor}"
    return NodePython(path=str(cache / NODE_PYTHONS / name), arch=platform.arch, python_minor=platform.python_minor)


@dataclass(frozen=True)
class HostFacts:
    """What the ways need of this host, read once (`host_facts`), so that the choice and the refusals
    are plain functions of it."""

    dpkg_architectures: frozenset[str]      # empty: no dpkg (a RHEL, Rocky or SLES login node)
    root: bool
    commands: Mapping[str, str | None]      # a command the ways run -> its path on PATH, or None
    target_minor_python: str | None         # this host's CPython of the target's minor version
    chosen: str | None = None               # SERVEBENCH_TARGET_VENV


def sysroot_commands(arch: str) -> list[str]:
    """What the sysroot way runs here: apt resolves and downloads, dpkg-deb unpacks, qemu-user runs
    the target's python for the post-install steps and the BLAS shim's check (only those need it)."""
    return ["apt-cache", "apt-get", "dpkg-deb", f"qemu-{arch}-static"]


def host_python(minor: str) -> str | None:
    """This host's CPython of `minor` (the base interpreter, not a venv's link), or None."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == minor:
        base = Path(sys.base_prefix) / "bin" / f"python{minor}"
        if base.exists():
            return str(base)
    return shutil.which(f"python{minor}")


def host_facts(platform: TargetPlatform, environ: Mapping[str, str] | None = None) -> HostFacts:
    environ = os.environ if environ is None else environ
    commands = [*sysroot_commands(platform.arch), blas_shim.cross_compiler(platform.arch)]
    return HostFacts(dpkg_architectures=dpkg_architectures(), root=os.geteuid() == 0,
                     commands={name: shutil.which(name) for name in commands},
                     target_minor_python=host_python(platform.python_minor), chosen=environ.get(WAY_VARIABLE))


def choose_way(arch: str, facts: HostFacts) -> Way:
    """SERVEBENCH_TARGET_VENV when set; else the Debian sysroot where dpkg knows the architecture (the
    way emulated nodes need), else pip's platform selection with each node's own python."""
    if facts.chosen:
        if facts.chosen not in WAYS:
            raise TargetBuildError(f"{WAY_VARIABLE}={facts.chosen}: the ways to build a venv for another "
                                   f"architecture are {' and '.join(WAYS)}")
        return facts.chosen  # one of WAYS
    return "sysroot" if debian_arch(arch) in facts.dpkg_architectures else "wheels"


def way_problems(way: Way, recipe: VenvRecipe, facts: HostFacts) -> list[str]:
    """What the way needs that this host lacks, each said with how it would be met (empty: none)."""
    platform = recipe.platform
    assert platform is not None
    problems = []
    if way == "sysroot":
        wanted = debian_arch(platform.arch)
        if not facts.dpkg_architectures:
            problems.append("dpkg, which this host lacks (not a Debian host)")
        elif wanted not in facts.dpkg_architectures:
            how = "dpkg --add-architecture {0} && apt-get update" if facts.root else \
                "root, to run dpkg --add-architecture {0} && apt-get update"
            problems.append(f"dpkg's architecture {wanted}, which it does not know ({how.format(wanted)})")
        runs_target = bool(recipe.post_install) or blas_shim.provider_in(list(recipe.packages)) is not None
        needed = [name for name in sysroot_commands(platform.arch) if runs_target or not name.startswith("qemu-")]
        problems += [f"{name} on PATH" for name in needed if not facts.commands.get(name)]
    elif recipe.post_install and facts.target_minor_python is None:
        problems.append(f"a python{platform.python_minor} on this host to run the venv's post-install steps "
                        f"(pure Python), which it lacks (this one is {sys.version.split()[0]})")
    compiler = blas_shim.cross_compiler(platform.arch)
    if blas_shim.provider_in(list(recipe.packages)) is not None and not facts.commands.get(compiler):
        problems.append(f"{compiler} on PATH to compile the BLAS shim (a compiler: Debian's "
                        f"gcc-{platform.arch.replace('_', '-')}-linux-gnu, or a site's cross compiler)")
    return problems


def refusal(way: Way, arch: str, problems: list[str]) -> str:
    """One line: what the way needs that is missing, and the other way to build."""
    other = {"sysroot": "wheels (pip's platform selection: no dpkg, root or qemu here; each node's own "
                        "python3.X runs the venv)",
             "wheels": "sysroot (Debian's CPython for the architecture unpacked here: dpkg must know it; "
                       "emulated nodes need this one)"}[way]
    return f"a venv for {arch} the {way} way needs {'; '.join(problems)}; nothing was built. The other way: " \
           f"{WAY_VARIABLE}={other}"


def emulated_nodes_note(way: Way, platform: TargetPlatform, emulated: list[str]) -> str | None:
    """What the dry run says when the wheels way meets emulated nodes of the architecture: their python is
    whatever their host gives them (an x86 host's python3.X does not run under qemu-user), refused at
    placement naming the node; the sysroot way brings the build's own."""
    if way != "wheels" or not emulated:
        return None
    return (f"note: the {platform.arch} venv is made the wheels way: it runs on each node's own "
            f"python{platform.python_minor}; emulated node(s) {', '.join(emulated)} have one only if their host "
            f"gives them an {platform.arch} python{platform.python_minor} on PATH (else each is refused at "
            f"placement, by name); {WAY_VARIABLE}=sysroot brings the build's own (dpkg's "
            f"{debian_arch(platform.arch)} architecture on this host)")


def chosen_way(recipe: VenvRecipe, environ: Mapping[str, str] | None = None) -> Way:
    """The way this host builds the recipe's venv, or TargetBuildError in one line (nothing started)."""
    platform = recipe.platform
    assert platform is not None
    facts = host_facts(platform, environ)
    way = choose_way(platform.arch, facts)
    problems = way_problems(way, recipe, facts)
    if problems:
        raise TargetBuildError(refusal(way, platform.arch, problems))
    return way


def made_sysroot(recipe: VenvRecipe, cache: Path, log: Callable[[str], None]) -> Sysroot:
    """The recipe's sysroot (made if needed); apt's own failure said in one line with the other way."""
    platform = recipe.platform
    assert platform is not None
    try:
        return ensure_sysroot(platform.arch, platform.python_minor, cache, log)
    except SysrootError as error:
        raise TargetBuildError(refusal("sysroot", platform.arch, [f"what apt could not give: {error}"])) from None


def target_python(recipe: VenvRecipe, cache: Path, log: Callable[[str], None]) -> TargetPython:
    """The interpreter the venv is made for, by the way chosen (a sysroot is made here if need be)."""
    platform = recipe.platform
    assert platform is not None
    if chosen_way(recipe) == "wheels":
        return node_python(cache, platform)
    return made_sysroot(recipe, cache, log)


def site_packages(venv_dir: Path, platform: TargetPlatform) -> Path:
    return venv_dir / "lib" / f"python{platform.python_minor}" / "site-packages"


def pip_platform_options(platform: TargetPlatform) -> list[str]:
    """What makes this host's pip resolve wheels for the target, never build one here."""
    options = [f"--platform={tag}" for tag in platform.tags()]
    abi = "cp" + platform.python_minor.replace(".", "")
    return [*options, f"--python-version={platform.python_minor}", "--implementation=cp", f"--abi={abi}",
            "--only-binary=:all:"]


def marker_environment(platform: TargetPlatform, python_full: str) -> dict[str, str]:
    """PEP 508's environment of a Linux machine of the target's architecture and CPython."""
    return {"implementation_name": "cpython", "implementation_version": python_full, "os_name": "posix",
            "platform_machine": platform.arch, "platform_python_implementation": "CPython",
            "platform_release": "", "platform_system": "Linux", "platform_version": "",
            "python_full_version": python_full, "python_version": platform.python_minor, "sys_platform": "linux",
            "extra": ""}


def target_requirements(metadata: str, platform: TargetPlatform, python_full: str, left_out: list[str],
                        extra_packages: list[str]) -> list[str]:
    """The wheel's Requires-Dist that apply on the target (no extras), with `pins` replacing and
    `left_out` removing by name, then the other packages of the recipe."""
    environment = marker_environment(platform, python_full)
    pins = {canonicalize_name(name): pin for name, pin in platform.pins.items()}
    dropped = {canonicalize_name(name) for name in left_out}
    lines: list[str] = []
    for value in (line.split(":", 1)[1].strip() for line in metadata.splitlines()
                  if line.startswith("Requires-Dist:")):
        requirement = Requirement(value)
        if requirement.marker is not None and not requirement.marker.evaluate(environment):
            continue
        name = canonicalize_name(requirement.name)
        if name in dropped:
            continue
        requirement.marker = None
        line = pins.get(name, str(requirement))
        if line not in lines:
            lines.append(line)
    return lines + [p for p in extra_packages if p not in lines]


def host_constraints(freeze: str, requirements: list[str], platform: TargetPlatform) -> list[str]:
    """This host's version of every package the target's requirements name, except those pinned for
    the target (`torch==2.13.0+cpu` here would forbid the target's `torch==2.13.0`) or installed from
    a file. Only the named ones: what they pull in differs by architecture (PyPI's aarch64 torch
    needs triton==3.7.1, this host's triton 3.9.0 came with xgrammar, whose marker asks for it on
    x86_64 only: measured, a full freeze as constraints cannot be resolved)."""
    named = {canonicalize_name(Requirement(line).name) for line in requirements}
    pinned = {canonicalize_name(name) for name in platform.pins} | {
        canonicalize_name(Requirement(line).name) for line in requirements if "==" in line}
    kept = []
    for line in freeze.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-e")) or " @ " in line or "==" not in line:
            continue
        name = canonicalize_name(line.split("==")[0])
        if name in named and name not in pinned and name not in NOT_CONSTRAINED:
            kept.append(line)
    return kept


def wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as archive:
        name = next(n for n in archive.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        return archive.read(name).decode()


def wheel_tag(wheel: Path) -> str:
    """The platform tag of a wheel file (its name's last part): manylinux_2_28_aarch64."""
    return wheel.name.removesuffix(".whl").split("-")[-1]


def target_inputs(recipe: VenvRecipe, target: TargetPython) -> dict:
    """Everything the key covers (the sysroot's package list is what apt would install now; the wheels
    way: the minor version, whose python each node brings)."""
    platform = recipe.platform
    assert platform is not None
    interpreter: dict = ({"python": target.python_version, "sysroot": {"key": target.key, "packages": target.packages}}
                         if isinstance(target, Sysroot) else {"python": target.python_minor, "way": "wheels"})
    inputs = {
        "engine": recipe.engine,
        "arch": platform.arch,
        "platform": f"linux-{platform.arch}",
        "platform_tags": platform.tags(),
        **interpreter,
        "requirements_from": platform.requirements_from,
        "packages": list(recipe.packages),
        "pins": dict(platform.pins),
        "removed": list(recipe.remove),
        "post_install": [list(args) for args in recipe.post_install],
        "lazy_binding": platform.lazy_binding,
    }
    provider = blas_shim.provider_in(recipe.packages)
    if provider is not None:   # only then: every other venv keeps its key
        inputs["blas_shim"] = blas_shim.shim_inputs(provider, platform.arch)
    if platform.constraints_from is not None:
        inputs["constraints_from"] = venv.build_key(platform.constraints_from)
    if recipe.local_wheels:   # built here: the wheel build's key stands for its content
        inputs["built_from"] = dict(recipe.built_from)
    if recipe.engine_package:
        inputs["engine_source"] = venv.source_digest()
    return inputs


def target_key(recipe: VenvRecipe, inputs: dict) -> str:
    return f"{recipe.engine}-{inputs['arch']}-{sha256_json(inputs)[:16]}"


def inputs_and_key(recipe: VenvRecipe, cache: Path, log: Callable[[str], None]) -> tuple[dict, str]:
    platform = recipe.platform
    assert platform is not None
    inputs = target_inputs(recipe, target_python(recipe, cache, log))
    return inputs, target_key(recipe, inputs)


def build_steps(recipe: VenvRecipe, venv_dir: Path, scratch: Path, engine_source: Path,
                runner: list[str] | None) -> list[tuple[str, list[str]]]:
    """The commands after the venv's layout is written (title, argv); `runner` starts a target program
    here (qemu-user with the sysroot), None on the wheels way: nothing of the target runs here, the
    post-install steps run with this host's CPython of the same minor on the venv (`_build`), and the
    BLAS shim is first loaded by a node's python. `servebench build --dry-run` prints them."""
    platform = recipe.platform
    assert platform is not None
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    site = str(site_packages(venv_dir, platform))
    resolve = pip_platform_options(platform)
    if recipe.local_wheels:   # a wheel built here for the target (cross-compiled): its own platform tag too
        (built,) = recipe.local_wheels
        take = ("take the built wheel", ["install", "-D", "-t", str(scratch / "main"), built])
        main_resolve = [f"--platform=linux_{platform.arch}", *resolve]
    else:
        take = ("download the main wheel for the target", [*pip, "download", "--no-deps", *resolve, "-d",
                                                           str(scratch / "main"), platform.requirements_from])
        main_resolve = resolve
    steps = [take,
             ("install the requirements for the target", [*pip, "install", "--target", site, *resolve,
                                                         "--no-warn-script-location", "--no-warn-conflicts",
                                                         *recipe.pip_options,
                                                         "-r", str(scratch / "requirements.txt"),
                                                         "-c", str(scratch / "constraints.txt")]),
             ("install the main wheel", [*pip, "install", "--target", site, *main_resolve, "--no-deps",
                                         "--no-warn-script-location", "--no-warn-conflicts",
                                         str(scratch / "main" / MAIN_WHEEL)])]
    if recipe.engine_package:
        # built in pip's isolated environment: this host's python need not have setuptools and wheel
        steps.append(("install servebench-engine", [*pip, "install", "--target", site, "--no-deps",
                                                    "--no-warn-conflicts", str(engine_source)]))
    provider = blas_shim.provider_in(recipe.packages)
    python = str(venv_dir / "bin" / "python")
    if provider is not None:   # before anything runs the venv's python: its hook loads the shim
        steps.append(("compile the BLAS shim", blas_shim.compile_argv(
            provider, platform.arch, scratch / blas_shim.SHIM_SOURCE_NAME, Path(site))))
        if runner is not None:
            steps.append(("check the BLAS shim loads", [*runner, python, "-c", SHIM_CHECK]))
    return steps + [(f"post-install: {' '.join(args[:3])}", [*(runner or []), python, *args])
                    for args in recipe.post_install]


def dry_run_steps(recipe: VenvRecipe, cache: Path, venv_dir: Path) -> list[tuple[str, list[str]]]:
    """What a build of the recipe runs, for `servebench build --dry-run`, by the way this host takes."""
    platform = recipe.platform
    assert platform is not None
    target = target_python(recipe, cache, lambda _: None)
    if isinstance(target, Sysroot):
        return [("write the venv's layout (pyvenv.cfg, bin/python -> the sysroot's CPython, the hooks)",
                 ["<written by servebench>", str(venv_dir)]),
                *build_steps(recipe, venv_dir, Path("<scratch>"), Path("<a copy of engine/>"), build_runner(target))]
    host = host_python(platform.python_minor) or f"python{platform.python_minor}"
    steps = build_steps(recipe, venv_dir, Path("<scratch>"), Path("<a copy of engine/>"), None)
    installs, post = steps[:len(steps) - len(recipe.post_install)], steps[len(steps) - len(recipe.post_install):]
    return [(f"the wheels way (no {platform.arch} code runs here): write the venv's layout, bin/python -> "
             f"{target.python}, where each node's own python{platform.python_minor} is linked at placement",
             ["<written by servebench>", str(venv_dir)]), *installs,
            *([(f"for the post-install steps only, bin/python -> this host's {host}", ["<written by servebench>"]),
               *post, (f"bin/python -> {target.python} again", ["<written by servebench>"])] if post else [])]


def ensure_target_venv(recipe: VenvRecipe, cache: Path, log: Callable[[str], None] = print) -> venv.EngineBuild:
    """The venv for the recipe's platform, built first if no valid one is cached (the host venv whose
    freeze constrains it is built or found first)."""
    platform = recipe.platform
    assert platform is not None
    if chosen_way(recipe) == "wheels":
        return _ensure_on(recipe, node_python(cache, platform), cache, log)
    try:
        with sysroot_in_use(platform.arch, platform.python_minor, cache, log) as sysroot:
            return _ensure_on(recipe, sysroot, cache, log)
    except SysrootError as error:
        raise TargetBuildError(refusal("sysroot", platform.arch, [f"what apt could not give: {error}"])) from None


def _ensure_on(recipe: VenvRecipe, target: TargetPython, cache: Path,
               log: Callable[[str], None]) -> venv.EngineBuild:
    """ensure_target_venv with its sysroot held (`builds gc` leaves it alone meanwhile), or for the
    node's python."""
    platform = recipe.platform
    assert platform is not None
    inputs = target_inputs(recipe, target)
    key = target_key(recipe, inputs)
    artifact = ArtifactCache(cache / "engines")
    found = artifact.get(key)
    if found is not None:
        return venv.EngineBuild.model_validate_json(found).model_copy(update={"build_seconds": None})
    freeze = ""
    if platform.constraints_from is not None:
        freeze = venv.ensure_build(platform.constraints_from, cache, log).pip_freeze
    with artifact.building(key, log) as (venv_dir, found):
        if found is not None:
            return venv.EngineBuild.model_validate_json(found).model_copy(update={"build_seconds": None})
        started = time.monotonic()
        build = _build(recipe, key, inputs, target, freeze, venv_dir, artifact.log_path(key), log)
        build = build.model_copy(update={"build_seconds": round(time.monotonic() - started, 1)})
        artifact.complete(key, build.model_dump_json(indent=2))
    return build


def point_venv_at(venv_dir: Path, python: Path, version: str, minor: str) -> None:
    """pyvenv.cfg and bin/python* for the base interpreter `python` (replacing what was there)."""
    bin_dir = venv_dir / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    (venv_dir / "pyvenv.cfg").write_text(
        f"home = {python.parent}\ninclude-system-site-packages = false\nversion = {version}\nexecutable = {python}\n")
    for name in ("python", "python3", f"python{minor}"):
        link = bin_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(python)


def write_layout(venv_dir: Path, target: TargetPython, platform: TargetPlatform,
                 packages: tuple[str, ...] = ()) -> Path:
    """The venv's files without pip: pyvenv.cfg, bin/python -> the target's CPython (the sysroot's, or the
    path of each node's own), site-packages, the hook (and the BLAS shim's directory when `packages` name
    its provider)."""
    site = site_packages(venv_dir, platform)
    site.mkdir(parents=True, exist_ok=True)
    point_venv_at(venv_dir, target.python, target.python_version, platform.python_minor)
    shim = None
    if blas_shim.provider_in(list(packages)) is not None:
        blas_shim.shim_path(site).parent.mkdir(parents=True, exist_ok=True)
        shim = str(blas_shim.shim_path(site).relative_to(site))
    lazy = platform.lazy_binding and shim is None   # the shim gives what lazy binding left unbound
    (site / f"{HOOK_MODULE}.py").write_text(HOOK.format(arch=platform.arch, lazy=lazy, shim=shim))
    (site / f"{HOOK_MODULE}.pth").write_text(f"import {HOOK_MODULE}\n")
    return site


def build_runner(sysroot: Sysroot) -> list[str]:
    """How a target program runs here during the build (post-install steps): qemu-user's generic CPU
    with the sysroot as its prefix. A node runs it with its own CPU and root (emulation.py)."""
    generic = TargetProfile(name=f"{sysroot.arch}-build", arch=sysroot.arch, description="the build's runner",
                            emulator_cpu="max")
    return emulator_argv(generic, sysroot.path)


def _build(recipe: VenvRecipe, key: str, inputs: dict, target: TargetPython, freeze: str, venv_dir: Path,
           log_path: Path, log: Callable[[str], None]) -> venv.EngineBuild:
    platform = recipe.platform
    assert platform is not None
    with open(log_path, "w") as out, tempfile.TemporaryDirectory(dir=venv_dir.parent,
                                                                 prefix=f".{key}.scratch-") as scratch_dir:
        scratch = Path(scratch_dir)
        site = write_layout(venv_dir, target, platform, tuple(recipe.packages))
        provider = blas_shim.provider_in(recipe.packages)
        if provider is not None:
            (scratch / blas_shim.SHIM_SOURCE_NAME).write_text(blas_shim.shim_source(provider))
        engine_source = scratch / "engine"
        if recipe.engine_package:
            for path in venv.engine_source_files():
                copy = engine_source / path.relative_to(ENGINE_SOURCE_DIR)
                copy.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, copy)
        started = time.monotonic()

        def run(title: str, argv: list[str]) -> None:
            log(f"engine build {key}: {title}")
            returncode = venv.run_step(argv, out, log, title, started)
            if returncode != 0:
                raise TargetBuildError(f"engine build step '{title}' failed (exit {returncode}); see {log_path}")

        runner = build_runner(target) if isinstance(target, Sysroot) else None
        download, *rest = build_steps(recipe, venv_dir, scratch, engine_source, runner)
        run(*download)
        main = _main_wheel(scratch / "main")  # its METADATA says what the rest is
        write_resolution_files(recipe, wheel_metadata(main), target.python_version, freeze, scratch)
        out.write("requirements for the target:\n" + (scratch / "requirements.txt").read_text())
        placeholder = str(scratch / "main" / MAIN_WHEEL)
        post = len(recipe.post_install) if runner is None else 0   # the wheels way: run by this host's CPython
        for title, argv in rest[:len(rest) - post]:
            run(title, [str(main) if arg == placeholder else arg for arg in argv])
        if post:
            host = host_python(platform.python_minor)
            if host is None:
                raise TargetBuildError(refusal("wheels", platform.arch, [f"a python{platform.python_minor} here "
                                                                         "for the post-install steps"]))
            point_venv_at(venv_dir, Path(host), platform.python_minor, platform.python_minor)
            try:
                for title, argv in rest[len(rest) - post:]:
                    run(title, argv)
            finally:
                point_venv_at(venv_dir, target.python, target.python_version, platform.python_minor)
    tag = wheel_tag(main)
    return venv.EngineBuild(
        key=key, engine=recipe.engine, engine_version=installed_version(site, recipe.version_distribution),
        packages=list(recipe.packages), python_version=target.python_version, platform=inputs["platform"],
        venv_path=str(venv_dir), pip_freeze=site_freeze(site), build_seconds=None,
        created_at=datetime.now(timezone.utc), inputs=inputs | {"target": tag, "wheel_tag": tag})


def write_resolution_files(recipe: VenvRecipe, metadata: str, python_full: str, freeze: str, scratch: Path) -> None:
    """requirements.txt (the main wheel's, for the target) and constraints.txt (this host's versions)."""
    platform = recipe.platform
    assert platform is not None
    requirements = target_requirements(metadata, platform, python_full, recipe.remove,
                                       [p for p in recipe.packages if p != platform.requirements_from])
    (scratch / "requirements.txt").write_text("\n".join(requirements) + "\n")
    (scratch / "constraints.txt").write_text("\n".join(host_constraints(freeze, requirements, platform)) + "\n")


def _main_wheel(directory: Path) -> Path:
    wheels = sorted(directory.glob("*.whl"))
    if len(wheels) != 1:
        raise TargetBuildError(f"expected one downloaded wheel in {directory}, found {[w.name for w in wheels]}")
    return wheels[0]


def installed_version(site: Path, distribution: str | None) -> str:
    """A distribution's version as installed in the target's site-packages (read here, not run there)."""
    if distribution is None:
        raise TargetBuildError("a venv for another architecture needs its version_distribution")
    found = list(importlib.metadata.distributions(name=distribution, path=[str(site)]))
    if not found:
        raise TargetBuildError(f"{distribution} is not installed in {site}")
    return found[0].version


def site_freeze(site: Path) -> str:
    """`pip freeze` of the target's site-packages (read by this host's pip)."""
    done = subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "freeze", "--path", str(site)],
                          capture_output=True, text=True)
    return done.stdout

