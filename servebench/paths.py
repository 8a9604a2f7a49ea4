"""Where servebench keeps things that are not committed: caches, run directories."""

from __future__ import annotations

import json
import os
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
# the distribution's name on PyPI (pyproject.toml): `servebench` there is an unrelated load tester
DISTRIBUTION = "servebench-campaigns"


def _checkout() -> Path | None:
    """The source checkout servebench runs from (an editable install, or the tree itself), or
    None for an installed wheel: then what a run reads that is not Python comes from the
    package's `_shipped/` (pyproject.toml maps engine_side/ and campaigns/ there)."""
    root = PACKAGE_DIR.parent
    return root if (root / "pyproject.toml").is_file() and (root / "flows").is_dir() else None


CHECKOUT = _checkout()


def shipped(name: str) -> Path:
    """A top-level folder of the checkout that a run reads (`engine_side`, `campaigns`), wherever it is installed."""
    return CHECKOUT / name if CHECKOUT else PACKAGE_DIR / "_shipped" / name


def home() -> Path:
    """Where runs/ (and the default warehouse in it) and prefect.yaml are: the checkout, or for an
    installed wheel the current directory."""
    return CHECKOUT or Path.cwd()


ENGINE_SOURCE_DIR = shipped("engine_side")


def cache_dir() -> Path:
    """Engine venvs and generated models: SERVEBENCH_CACHE, else $XDG_CACHE_HOME/servebench."""
    explicit = os.environ.get("SERVEBENCH_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "servebench"


def runs_dir() -> Path:
    """Per-run directories (server logs, load results): SERVEBENCH_RUNS, else runs/ under `home()`."""
    return Path(os.environ.get("SERVEBENCH_RUNS") or home() / "runs")


def default_warehouse() -> Path:
    """SERVEBENCH_WAREHOUSE, else runs/servebench.duckdb under `home()`: beside the run directories,
    never in the warehouse/ package (schema and migrations only); runs/ is ignored by git."""
    return Path(os.environ.get("SERVEBENCH_WAREHOUSE") or home() / "runs" / "servebench.duckdb")


def keep_json(path: Path, value: object) -> None:
    """`value` as JSON at `path`, whole or not at all (written beside it, then renamed): a reader of a cache
    never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(path.name + ".tmp")
    scratch.write_text(json.dumps(value, sort_keys=True))
    scratch.rename(path)
