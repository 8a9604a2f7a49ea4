"""The test suite's nightly lane (docs/development.md, "Two lanes"): the tests marked `nightly`, which
the README's test command skips for time, run every night by the tests-nightly deployment."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from servebench.paths import CHECKOUT, runs_dir

NIGHTLY_ENV = "SERVEBENCH_NIGHTLY"


class NoTestSuite(RuntimeError):
    """The lane needs the checkout's tests and pytest: an installed wheel carries neither."""


@dataclass(frozen=True)
class LaneOutcome:
    exit_code: int
    summary: str      # pytest's last line: "N passed, M skipped in T s"
    log: str          # the whole output, a file under the runs directory


def lane_command(checkout: Path | None, marker: str = "nightly") -> list[str]:
    """pytest over the checkout's tests of one marker, skip reasons and the slowest tests printed."""
    if checkout is None or not (checkout / "tests").is_dir():
        raise NoTestSuite("the nightly test lane runs from a checkout (git clone, then pip install -e '.[test]'); "
                          "this servebench is installed without its tests")
    return [sys.executable, "-m", "pytest", "-m", marker, "-rs", str(checkout / "tests")]


def run_lane(marker: str = "nightly", checkout: Path | None = CHECKOUT) -> LaneOutcome:
    """Run the lane with SERVEBENCH_NIGHTLY=1, its output kept in runs/tests-<marker>-<UTC time>.log (a marker
    expression such as `nightly and not arm` in the name as `nightly-and-not-arm`)."""
    argv = lane_command(checkout, marker)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    log = runs_dir() / f"tests-{re.sub(r'[^A-Za-z0-9]+', '-', marker)}-{stamp}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        done = subprocess.run(argv, cwd=checkout, env=os.environ | {NIGHTLY_ENV: "1"}, stdout=out,
                              stderr=subprocess.STDOUT, check=False)
    lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    return LaneOutcome(exit_code=done.returncode, summary=lines[-1].strip("= ") if lines else "(no output)",
                       log=str(log))
