"""The engine venv: created with pip (not uv: only pip finds the local CPU torch wheel),
cached under a content key of everything that goes into it.

The key covers the Python version, the platform, the pinned packages and the source of
servebench's engine-side package; when it matches, the venv is reused as is. A venv is
usable only once its marker file is written, so an interrupted build is redone.

A first build takes minutes, so every step's output streams into the build log as it comes
and is condensed for the `log` callback: pip's milestones (installing / installed counts,
errors) at once, and a heartbeat with the last output line whenever a step is quiet.
"""

from __future__ import annotations

import hashlib
import os
import platform
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any, Callable

from pydantic import BaseModel

from servebench.builds.cache import ArtifactCache, file_sha256
from servebench.builds.recipe import VenvRecipe
from servebench.config.campaign import sha256_json
from servebench.paths import ENGINE_SOURCE_DIR

_SOURCE_SUFFIXES = {".py", ".json", ".txt"}
HEARTBEAT_SECONDS = 30.0  # the longest a build stays silent on the `log` callback


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
    inputs: dict = {}            # everything the key covers (CMake flags, CPU flags, ...)
    tool_version: str | None = None  # the built tool's own account (llama.cpp: version, commit, compiler)

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


def uses_pip(recipe: VenvRecipe) -> bool:
    """Whether a build step runs pip (else the venv is made without it)."""
    return bool(recipe.packages or recipe.local_wheels or recipe.remove or recipe.engine_package)


def build_inputs(recipe: VenvRecipe) -> dict:
    """Everything that goes into the venv; its hash is the build key."""
    inputs: dict[str, Any] = {
        "engine": recipe.engine,
        "python": platform.python_version(),
        "platform": f"{sys.platform}-{platform.machine()}",
        "packages": list(recipe.packages),
        "removed": list(recipe.remove),
        "post_install": [list(args) for args in recipe.post_install],
        "engine_source": source_digest(),
    }
    if not recipe.engine_package:  # servebench's engine-side package is not in it: its source is not an input
        inputs["engine_package"] = False
        del inputs["engine_source"]
    if not uses_pip(recipe):  # no pip in the venv either
        inputs["pip"] = False
    # only when set, so the keys of recipes without them (vLLM's) stay what they were
    for name in ("pip_options", "build_env", "host_cpu_flags"):
        if value := getattr(recipe, name):
            inputs[name] = value
    if recipe.local_wheels:  # a wheel built here is in the key by its content, not by where it lies
        inputs["local_wheels"] = {Path(wheel).name: file_sha256(Path(wheel)) for wheel in recipe.local_wheels}
    if recipe.built_from:
        inputs["built_from"] = recipe.built_from
    return inputs



def build_key(recipe: VenvRecipe) -> str:
    return f"{recipe.engine}-{sha256_json(build_inputs(recipe))[:16]}"


def ensure_build(recipe: VenvRecipe, cache: Path, log: Callable[[str], None] = print) -> EngineBuild:
    """Return the engine venv for this recipe, building it first if no valid one is cached."""
    key = build_key(recipe)
    artifact = ArtifactCache(cache / "engines")
    found = artifact.get(key)
    if found is not None:
        return _reused(recipe, found)
    with artifact.building(key, log) as (venv, found):
        if found is not None:
            return _reused(recipe, found)
        started = time.monotonic()
        build = _build(recipe, key, venv, artifact.log_path(key), log)
        build = build.model_copy(update={"build_seconds": round(time.monotonic() - started, 1)})
        artifact.complete(key, build.model_dump_json(indent=2))
    return build


def _reused(recipe: VenvRecipe, record: str) -> EngineBuild:
    """A cached build (a record without `inputs` and `tool_version` gets them filled in)."""
    build = EngineBuild.model_validate_json(record).model_copy(update={"build_seconds": None})
    if not build.inputs:
        build = build.model_copy(update={"inputs": build_inputs(recipe)})
    if build.tool_version is None and recipe.version_command:
        build = build.model_copy(update={"tool_version": tool_version(Path(build.venv_path), recipe.version_command)})
    return build


def tool_version(venv: Path, command: list[str]) -> str | None:
    """The output of the recipe's version command (its first word relative to the venv)."""
    return command_text([str(venv / command[0]), *command[1:]])


def command_text(argv: list[str], timeout: float = 120) -> str | None:
    """What a command prints (stdout and stderr), on one line; None if it cannot run."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return " ".join((done.stdout + done.stderr).split()) or None


def build_steps(recipe: VenvRecipe, venv: Path, engine_source: Path) -> list[tuple[str, list[str]]]:
    """The build's commands in order (title, argv), each run with `recipe.build_env` on top of the
    environment; `servebench build --dry-run` prints them. `engine_source`: where the copy of the
    engine-side package is (pip builds in the source tree: a copy keeps build output out of the checkout)."""
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    # a venv no step installs into is made without pip: ensurepip is nearly all of such a build's time (8 s)
    bare = [] if uses_pip(recipe) else ["--without-pip"]
    steps = [("create venv", [sys.executable, "-m", "venv", *bare, str(venv)])]
    if recipe.packages:
        steps.append(("install engine packages", [*pip, "install", *recipe.pip_options, *recipe.packages]))
    if recipe.local_wheels:  # its requirements are among the packages: installed as built, nothing resolved again
        steps.append(("install the built wheel", [*pip, "install", "--no-deps", *recipe.local_wheels]))
    if recipe.remove:
        steps.append(("remove broken companions", [*pip, "uninstall", "-y", *recipe.remove]))
    if recipe.engine_package:
        steps.append(("install servebench-engine",
                      [*pip, "install", "--no-deps", "--no-build-isolation", str(engine_source)]))
    return steps + [(f"post-install: {' '.join(args[:3])}", [python, *args]) for args in recipe.post_install]


def _build(recipe: VenvRecipe, key: str, venv: Path, log_path: Path, log: Callable[[str], None]) -> EngineBuild:
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    with open(log_path, "w") as out, tempfile.TemporaryDirectory() as scratch:
        source = Path(scratch) / "engine"
        if recipe.engine_package:
            for path in engine_source_files():
                target = source / path.relative_to(ENGINE_SOURCE_DIR)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
        steps = build_steps(recipe, venv, source)
        started = time.monotonic()
        for title, argv in steps:
            log(f"engine build {key}: {title}")
            returncode = run_step(argv, out, log, title, started, env=recipe.build_env)
            if returncode != 0:
                raise BuildError(f"engine build step '{title}' failed (exit {returncode}); see {log_path}")
    freeze = subprocess.run([*pip, "freeze"], capture_output=True, text=True).stdout if recipe.packages else ""
    inputs = build_inputs(recipe)
    return EngineBuild(
        key=key, engine=recipe.engine, engine_version=_version(python, recipe.version_distribution),
        packages=inputs["packages"], python_version=inputs["python"], platform=inputs["platform"],
        venv_path=str(venv), pip_freeze=freeze, build_seconds=None, created_at=datetime.now(timezone.utc),
        inputs=inputs, tool_version=tool_version(venv, recipe.version_command) if recipe.version_command else None,
    )


def _version(python: str, distribution: str | None) -> str:
    """The engine version: its distribution's, or the venv's Python version for an engine without one."""
    code = ("import importlib.metadata as m; print(m.version(%r))" % distribution if distribution
            else "import platform; print(platform.python_version())")
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


class PipDigest:
    """pip's output condensed: a vLLM install prints hundreds of lines, of which a reader of a
    CI log or the live display needs the milestones, the errors, and how far resolution got."""

    def __init__(self) -> None:
        self.collected = 0
        self.last = ""

    def feed(self, line: str) -> str | None:
        """Take one output line; return the condensed line to report now, if any."""
        line = line.strip()
        if not line:
            return None
        self.last = line
        if line.startswith("Collecting "):
            self.collected += 1
        elif line.startswith("Installing collected packages:"):
            return f"pip: installing {len(line.split(':', 1)[1].split(','))} packages"
        elif line.startswith("Successfully installed "):
            return f"pip: installed {len(line.split()) - 2} packages"
        elif line.startswith(("Successfully uninstalled ", "ERROR:")):
            return f"pip: {line}"
        return None

    def heartbeat(self, title: str, elapsed: float) -> str:
        collected = f", packages collected: {self.collected}" if self.collected else ""
        last = self.last if len(self.last) <= 120 else self.last[:119] + "…"
        return f"still building: {elapsed:.0f} s (step '{title}'{collected}); last output: {last or '(none yet)'}"


def run_step(argv: list[str], out: IO[str], log: Callable[[str], None], title: str, started: float,
             heartbeat: float = HEARTBEAT_SECONDS, env: dict[str, str] | None = None) -> int:
    """Run one build command: its output goes to `out` line by line as it comes (tail -f works),
    condensed lines and heartbeats go to `log`, all from this thread. Return the exit code."""
    out.write("".join(f"{name}={value} " for name, value in (env or {}).items()) + f"$ {' '.join(argv)}\n")
    out.flush()
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               text=True, errors="replace",
                               env={**os.environ, **(env or {}), "PYTHONUNBUFFERED": "1"})  # lines as they happen
    try:
        _relay(process, out, log, title, started, heartbeat)
        return process.wait()
    except BaseException:  # Ctrl-C or an error here: no pip left running on its own
        process.kill()
        process.wait()
        raise


def _relay(process: subprocess.Popen, out: IO[str], log: Callable[[str], None], title: str, started: float,
           heartbeat: float) -> None:
    """A reader thread only queues lines, so the wait for the next line can time out into a
    heartbeat, and `log` is never called from another thread."""
    lines: queue.Queue[str | None] = queue.Queue()
    threading.Thread(target=_read_lines, args=(process.stdout, lines), daemon=True).start()
    digest = PipDigest()
    next_beat = time.monotonic() + heartbeat
    while True:
        try:
            line = lines.get(timeout=max(0.0, next_beat - time.monotonic()))
        except queue.Empty:
            log(digest.heartbeat(title, time.monotonic() - started))
            next_beat = time.monotonic() + heartbeat
            continue
        if line is None:
            return
        out.write(line)
        out.flush()
        if (condensed := digest.feed(line)) is not None:
            log(condensed)


def _read_lines(stream: IO[str], lines: queue.Queue) -> None:
    with stream:
        for line in stream:
            lines.put(line)
    lines.put(None)
