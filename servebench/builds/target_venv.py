"""A venv for another architecture, made on this host: an x86 orchestrator builds the aarch64
engine its ARM nodes serve (docs/builds.md, "Builds for a node's architecture").

Three things differ from a venv for this host (venv.py):
- **The python** is a CPython of the target architecture: Debian's, unpacked from its .debs into a
  sysroot cached by key (sysroot.py). The venv is the usual layout (`pyvenv.cfg` whose `home` is
  the sysroot's `usr/bin`, `bin/python` a link to its interpreter, `lib/python3.X/site-packages`),
  so the target's python finds it as any venv; on this host it runs only under qemu-user.
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

The key covers the platform (architecture, tags, CPython's Debian version), the sysroot's
package list, the main package and the other pins, the replaced pins, what is left out, the
host venv's key whose freeze constrains versions, and servebench's engine-side package.
"""

from __future__ import annotations

import importlib.metadata
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from servebench.builds import blas_shim, venv
from servebench.builds.cache import ArtifactCache
from servebench.builds.recipe import TargetPlatform, VenvRecipe
from servebench.config.campaign import sha256_json
from servebench.paths import ENGINE_SOURCE_DIR
from servebench.platform.sysroot import Sysroot, ensure_sysroot, sysroot_in_use
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


def target_inputs(recipe: VenvRecipe, sysroot: Sysroot) -> dict:
    """Everything the key covers (the sysroot's package list is what apt would install now)."""
    platform = recipe.platform
    assert platform is not None
    inputs = {
        "engine": recipe.engine,
        "arch": platform.arch,
        "platform": f"linux-{platform.arch}",
        "platform_tags": platform.tags(),
        "python": sysroot.python_version,
        "sysroot": {"key": sysroot.key, "packages": sysroot.packages},
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
    inputs = target_inputs(recipe, ensure_sysroot(platform.arch, platform.python_minor, cache, log))
    return inputs, target_key(recipe, inputs)


def build_steps(recipe: VenvRecipe, venv_dir: Path, scratch: Path, engine_source: Path,
                runner: list[str]) -> list[tuple[str, list[str]]]:
    """The commands after the venv's layout is written (title, argv); `runner` starts a target program
    here (qemu-user with the sysroot). `servebench build --dry-run` prints them."""
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
        steps.append(("check the BLAS shim loads", [*runner, python, "-c", SHIM_CHECK]))
    return steps + [(f"post-install: {' '.join(args[:3])}", [*runner, python, *args]) for args in recipe.post_install]


def ensure_target_venv(recipe: VenvRecipe, cache: Path, log: Callable[[str], None] = print) -> venv.EngineBuild:
    """The venv for the recipe's platform, built first if no valid one is cached (the host venv whose
    freeze constrains it is built or found first)."""
    platform = recipe.platform
    assert platform is not None
    with sysroot_in_use(platform.arch, platform.python_minor, cache, log) as sysroot:
        return _ensure_on(recipe, sysroot, cache, log)


def _ensure_on(recipe: VenvRecipe, sysroot: Sysroot, cache: Path, log: Callable[[str], None]) -> venv.EngineBuild:
    """ensure_target_venv with its sysroot held (`builds gc` leaves it alone meanwhile)."""
    platform = recipe.platform
    assert platform is not None
    inputs = target_inputs(recipe, sysroot)
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
        build = _build(recipe, key, inputs, sysroot, freeze, venv_dir, artifact.log_path(key), log)
        build = build.model_copy(update={"build_seconds": round(time.monotonic() - started, 1)})
        artifact.complete(key, build.model_dump_json(indent=2))
    return build


def write_layout(venv_dir: Path, sysroot: Sysroot, platform: TargetPlatform,
                 packages: tuple[str, ...] = ()) -> Path:
    """The venv's files without pip: pyvenv.cfg, bin/python -> the sysroot's CPython, site-packages, the hook
    (and the BLAS shim's directory when `packages` name its provider)."""
    bin_dir = venv_dir / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    site = site_packages(venv_dir, platform)
    site.mkdir(parents=True, exist_ok=True)
    (venv_dir / "pyvenv.cfg").write_text(
        f"home = {sysroot.python.parent}\ninclude-system-site-packages = false\nversion = {sysroot.python_version}\n"
        f"executable = {sysroot.python}\n")
    for name in ("python", "python3", f"python{platform.python_minor}"):
        (bin_dir / name).symlink_to(sysroot.python)
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


def _build(recipe: VenvRecipe, key: str, inputs: dict, sysroot: Sysroot, freeze: str, venv_dir: Path,
           log_path: Path, log: Callable[[str], None]) -> venv.EngineBuild:
    platform = recipe.platform
    assert platform is not None
    with open(log_path, "w") as out, tempfile.TemporaryDirectory(dir=venv_dir.parent,
                                                                 prefix=f".{key}.scratch-") as scratch_dir:
        scratch = Path(scratch_dir)
        site = write_layout(venv_dir, sysroot, platform, tuple(recipe.packages))
        provider = blas_shim.provider_in(recipe.packages)
        if provider is not None:
            (scratch / blas_shim.SHIM_SOURCE_NAME).write_text(blas_shim.shim_source(provider))
        engine_source = scratch / "engine"
        if recipe.engine_package:
            for path in venv.engine_source_files():
                target = engine_source / path.relative_to(ENGINE_SOURCE_DIR)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
        started = time.monotonic()

        def run(title: str, argv: list[str]) -> None:
            log(f"engine build {key}: {title}")
            returncode = venv.run_step(argv, out, log, title, started)
            if returncode != 0:
                raise TargetBuildError(f"engine build step '{title}' failed (exit {returncode}); see {log_path}")

        download, *rest = build_steps(recipe, venv_dir, scratch, engine_source, build_runner(sysroot))
        run(*download)
        main = _main_wheel(scratch / "main")  # its METADATA says what the rest is
        write_resolution_files(recipe, wheel_metadata(main), sysroot.python_version, freeze, scratch)
        out.write("requirements for the target:\n" + (scratch / "requirements.txt").read_text())
        placeholder = str(scratch / "main" / MAIN_WHEEL)
        for title, argv in rest:
            run(title, [str(main) if arg == placeholder else arg for arg in argv])
    tag = wheel_tag(main)
    return venv.EngineBuild(
        key=key, engine=recipe.engine, engine_version=installed_version(site, recipe.version_distribution),
        packages=list(recipe.packages), python_version=sysroot.python_version, platform=inputs["platform"],
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

