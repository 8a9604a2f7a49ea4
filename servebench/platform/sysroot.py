"""A Debian userland for another architecture: its CPython and the libraries that CPython and an
engine's wheels load (libc, libstdc++, libgomp, libnuma), unpacked from Debian's own .debs into a
directory of the cache, never installed on this host.

Why not a package manager under emulation: dpkg's maintainer scripts under qemu-user are slow and
fragile, and nothing here needs them: `dpkg-deb -x` of the dependency closure of `python3.11`
gives a tree in which `qemu-aarch64-static -L ROOT ROOT/usr/bin/python3.11` runs (measured: 36
packages, 15 MB of .debs, 75 MB unpacked). apt resolves the closure and downloads the packages
for the foreign architecture, which it does only when dpkg knows that architecture
(`dpkg --add-architecture arm64 && apt-get update`, once per host; the error says so).

The sysroot is cached by the key of its package list: names and versions as apt would install
them when it is made, so a Debian point release makes another sysroot, never a mixed one. Whoever makes one
or builds a venv on it holds a shared lock on `<key>.use` beside it (`sysroot_in_use`), and
`servebench builds gc` removes a sysroot only under that lock, exclusive (cache_trees.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Callable, Iterator

from pydantic import BaseModel

from servebench.config.campaign import sha256_json
from servebench.offline import refuse_download

DEBIAN_ARCH = {"aarch64": "arm64", "x86_64": "amd64"}
# What a CPU-only engine's Python process loads besides CPython itself: torch's libstdc++ and
# OpenMP, vLLM's libnuma. The rest of the closure follows from these.
ROOT_PACKAGES = ("python{minor}", "libstdc++6", "libgomp1", "libnuma1")
# Package managers' own tools in the closure (through perl and dpkg's pre-dependencies): nothing a
# program run from the sysroot loads.
NOT_RUNTIME = frozenset({"dpkg", "tar", "install-info", "perl", "perl-base", "perl-modules-5.36", "libperl5.36",
                         "debconf", "base-files", "debianutils"})
SYSROOTS = "sysroots"
MARKER = "servebench-sysroot.json"


class SysrootError(RuntimeError):
    pass


class Sysroot(BaseModel):
    """An unpacked userland: where it is, for which architecture, made of which packages."""

    path: str
    arch: str                      # aarch64 (platform.machine() spelling)
    python_minor: str              # 3.11
    packages: dict[str, str]       # Debian package -> version
    key: str

    @property
    def python(self) -> Path:
        return Path(self.path) / "usr" / "bin" / f"python{self.python_minor}"

    @property
    def python_version(self) -> str:
        """CPython's version as Debian packages it ('3.11.2' of '3.11.2-6+deb12u9')."""
        return self.packages[f"python{self.python_minor}"].split("-")[0]


def debian_arch(arch: str) -> str:
    try:
        return DEBIAN_ARCH[arch]
    except KeyError:
        raise SysrootError(f"no Debian architecture for {arch!r} (known: {', '.join(DEBIAN_ARCH)})") from None


def dpkg_architectures() -> frozenset[str]:
    """The Debian architectures dpkg knows here (its own and the foreign ones it was given): empty on a
    host without dpkg (a RHEL, Rocky or SLES login node). Reading them needs no root."""
    known: set[str] = set()
    for argv in (["dpkg", "--print-architecture"], ["dpkg", "--print-foreign-architectures"]):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return frozenset()
        if done.returncode == 0:
            known.update(done.stdout.split())
    return frozenset(known)


def check_foreign_arch(arch: str) -> None:
    """apt downloads packages of another architecture only when dpkg knows it: say how, if not."""
    wanted = debian_arch(arch)
    known = dpkg_architectures()
    if not known:
        raise SysrootError(f"this host has no dpkg: a Debian sysroot for {wanted} cannot be made here")
    if wanted not in known:
        raise SysrootError(f"dpkg does not know the architecture {wanted}: apt cannot download its packages. "
                           f"Once per host: dpkg --add-architecture {wanted} && apt-get update "
                           "(nothing is installed for it; servebench unpacks the packages into its cache)")


def closure(arch: str, python_minor: str, extra: tuple[str, ...] = ()) -> dict[str, str]:
    """The packages (name -> candidate version) of the dependency closure of ROOT_PACKAGES for `arch`,
    and of `extra` (a build's headers and link libraries: libnuma-dev, libpython3.11-dev).

    Asked of apt once per process (seconds each time; a plan computes several build keys on the same
    sysroot): apt's answer changes only when its package lists are updated, which a plan or a run
    does not do."""
    return dict(_closure(arch, python_minor, tuple(extra)))


@functools.lru_cache(maxsize=None)
def _closure(arch: str, python_minor: str, extra: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    check_foreign_arch(arch)
    suffix = f":{debian_arch(arch)}"
    roots = [name.format(minor=python_minor) + suffix for name in (*ROOT_PACKAGES, *extra)]
    done = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends", "--no-suggests", "--no-conflicts",
                           "--no-breaks", "--no-replaces", "--no-enhances", *roots], capture_output=True, text=True)
    if done.returncode != 0:
        raise SysrootError(f"apt-cache depends {' '.join(roots)} failed: {done.stderr.strip()[-400:]}")
    names = sorted({line.strip().removesuffix(suffix) for line in done.stdout.splitlines()
                    if line and not line.startswith((" ", "<")) and line.strip().endswith(suffix)} - NOT_RUNTIME)
    return tuple(candidate_versions(names, suffix).items())


def candidate_versions(names: list[str], suffix: str) -> dict[str, str]:
    """What apt would fetch for each package now (`apt-cache policy`'s Candidate)."""
    done = subprocess.run(["apt-cache", "policy", *(name + suffix for name in names)], capture_output=True, text=True)
    versions: dict[str, str] = {}
    current = None
    for line in done.stdout.splitlines():
        if not line.startswith(" ") and line.endswith(":"):
            current = line[:-1].removesuffix(suffix)
        elif current and line.strip().startswith("Candidate:"):
            versions[current] = line.split(":", 1)[1].strip()
    missing = [name for name in names if versions.get(name) in (None, "(none)")]
    if missing:
        raise SysrootError(f"apt has no candidate for {', '.join(n + suffix for n in missing)} (apt-get update?)")
    return versions


def sysroot_key(arch: str, packages: dict[str, str]) -> str:
    return f"debian-{debian_arch(arch)}-{sha256_json(packages)[:16]}"


def use_file(cache: Path, key: str) -> Path:
    """The sysroot's lock file: shared while it is made or a venv is built on it, exclusive while gc
    removes it. Never removed itself (a process holding the old inode would not exclude a new one)."""
    return cache / SYSROOTS / f"{key}.use"


@contextlib.contextmanager
def sysroot_in_use(arch: str, python_minor: str, cache: Path, log: Callable[[str], None] = print,
                   extra: tuple[str, ...] = ()) -> Iterator[Sysroot]:
    """The sysroot, made if needed and held for the block (a venv build on it): `builds gc` cannot
    remove it between the key's computation and the venv's link to it. Marked used (its marker's
    mtime: `builds list`'s last use)."""
    while True:
        sysroot = ensure_sysroot(arch, python_minor, cache, log, extra)
        with open(use_file(cache, sysroot.key), "a") as use:
            fcntl.flock(use, fcntl.LOCK_SH)
            marker = Path(sysroot.path) / MARKER
            if marker.exists():  # else gc removed it after ensure_sysroot found it: make it again
                os.utime(marker)
                yield sysroot
                return


def ensure_sysroot(arch: str, python_minor: str, cache: Path, log: Callable[[str], None] = print,
                   extra: tuple[str, ...] = ()) -> Sysroot:
    """The userland for `arch` with CPython `python_minor` (and the `extra` packages' closure: a cross
    build's sysroot), unpacked once per package list (its lock held shared while it is made: gc leaves
    the partial tree alone)."""
    packages = closure(arch, python_minor, extra)
    key = sysroot_key(arch, packages)
    root = cache / SYSROOTS / key
    sysroot = Sysroot(path=str(root), arch=arch, python_minor=python_minor, packages=packages, key=key)
    if (root / MARKER).exists():
        return sysroot
    refuse_download(f"the {debian_arch(arch)} sysroot {key} ({len(packages)} Debian packages)")
    root.parent.mkdir(parents=True, exist_ok=True)
    with open(use_file(cache, key), "a") as use:
        fcntl.flock(use, fcntl.LOCK_SH)
        if not (root / MARKER).exists():
            _unpack(sysroot, packages, cache, log)
    return sysroot


def _unpack(sysroot: Sysroot, packages: dict[str, str], cache: Path, log: Callable[[str], None]) -> None:
    """Unpack the packages into `<key>.partial`, then rename it into place."""
    arch, python_minor, key, root = sysroot.arch, sysroot.python_minor, sysroot.key, Path(sysroot.path)
    log(f"sysroot {key}: {len(packages)} Debian packages for {debian_arch(arch)}")
    debs = download(packages, debian_arch(arch), cache / "sources" / "debs")
    partial = root.with_name(key + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for deb in debs:
        done = subprocess.run(["dpkg-deb", "-x", str(deb), str(partial)], capture_output=True, text=True)
        if done.returncode != 0:
            raise SysrootError(f"dpkg-deb -x {deb} failed: {done.stderr.strip()[-300:]}")
    if not (partial / "usr" / "bin" / f"python{python_minor}").exists():
        raise SysrootError(f"the unpacked packages have no usr/bin/python{python_minor} ({partial})")
    (partial / MARKER).write_text(sysroot.model_dump_json(indent=2))
    shutil.rmtree(root, ignore_errors=True)
    partial.rename(root)


def download(packages: dict[str, str], arch: str, into: Path) -> list[Path]:
    """The .deb of each package at its version (`apt-get download`, kept for the next sysroot)."""
    into.mkdir(parents=True, exist_ok=True)
    wanted = {name: into / deb_name(name, version, arch) for name, version in packages.items()}
    missing = [f"{name}:{arch}={packages[name]}" for name, path in wanted.items() if not path.exists()]
    if missing:
        done = subprocess.run(["apt-get", "download", *missing], cwd=into, capture_output=True, text=True)
        if done.returncode != 0:
            raise SysrootError(f"apt-get download failed: {done.stderr.strip()[-400:]}")
    absent = [str(path) for path in wanted.values() if not path.exists()]
    if absent:
        raise SysrootError(f"apt-get download did not leave {', '.join(absent)}")
    return list(wanted.values())


def deb_name(name: str, version: str, arch: str) -> str:
    """The file name apt-get download gives a package (an epoch's ':' is written %3a)."""
    return f"{name}_{version.replace(':', '%3a')}_{arch}.deb"
