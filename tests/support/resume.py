"""What tests/e2e/test_resume.py and tests/nightly/test_resume.py share."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from servebench.providers import node_tools, run_tag
from servebench.providers.this_host import scratch_path

SUPERSEDED = re.compile(r"\.attempt\d+\.json$")  # an invalid measurement taken again (validity.retries)


def results(tmp_path: Path, part: str = "") -> list[Path]:
    """The current result files of the cells measured so far (whose name has `part`), of every run
    under tmp_path: not the attempts a cell's measuring again superseded (`<key>.attempt<N>.json`),
    which would count one cell twice."""
    return [path for path in (tmp_path / "runs").glob("*/cells/*.json")
            if not SUPERSEDED.search(path.name) and part in path.name]


@contextmanager
def nothing_left(tmp_path: Path) -> Iterator[list[subprocess.Popen]]:
    """Processes the test starts go in the list. On the way out, a failed assertion included: each
    still running is killed with its process group, and whatever a run under tmp_path left (every
    process carrying its tag: servers, node samplers, the scraper; its scratch directory) is stopped
    and removed, as a resume would have, so a test failing before its resume leaves nothing behind."""
    started: list[subprocess.Popen] = []
    try:
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait(timeout=30)  # not its pipe: a server the run left may hold it until stopped below
        for run_dir in (tmp_path / "runs").glob("*"):
            node_tools.stop_marked(f"{run_tag(run_dir.name)}.", grace_s=5.0)
            shutil.rmtree(scratch_path(run_tag(run_dir.name)), ignore_errors=True)
