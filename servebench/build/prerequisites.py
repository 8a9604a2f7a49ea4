"""What a build needs from the build host, checked before it starts: a build that would stop
after forty minutes on a missing header or an old compiler is refused in one message that names
every unmet prerequisite and how to meet it (`servebench build --dry-run` prints them all).

Engines say what their builds need (`Engine.build_prerequisites`); the checks here are the
shared vocabulary: a command on PATH, a version at least N, a file or a staged source tree,
free disk, memory for the parallel compile jobs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from pydantic import BaseModel


class Prerequisite(BaseModel):
    """One thing a build needs, and whether this host has it."""

    name: str
    met: bool
    found: str            # what is there ('gcc 12.2.0', 'missing')
    needed: str           # what the build needs ('gcc >= 12.3')
    fix: str = ""         # how to meet it


class PrerequisiteError(RuntimeError):
    pass


def unmet(prerequisites: list[Prerequisite]) -> list[Prerequisite]:
    return [p for p in prerequisites if not p.met]


def describe(prerequisites: list[Prerequisite]) -> str:
    """One line per prerequisite: met or not, what was found, what is needed, the fix."""
    lines = []
    for p in prerequisites:
        state = "ok     " if p.met else "MISSING"
        lines.append(f"  [{state}] {p.name}: {p.found}" + ("" if p.met else f"; needs {p.needed}")
                     + ("" if p.met or not p.fix else f" -> {p.fix}"))
    return "\n".join(lines)


def require(prerequisites: list[Prerequisite], what: str) -> None:
    """Raise naming every unmet prerequisite (all at once, so one round of fixes is enough)."""
    missing = unmet(prerequisites)
    if missing:
        raise PrerequisiteError(f"{what}: {len(missing)} prerequisite(s) not met, nothing was built:\n"
                                + describe(missing))


def version_tuple(text: str) -> tuple[int, ...]:
    """'12.2.0' -> (12, 2, 0); the first dotted number in the text."""
    match = re.search(r"\d+(?:\.\d+)*", text)
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def command_output(argv: list[str]) -> str | None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout or done.stderr).strip() if done.returncode == 0 else None


def tool(name: str, command: str, fix: str, version_argv: list[str] | None = None,
         at_least: str | None = None) -> Prerequisite:
    """A command on PATH, optionally of at least a version (read from `version_argv`'s output)."""
    path = shutil.which(command)
    needed = command + (f" >= {at_least}" if at_least else "")
    if path is None:
        return Prerequisite(name=name, met=False, found="missing", needed=needed, fix=fix)
    if at_least is None:
        return Prerequisite(name=name, met=True, found=path, needed=needed)
    output = command_output(version_argv or [command, "--version"]) or ""
    found = version_tuple(output)
    shown = ".".join(map(str, found)) or "unknown version"
    return Prerequisite(name=name, met=bool(found) and found >= version_tuple(at_least), found=f"{command} {shown}",
                        needed=needed, fix=fix)


def file_present(name: str, path: Path, fix: str) -> Prerequisite:
    return Prerequisite(name=name, met=path.is_file(), found=str(path) if path.is_file() else f"no {path}",
                        needed=str(path), fix=fix)


def source_tree(name: str, path: str | None, marker: str, fix: str) -> Prerequisite:
    """A source tree staged locally (a directory holding `marker`, e.g. CMakeLists.txt)."""
    if not path:
        return Prerequisite(name=name, met=False, found="not given", needed=f"a local source tree with {marker}",
                            fix=fix)
    ok = (Path(path) / marker).is_file()
    return Prerequisite(name=name, met=ok, found=path if ok else f"{path} has no {marker}",
                        needed=f"a local source tree with {marker}", fix=fix)


def free_disk(name: str, path: Path, gib: float) -> Prerequisite:
    probe = path
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free / 2**30
    return Prerequisite(name=name, met=free >= gib, found=f"{free:.1f} GiB free at {probe}", needed=f"{gib:g} GiB",
                        fix="free disk space, or point SERVEBENCH_CACHE at a larger disk")


def available_memory_gib(meminfo: Path = Path("/proc/meminfo")) -> float:
    for line in meminfo.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 2**20
    return 0.0


def memory_for_jobs(jobs: int, gib_per_job: float, base_gib: float = 1.0) -> Prerequisite:
    needed = base_gib + jobs * gib_per_job
    free = available_memory_gib()
    return Prerequisite(name="memory", met=free >= needed, found=f"{free:.1f} GiB available",
                        needed=f"{needed:g} GiB for {jobs} compile job(s)", fix="fewer jobs (`jobs:`), or more memory")


def cpu_count() -> int:
    return len(os.sched_getaffinity(0))
