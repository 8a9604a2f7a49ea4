"""An engine's source as a git repository and a commit: what a commit axis and `servebench bisect`
build.

The repository is a local path (used in place, never changed) or a URL git can clone (mirrored once
into `<cache>/sources/git/`, fetched again only when a commit is not there yet). A revision (branch,
tag, short or full hash) is resolved to its full commit hash, which is the source digest of the
build key: a branch that moves builds anew, the same commit reuses the cache wherever it came from.
The tree is taken with `git archive`, so a build never sees a work tree's uncommitted changes.
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

from servebench.builds.venv import BuildError
from servebench.offline import offline, refuse_download


class GitError(BuildError):
    """A repository or revision git cannot give; the message names it."""


def _git(args: list[str], cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise GitError(f"git {' '.join(args)}: {(done.stderr or done.stdout).strip()[-400:]}")
    return done


def is_local(repo: str) -> bool:
    return "://" not in repo and not repo.startswith("git@")


def repository(repo: str, cache: Path) -> Path:
    """The directory git runs in: the local repository itself, or the cache's mirror of a URL."""
    if is_local(repo):
        path = Path(repo).expanduser()
        if not path.is_absolute():
            raise GitError(f"git repository {repo}: give an absolute path (or a URL)")
        if not path.exists():
            raise GitError(f"git repository {repo}: no such directory")
        top = _git(["rev-parse", "--show-toplevel"], cwd=path, check=False)
        if top.returncode != 0:
            raise GitError(f"git repository {repo}: not a git repository")
        if Path(top.stdout.strip()).resolve() != path.resolve():
            raise GitError(f"git repository {repo}: a folder inside the repository {top.stdout.strip()}; give "
                           "the repository itself (and `subdir:` for the CMake project inside it)")
        return path
    mirror = cache / "sources" / "git" / hashlib.sha256(repo.encode()).hexdigest()[:16]
    if not mirror.exists():
        refuse_download(f"the git repository {repo}")
        mirror.parent.mkdir(parents=True, exist_ok=True)
        _git(["clone", "--mirror", "--quiet", repo, str(mirror)])
    return mirror


_FETCHED: set[str] = set()   # URL mirrors fetched by this process


def resolve(repo: str, revision: str, cache: Path) -> str:
    """The full commit hash of a revision. A URL's mirror is fetched once per process before a
    branch or tag is resolved (tonight's `main` is tonight's, not the first clone's); a full hash it
    already has needs no fetch."""
    where = repository(repo, cache)
    full_hash = len(revision) == 40 and all(c in "0123456789abcdef" for c in revision)
    found = _git(["rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"], cwd=where, check=False)
    if not is_local(repo) and repo not in _FETCHED and not (full_hash and found.returncode == 0) \
            and not (offline() and found.returncode == 0):  # offline: the mirror's branch as last fetched
        refuse_download(f"commit {revision!r} of {repo}")
        _git(["fetch", "--quiet", "--prune", "origin"], cwd=where)
        _FETCHED.add(repo)
        found = _git(["rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}"], cwd=where, check=False)
    if found.returncode != 0:
        raise GitError(f"git repository {repo}: no commit {revision!r}")
    return found.stdout.strip()


def commits_between(repo: str, good: str, bad: str, cache: Path) -> list[str]:
    """[good, ..., bad]: the first-parent path from a good commit to a bad one, oldest first (what a
    bisect searches; merged branches count as their merge commit)."""
    where = repository(repo, cache)
    good_sha, bad_sha = resolve(repo, good, cache), resolve(repo, bad, cache)
    if good_sha == bad_sha:
        raise GitError(f"--good and --bad are the same commit ({good_sha[:12]})")
    if _git(["merge-base", "--is-ancestor", good_sha, bad_sha], cwd=where, check=False).returncode != 0:
        raise GitError(f"{good} ({good_sha[:12]}) is not an ancestor of {bad} ({bad_sha[:12]}) in {repo}")
    path = _git(["rev-list", "--first-parent", "--ancestry-path", "--reverse", f"{good_sha}..{bad_sha}"],
                cwd=where).stdout.split()
    first_parent = _git(["rev-parse", f"{path[0]}^1"], cwd=where, check=False).stdout.strip() if path else ""
    if not path or path[-1] != bad_sha or first_parent != good_sha:
        raise GitError(f"{good} ({good_sha[:12]}) is not on the first-parent line of {bad} ({bad_sha[:12]}) in "
                       f"{repo}: it came in through a merge; give that merge commit (or its first parent) as --good")
    return [good_sha, *path]


def subject(repo: str, commit: str, cache: Path) -> str:
    """The commit's first line, for humans."""
    return _git(["log", "-1", "--format=%s", commit], cwd=repository(repo, cache)).stdout.strip()


def archive(repo: str, commit: str, cache: Path, into: Path) -> Path:
    """The commit's tree as `<into>/<commit>.tar`, its top directory `src/` (every commit unpacks to
    the same paths, so ccache reuses whatever a commit did not change). Made in the build's scratch
    directory and gone with it: the commit is the source, git keeps it."""
    into.mkdir(parents=True, exist_ok=True)
    target = into / f"{commit}.tar"
    _git(["archive", "--format=tar", "--prefix=src/", "-o", str(target), commit], cwd=repository(repo, cache))
    return target
