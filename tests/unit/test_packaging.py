"""Packaging: the wheel is the product.

A wheel built from the checkout carries everything a run reads (the Prefect layers and the
warehouse's migrations inside the `servebench` namespace, the engine-side package that goes into
engine venvs, the shipped campaigns, the source build's patches) and installs no generic top-level
name (`flows`, `tasks`, `warehouse`). The end-to-end test installs it into a fresh venv, in a
directory that is not the checkout, and plans a shipped campaign by its name and runs a campaign
with the test-only echo engine there.
"""

from __future__ import annotations

import tomllib
import zipfile
from pathlib import Path

from servebench.paths import CHECKOUT
from tests.support.packaging import build_wheel

PYPROJECT = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["tool"]["setuptools"]


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


def test_the_distribution_name_is_the_one_pyproject_declares():
    from servebench.paths import DISTRIBUTION

    assert tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]["name"] == DISTRIBUTION
