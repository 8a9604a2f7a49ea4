"""Two campaigns that want the same nodes never share them: each run holds its claims.

A claim names something a run must have to itself: a CPU of this host (the local provider's
nodes, the load generator's own CPUs), a CPU of an ssh host. Each is an exclusive `flock` on
a file in the machine's claims directory (SERVEBENCH_CLAIMS, default /tmp/servebench-claims),
held from before the nodes are allocated until they are released; the kernel drops it when
the holder dies, so a killed campaign never blocks the next. A run that finds a claim taken
says which run holds it and waits. Slurm's controller arbitrates its own nodes: no claims.
Releasing a claim removes its file (testbed hosts get new addresses every time, so files kept
would pile up in /tmp); only a killed holder's file stays, for the next holder to take and remove.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from servebench.waiting import poll

CLAIMS_VARIABLE = "SERVEBENCH_CLAIMS"
POLL_S = 0.5


def claims_dir() -> Path:
    return Path(os.environ.get(CLAIMS_VARIABLE) or "/tmp/servebench-claims")


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
    directory.mkdir(parents=True, exist_ok=True)
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
        file = open(path, "a+")

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
    file.seek(0)
    file.truncate()
    file.write(json.dumps(holder) + "\n")
    file.flush()
    return file


def _still_named(file: TextIO) -> bool:
    """Whether the claim's path still names this open file (not removed, nor made again by another run)."""
    try:
        return os.stat(file.name).st_ino == os.fstat(file.fileno()).st_ino
    except FileNotFoundError:
        return False


def _remove_if_still_named(file: TextIO) -> None:
    if _still_named(file):
        try:
            os.unlink(file.name)
        except FileNotFoundError:
            pass


def _file_name(name: str) -> str:
    """Readable, and unique even where two names sanitize alike."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)[:80]
    return f"{readable}-{hashlib.sha256(name.encode()).hexdigest()[:8]}.claim"
