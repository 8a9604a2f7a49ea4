"""`servebench plan` and `build --dry-run` in a network namespace of their own (`unshare -n`: no interface
but a loopback that is down), with an empty cache: the real cut, for the child processes too. A llama.cpp
campaign, whose build needs an sdist that is not fetched yet, plans with exit 0 and its dry run names what
`servebench build` will fetch; nothing lands in the cache."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.root]
SCALE = str(Path(__file__).parents[2] / "campaigns" / "scale.yaml")


def test_plan_and_dry_run_in_a_namespace_without_network(tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        reason = "unshare -n needs root and util-linux's unshare"
        print(f"skipped: {reason}")
        pytest.skip(reason)
    env = {**os.environ, "SERVEBENCH_CACHE": str(tmp_path / "cache")}
    cli = [sys.executable, "-m", "servebench"]
    plan = subprocess.run(["unshare", "-n", *cli, "plan", SCALE], capture_output=True, text=True,
                          env=env, timeout=120)
    assert plan.returncode == 0, plan.stderr[-2000:]
    assert "<no key until servebench build fetches its source>" in plan.stdout
    dry = subprocess.run(["unshare", "-n", *cli, "build", "--dry-run", SCALE], capture_output=True,
                         text=True, env=env, timeout=120)
    assert "Traceback" not in dry.stderr, dry.stderr[-2000:]
    assert "the sdist llama-cpp-python==" in dry.stdout and "fetches it" in dry.stdout, dry.stdout
    assert not (tmp_path / "cache" / "sources").exists()
