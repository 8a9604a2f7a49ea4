"""What tests/unit/test_packaging.py and tests/e2e/test_packaging.py share."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from servebench.paths import CHECKOUT

# what the wheel is built from: the folders pyproject.toml maps, nothing else of the checkout
WHEEL_SOURCES = ["pyproject.toml", "README.md", "servebench", "flows", "tasks", "warehouse", "engine_side", "campaigns"]


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
