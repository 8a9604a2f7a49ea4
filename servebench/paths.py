"""Where servebench keeps things that are not committed: caches, run directories."""

from __future__ import annotations

import os
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[1]
ENGINE_SOURCE_DIR = PROJECT_ROOT / "engine"


def cache_dir() -> Path:
    """Engine venvs and generated models: SERVEBENCH_CACHE, else $XDG_CACHE_HOME/servebench."""
    explicit = os.environ.get("SERVEBENCH_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "servebench"


def runs_dir() -> Path:
    """Per-run directories (server logs, load results): SERVEBENCH_RUNS, else runs/ in the project."""
    return Path(os.environ.get("SERVEBENCH_RUNS") or PROJECT_ROOT / "runs")
