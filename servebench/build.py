"""The engine venv: created with pip (not uv: only pip finds the local CPU torch wheel),
cached under a content key of everything that goes into it.

The key covers the Python version, the platform, the pinned packages and the source of
servebench's engine-side package; when it matches, the venv is reused as is. A venv is
usable only once its marker file is written, so an interrupted build is redone.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from pydantic import BaseModel

from servebench.engines import get_engine
from servebench.paths import ENGINE_SOURCE_DIR
from servebench.spec import EngineSpec, sha256_json

MARKER = "servebench-build.json"
_SOURCE_SUFFIXES = {".py", ".json", ".txt"}


class EngineBuild(BaseModel):
    key: str
    engine: str
    engine_version: str
    packages: list[str]
    python_version: str
    platform: str
    venv_path: str
    pip_freeze: str
    build_seconds: float | None  # None: reused from the cache
    created_at: datetime

    @property
    def python(self) -> str:
        return str(Path(self.venv_path) / "bin" / "python")


class BuildError(Exception):
    pass


def engine_source_files(directory: Path = ENGINE_SOURCE_DIR) -> list[Path]:
    """The engine-side package's source: its pyproject and the package tree (no build output)."""
    package = [p for p in (directory / "servebench_engine").rglob("*")
               if p.is_file() and p.suffix in _SOURCE_SUFFIXES and "__pycache__" not in p.parts]
    return [directory / "pyproject.toml", *sorted(package)]


def source_digest(directory: Path = ENGINE_SOURCE_DIR) -> str:
    """Hash of the engine-side source files, names and contents."""
    digest = hashlib.sha256()
    for path in engine_source_files(directory):
        digest.update(str(path.relative_to(directory)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def build_inputs(spec: EngineSpec) -> dict:
    engine = get_engine(spec.kind)
    return {
        "engine": spec.kind,
        "python": platform.python_version(),
        "platform": f"{sys.platform}-{platform.machine()}",
        "packages": engine.requirements(spec),
        "removed": engine.remove_after_install(),
        "post_install": [argv[1:] for argv in engine.post_install("python", spec)],
        "engine_source": source_digest(),
    }


def build_key(spec: EngineSpec) -> str:
    return f"{spec.kind}-{sha256_json(build_inputs(spec))[:16]}"


def ensure_engine_venv(spec: EngineSpec, cache: Path, log: Callable[[str], None] = print) -> EngineBuild:
    """Return the engine venv for this spec, building it first if no valid one is cached."""
    key = build_key(spec)
    venv = cache / "engines" / key
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another campaign may be building the same venv
        marker = venv / MARKER
        if marker.exists():
            build = EngineBuild.model_validate_json(marker.read_text())
            return build.model_copy(update={"build_seconds": None})
        if venv.exists():
            log(f"removing incomplete engine venv {venv}")
            shutil.rmtree(venv)
        started = time.monotonic()
        build = _build(spec, key, venv, log)
        build = build.model_copy(update={"build_seconds": round(time.monotonic() - started, 1)})
        marker.write_text(build.model_dump_json(indent=2))
        return build


def _build(spec: EngineSpec, key: str, venv: Path, log: Callable[[str], None]) -> EngineBuild:
    engine = get_engine(spec.kind)
    log_path = venv.parent / f"{key}.build.log"
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    steps = [
        ("create venv", [sys.executable, "-m", "venv", str(venv)]),
        ("install engine packages", [*pip, "install", *engine.requirements(spec)]),
        ("remove broken companions", [*pip, "uninstall", "-y", *engine.remove_after_install()]),
    ]
    with open(log_path, "w") as out, tempfile.TemporaryDirectory() as scratch:
        # pip builds in the source tree; a copy keeps build output out of the checkout
        source = Path(scratch) / "engine"
        for path in engine_source_files():
            target = source / path.relative_to(ENGINE_SOURCE_DIR)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
        steps.append(("install servebench-engine",
                      [*pip, "install", "--no-deps", "--no-build-isolation", str(source)]))
        steps += [(f"post-install: {' '.join(argv[1:4])}", argv) for argv in engine.post_install(python, spec)]
        for title, argv in steps:
            log(f"engine build {key}: {title}")
            out.write(f"$ {' '.join(argv)}\n")
            out.flush()
            result = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            if result.returncode != 0:
                raise BuildError(f"engine build step '{title}' failed (exit {result.returncode}); see {log_path}")
    freeze = subprocess.run([*pip, "freeze"], capture_output=True, text=True, check=True).stdout
    distribution = engine.version_distribution(spec)
    version = subprocess.run(
        [python, "-c", f"import importlib.metadata as m; print(m.version({distribution!r}))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    inputs = build_inputs(spec)
    return EngineBuild(
        key=key, engine=spec.kind, engine_version=version, packages=inputs["packages"],
        python_version=inputs["python"], platform=inputs["platform"], venv_path=str(venv),
        pip_freeze=freeze, build_seconds=None, created_at=datetime.now(timezone.utc),
    )
