"""What a build needs from the build host, checked before it starts: a build that would stop
after forty minutes on a missing header or an old compiler is refused in one message that names
every unmet prerequisite and how to meet it (`servebench build --dry-run` prints them all).

Engines say what their builds need (`Engine.build_prerequisites`); the checks here are the
shared vocabulary: a command on PATH, a version at least N, a file or a staged source tree (or,
when it is not staged, the git repository its CMake would clone at configure time, probed with
`git ls-remote` under a short deadline), free disk, memory for the parallel compile jobs.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping
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


def staged(path: str | None, marker: str) -> bool:
    """Whether `path` is a staged source tree: a directory holding `marker` (e.g. CMakeLists.txt).
    The preflight and the recipe ask the same question, so a tree the preflight did not accept is
    never handed to the build."""
    if not path:
        return False
    return (Path(path) / marker).is_file()


GITHUB = "https://github.com"
GITHUB_URL_VARIABLE = "SERVEBENCH_GITHUB_URL"   # a mirror (or a test's server) standing for https://github.com
PROBE_SECONDS = 10.0     # a reachable host answers `git ls-remote` in about a second; an unreachable one waits


class RemoteSource(BaseModel):
    """A git repository and ref that a build's CMake clones at configure time when the source is
    not staged (FetchContent's GIT_REPOSITORY and GIT_TAG, copied from the project's CMake)."""

    repository: str      # https://github.com/oneapi-src/oneDNN.git
    ref: str             # a tag ('v3.13') or a full commit id


def github_base(environ: Mapping[str, str] | None = None) -> str:
    """Where https://github.com is fetched from: SERVEBENCH_GITHUB_URL if set (a site's mirror, or a
    test's server on 127.0.0.1), else GitHub itself."""
    environ = os.environ if environ is None else environ
    return (environ.get(GITHUB_URL_VARIABLE) or GITHUB).rstrip("/")


def github_mirror_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The git configuration, as environment variables (GIT_CONFIG_COUNT/KEY_n/VALUE_n, after any the
    environment already has), that makes every git clone of https://github.com/... go to the
    SERVEBENCH_GITHUB_URL base; empty without one. The probe and the build's configure-time fetch
    get the same variables, so the preflight checks the place the build will fetch from."""
    environ = os.environ if environ is None else environ
    base = github_base(environ)
    if base == GITHUB:
        return {}
    index = int(environ.get("GIT_CONFIG_COUNT") or 0)
    return {"GIT_CONFIG_COUNT": str(index + 1), f"GIT_CONFIG_KEY_{index}": f"url.{base}/.insteadOf",
            f"GIT_CONFIG_VALUE_{index}": f"{GITHUB}/"}


def fetch_url(repository: str, environ: Mapping[str, str] | None = None) -> str:
    """The URL git contacts for `repository` under the SERVEBENCH_GITHUB_URL base (for messages)."""
    prefix = f"{GITHUB}/"
    return f"{github_base(environ)}/{repository.removeprefix(prefix)}" if repository.startswith(prefix) else repository


def is_commit(ref: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{40}", ref) is not None


def probe_git(source: RemoteSource, timeout: float = PROBE_SECONDS,
              environ: Mapping[str, str] | None = None) -> tuple[bool, str]:
    """Whether git can reach `source` from this host, and what it saw: `git ls-remote --exit-code`
    of the tag (a commit id cannot be listed: then any ref of the repository, HEAD). Cheap (refs
    only, nothing cloned) and bounded: git runs in its own process group, killed whole (with its
    git-remote-https helper) when `timeout` passes; no credential prompt can wait for a user."""
    environ = dict(os.environ if environ is None else environ)
    url = fetch_url(source.repository, environ)
    git = shutil.which("git", path=environ.get("PATH"))
    if git is None:
        return False, f"git is not on PATH to fetch {url} (CMake's FetchContent clones with git)"
    env = environ | {"GIT_TERMINAL_PROMPT": "0", "GCM_INTERACTIVE": "never"} | github_mirror_env(environ)
    patterns = ["HEAD"] if is_commit(source.ref) else [source.ref, f"{source.ref}^{{}}"]   # a tag, and its commit
    process = subprocess.Popen([git, "ls-remote", "--exit-code", source.repository, *patterns], env=env,
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, start_new_session=True)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:   # it ended just now
            pass
        process.communicate()
        return False, f"{url} did not answer within {timeout:g} s"
    if process.returncode == 2:   # --exit-code: the repository answered, without that ref
        return False, f"{url} has no ref {source.ref}"
    if process.returncode != 0:
        reason = (err.strip().splitlines() or [f"git ls-remote exited {process.returncode}"])[-1]
        reason = re.sub(r"^fatal: (unable to access '[^']*': )?", "", reason)   # the URL is named already
        return False, f"{url} is not reachable ({reason[:200]})"
    if is_commit(source.ref):
        return True, f"{url} answers (commit {source.ref[:12]} is fetched by id, not listable in advance)"
    refs = [line.split("\t", 1) for line in out.splitlines() if "\t" in line]   # sha, ref name
    peeled = [sha for sha, ref in refs if ref.endswith("^{}")]                # an annotated tag's commit
    commit = (peeled or [sha for sha, _ in refs] or [""])[0]
    return True, f"{url} has {source.ref} (commit {commit[:12]})"


def fetchable_source(name: str, path: str | None, marker: str, remote: RemoteSource, fix: str,
                     timeout: float = PROBE_SECONDS) -> Prerequisite:
    """A source tree staged locally, or else one the build's CMake can fetch at configure time: met
    by a staged tree (no probe: an offline host never waits), else by `remote` answering git from
    this host. Refused only when neither, naming both the tree and the URL."""
    needed = f"a local source tree with {marker}, or {fetch_url(remote.repository)} {remote.ref} reachable with git"
    if staged(path, marker):
        return Prerequisite(name=name, met=True, found=str(path), needed=needed)
    not_staged = f"{path} has no {marker}" if path else "no local tree given"
    reachable, seen = probe_git(remote, timeout)
    if reachable:
        return Prerequisite(name=name, met=True, found=f"fetched at configure time: {seen}; {not_staged}",
                            needed=needed)
    return Prerequisite(name=name, met=False, found=f"{not_staged}, and {seen}", needed=needed,
                        fix=f"{fix}; or let this host reach it ({GITHUB_URL_VARIABLE} names a mirror of {GITHUB})")


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
