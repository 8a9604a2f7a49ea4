"""Packaging: the wheel is the product.

A wheel built from the checkout carries everything a run reads (the Prefect layers and the
warehouse's migrations inside the `servebench` namespace, the engine-side package that goes into
engine venvs, the shipped campaigns, the source build's patches) and installs no generic top-level
name (`flows`, `tasks`, `warehouse`). The end-to-end test installs it into a fresh venv, in a
directory that is not the checkout, and plans a shipped campaign by its name and runs a campaign
with the test-only echo engine there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from servebench import warehouse
from servebench.paths import CHECKOUT
from tests.support.prefect_session import session_api_url

PYPROJECT = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["tool"]["setuptools"]
# what the wheel is built from: the folders pyproject.toml maps, nothing else of the checkout
WHEEL_SOURCES = ["pyproject.toml", "README.md", "servebench", "flows", "tasks", "warehouse", "engine_side", "campaigns"]


def tree_packages() -> set[str]:
    """Every Python package of the folders pyproject.toml installs, by its installed name."""
    roots = {"servebench": "servebench", **{folder: name for name, folder in PYPROJECT["package-dir"].items()}}
    found = set()
    for folder, name in roots.items():
        found.add(name)
        for init in (CHECKOUT / folder).rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                found.add(".".join([name, *init.parent.relative_to(CHECKOUT / folder).parts]))
    return found


def test_pyproject_lists_every_package_of_the_tree():
    """A package missing from the list would be missing from the wheel (and only from the wheel:
    the editable install finds it anyway)."""
    assert set(PYPROJECT["packages"]) == tree_packages()


def test_a_shipped_campaign_is_named_without_a_directory_and_a_path_that_exists_wins(tmp_path, monkeypatch):
    from servebench.campaign.loading import campaign_path

    shipped = CHECKOUT / "campaigns" / "smoke.yaml"
    monkeypatch.chdir(tmp_path)
    assert campaign_path("smoke") == campaign_path("smoke.yaml") == shipped
    assert campaign_path("nope") == Path("nope") and campaign_path("dir/smoke.yaml") == Path("dir/smoke.yaml")
    (tmp_path / "smoke.yaml").write_text("name: mine")
    assert campaign_path("smoke.yaml") == Path("smoke.yaml")   # the user's own file, not the shipped one


CAMPAIGN = """
name: from-a-wheel
provider: {kind: plain, nodes: [{name: a, cpus: "0"}]}
engine: {kind: echo, token_delay_ms: 5}
model: {path: model}
modes: [{name: single}]
load: {clients: [1], requests: 6, input_len: 8, output_len: 8, client: {cpus: "1"}}
validity: {on_invalid: warn}   # this test is about what the wheel carries, not timing
"""


def build_wheel(tmp_path: Path) -> Path:
    """The wheel, built from a copy of the folders it is made of (setuptools writes build/ and
    egg-info beside its source: never in the checkout)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in WHEEL_SOURCES:
        copy = shutil.copytree if (CHECKOUT / name).is_dir() else shutil.copy2
        copy(CHECKOUT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                                 if copy is shutil.copytree else {}))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist"), str(source)], check=True, timeout=300)
    (wheel,) = (tmp_path / "dist").glob("servebench_campaigns-*.whl")
    return wheel


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


def test_the_wheel_carries_what_a_run_reads_and_no_generic_top_level_name(tmp_path):
    names = zipfile.ZipFile(build_wheel(tmp_path)).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"servebench"}, tops
    for needed in ["servebench/flows/campaign.py", "servebench/tasks/land.py",
                   "servebench/warehouse/schema.sql", "servebench/warehouse/migrations/001_init.sql",
                   "servebench/warehouse/views/cell_kv.sql",
                   "servebench/_shipped/engine_side/pyproject.toml",
                   "servebench/_shipped/engine_side/servebench_engine/dist_alias.py",
                   "servebench/_shipped/campaigns/smoke.yaml", "servebench/_shipped/campaigns/data/mooncake-200.jsonl",
                   "servebench/engines/vllm/patches/gcc-12.2-x86.patch"]:
        assert needed in names, needed
    for folder in ("migrations", "views"):
        sql = {p.name for p in (CHECKOUT / "warehouse" / folder).glob("*.sql")}
        assert {Path(n).name for n in names if n.startswith(f"servebench/warehouse/{folder}/")} == sql, folder


@pytest.mark.e2e
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


def test_the_distribution_name_is_the_one_pyproject_declares():
    from servebench.paths import DISTRIBUTION

    assert tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["name"] == DISTRIBUTION
