"""Two campaigns that want the same nodes never share them: each run holds its claims.

A claim names something a run must have to itself: a CPU of this host (the local provider's
nodes, the load generator's own CPUs), a CPU of an ssh host. Each is an exclusive `flock` on
a file in the claims directory, held from before the nodes are allocated until they are released;
the kernel drops it when the holder dies, so a killed campaign never blocks the next. A run that
finds a claim taken says which run holds it and waits. Slurm's controller arbitrates its own nodes:
no claims. Releasing a claim removes its file (testbed hosts get new addresses every time, so files
kept would pile up in /tmp); only a killed holder's file stays, for the next holder to take and remove.

The directory is shared by other users of the host, so nothing in it is trusted (docs/security.md):
- which directory: SERVEBENCH_CLAIMS if set; else /tmp/servebench-claims when it is root's and sticky
  like /tmp (root makes it so; every user's runs then arbitrate one host's CPUs), else a directory of
  the user's own, /tmp/servebench-claims-<uid>, mode 0700;
- a directory is used only if it is a real directory (not a link) owned by the user or by root, and
  sticky where others may write to it: its owner could otherwise remove anyone's claims;
- a claim file is opened without following links (O_NOFOLLOW) and must be a regular file with one
  link; it is truncated and removed only by its owner. A link planted by another user is refused,
  never followed: a run cannot be made to truncate a file of its user's.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import math
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from servebench.waiting import poll

CLAIMS_VARIABLE = "SERVEBENCH_CLAIMS"
SHARED_DIR = Path("/tmp/servebench-claims")
POLL_S = 0.5


class ClaimsError(RuntimeError):
    """A claims directory or file another user could turn against the run: refused, with what to do."""


def claims_dir() -> Path:
    """Where this user's runs keep their claims (the module's docstring says which and why)."""
    if os.environ.get(CLAIMS_VARIABLE):
        return Path(os.environ[CLAIMS_VARIABLE])
    if os.geteuid() == 0:
        return SHARED_DIR
    try:
        shared = os.lstat(SHARED_DIR)
    except FileNotFoundError:
        shared = None
    if shared is not None and stat.S_ISDIR(shared.st_mode) and shared.st_uid == 0 and shared.st_mode & stat.S_ISVTX:
        return SHARED_DIR
    return Path(f"{SHARED_DIR}-{os.geteuid()}")


def ensure_claims_dir(directory: Path) -> None:
    """Make the directory if it is missing (shared and sticky as root's /tmp/servebench-claims, else private),
    then refuse it unless no other user can remove or replace what a run puts there."""
    shared = directory == SHARED_DIR and os.geteuid() == 0
    try:
        directory.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    info = os.lstat(directory)
    if shared and stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and stat.S_IMODE(info.st_mode) != 0o1777:
        os.chmod(directory, 0o1777)       # root's: every user's runs arbitrate the host's CPUs there
        info = os.lstat(directory)
    owner = _user_name(info.st_uid)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ClaimsError(f"claims directory {directory} is not a directory of its own (a link or a file, owned by "
                          f"{owner}): remove it, or set {CLAIMS_VARIABLE} to a directory of yours")
    if info.st_uid not in (0, os.geteuid()):
        raise ClaimsError(f"claims directory {directory} is owned by user {owner}, not by you or root: its owner "
                          f"could remove your claims. Ask {owner} to remove it, or set {CLAIMS_VARIABLE} to a "
                          "directory of yours")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not info.st_mode & stat.S_ISVTX:
        raise ClaimsError(f"claims directory {directory} may be written by other users (mode "
                          f"{stat.S_IMODE(info.st_mode):o}) and is not sticky: any of them could remove your claims. "
                          f"chmod +t {directory} (or o-w), or set {CLAIMS_VARIABLE} to a directory of yours")


def _user_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def this_host_cpu_claims(cpus) -> list[str]:
    return [f"this-host/cpu{cpu}" for cpu in sorted(set(cpus))]


@dataclass
class HeldClaims:
    """The claims a run holds (their open, locked files); `release` gives them back."""

    names: list[str]
    files: list[TextIO] = field(default_factory=list)

    def release(self) -> None:
        for file in self.files:
            _remove_if_still_named(file)  # while locked: a waiter then sees the path name no file, or another
            file.close()  # closing drops the flock
        self.files.clear()


def hold(names: list[str], holder: dict, say: Callable[[str], None] = print) -> HeldClaims:
    """Take every claim (in sorted order, so two runs never hold one each of two they both want),
    waiting for a taken one and saying once who holds it."""
    directory = claims_dir()
    ensure_claims_dir(directory)
    held = HeldClaims(sorted(set(names)))
    try:
        for name in held.names:
            held.files.append(_take(directory / _file_name(name), name, holder, say))
    except BaseException:
        held.release()
        raise
    return held


def _take(path: Path, name: str, holder: dict, say: Callable[[str], None]) -> TextIO:
    told = False
    while True:
        file = _open_claim(path)

        def taken() -> bool:
            nonlocal told
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                if not told:
                    file.seek(0)
                    say(f"waiting for {name}: held by {file.read().strip() or 'another run'}")
                    told = True
                return False

        poll(taken, math.inf, interval_s=POLL_S)
        if _still_named(file):
            break
        file.close()  # its holder released it and removed the file meanwhile: the claim is the path's file now
    if _owned(file):      # another user's file (its holder was killed) is held by its lock alone
        file.seek(0)
        file.truncate()
        file.write(json.dumps(holder) + "\n")
        file.flush()
    return file


def _open_claim(path: Path) -> TextIO:
    """The claim's file, never through a link: O_NOFOLLOW, then a regular file with one name. Another user's
    file (left by their killed run) is opened read-only: a lock needs no more."""
    def no_links(name: str, flags: int) -> int:
        return os.open(name, flags | os.O_NOFOLLOW | (os.O_CREAT if flags & os.O_RDWR else 0), 0o644)

    try:
        try:
            file = open(path, "r+", opener=no_links)
        except PermissionError:
            file = open(path, "r", opener=no_links)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            planter = _user_name(os.lstat(path).st_uid)
            raise ClaimsError(f"claim file {path} is a symbolic link (made by {planter}): refused, never "
                              "followed; remove it") from None
        raise
    info = os.fstat(file.fileno())
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        file.close()
        raise ClaimsError(f"claim file {path} is not a plain file of one name (owned by {_user_name(info.st_uid)}, "
                          f"{info.st_nlink} links): refused; remove it")
    return file


def _owned(file: TextIO) -> bool:
    return os.fstat(file.fileno()).st_uid == os.geteuid() and file.writable()


def _still_named(file: TextIO) -> bool:
    """Whether the claim's path still names this open file (not removed, nor made again by another run)."""
    try:
        return os.stat(file.name).st_ino == os.fstat(file.fileno()).st_ino
    except FileNotFoundError:
        return False


def _remove_if_still_named(file: TextIO) -> None:
    if _still_named(file) and _owned(file):
        try:
            os.unlink(file.name)
        except FileNotFoundError:
            pass


def _file_name(name: str) -> str:
    """Readable, and unique even where two names sanitize alike."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80]
    return f"{readable}-{hashlib.sha256(name.encode()).hexdigest()[:8]}.claim"
