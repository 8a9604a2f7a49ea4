"""Packaging: the wheel is the product.

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_packaging.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from servebench import warehouse
from servebench.paths import CHECKOUT
from tests.support.packaging import build_wheel
from tests.support.prefect_session import session_api_url

CAMPAIGN = """
name: from-a-wheel
provider: {kind: plain, nodes: [{name: a, cpus: "0"}]}
engine: {kind: echo, token_delay_ms: 5}
model: {path: model}
modes: [{name: single}]
load: {clients: [1], requests: 6, input_len: 8, output_len: 8, client: {cpus: "1"}}
validity: {on_invalid: warn}   # this test is about what the wheel carries, not timing
"""


def fresh_venv(tmp_path: Path, wheel: Path) -> Path:
    """A new venv with the wheel installed (no editable link to the checkout). Its third-party
    dependencies are the project venv's, reached by a .pth line (a path on sys.path, whose own .pth
    files, the editable install's finder among them, are not run): the wheel's own content is what
    is tested, not PyPI's."""
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", str(wheel)], check=True, timeout=300)
    site = Path(subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True,
                               check=True).stdout.strip())
    (site / "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv


def test_the_installed_wheel_plans_and_runs_a_campaign_from_another_directory(tmp_path):
    venv = fresh_venv(tmp_path, build_wheel(tmp_path))
    work = tmp_path / "elsewhere"
    (work / "model").mkdir(parents=True)
    (work / "model" / "config.json").write_text(json.dumps(
        {"vocab_size": 500, "num_attention_heads": 4, "num_hidden_layers": 2}))
    (work / "campaign.yaml").write_text(CAMPAIGN)
    plugins = tmp_path / "plugins"   # the test-only engine and provider, without the rest of the checkout
    shutil.copytree(CHECKOUT / "tests" / "support", plugins / "tests" / "support",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (plugins / "tests" / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SERVEBENCH_RUNS", "SERVEBENCH_WAREHOUSE")}
    env |= {"SERVEBENCH_CACHE": str(tmp_path / "cache"), "PREFECT_API_URL": session_api_url()}

    def servebench(*args: str, plugged: bool = False) -> subprocess.CompletedProcess:
        extra = {"PYTHONPATH": str(plugins), "SERVEBENCH_PLUGINS": "tests.support.plugins"} if plugged else {}
        return subprocess.run([str(venv / "bin" / "servebench"), *args], cwd=work, env=env | extra,
                              capture_output=True, text=True, timeout=600)

    python = venv / "bin" / "python"
    found = subprocess.run([str(python), "-c", "import servebench.flows.campaign as c, servebench.paths as p; "
                            "print(c.__file__); print(p.CHECKOUT)"], cwd=work, env=env, capture_output=True,
                           text=True, check=True).stdout.split()
    assert found[0].startswith(str(venv)) and found[1] == "None", found
    for generic in ("flows", "tasks", "warehouse"):
        absent = subprocess.run([str(python), "-c", f"import {generic}"], cwd=work, env=env, capture_output=True,
                                text=True)
        assert absent.returncode != 0 and "ModuleNotFoundError" in absent.stderr, (generic, absent.stderr)

    listed = servebench("campaigns")
    assert listed.returncode == 0 and "smoke" in listed.stdout, listed.stdout + listed.stderr
    planned = servebench("plan", "smoke")   # a shipped campaign, by its name
    assert planned.returncode == 0 and "vllm" in planned.stdout, planned.stdout + planned.stderr
    missing = servebench("plan", "no-such-campaign")
    assert missing.returncode != 0 and "smoke" in missing.stderr, missing.stderr   # the error names what is shipped

    ran = servebench("run", "campaign.yaml", "--warehouse", str(work / "w.duckdb"), plugged=True)
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-3000:]
    assert [p.name for p in (work / "runs").iterdir()], "the run directory goes under the current directory"
    con = warehouse.connect(work / "w.duckdb", read_only=True)
    cells = con.execute("select cell_key, cells.status, completed, servebench_commit "
                        "from cells join runs using (run_id)").fetchall()
    con.close()
    assert [c[:3] for c in cells] == [("single.c1.r0", "completed", 6)], cells
    assert cells[0][3] == "servebench-campaigns 0.1.0", cells   # no checkout: the wheel's version
