"""The load generator as a tree of its own, for a client node that has no servebench.

A campaign may run its load generator on a node (`load.client.node`). That node gets the
engine build (its python is the project's interpreter version, already checked to run there)
and this tree: the generator's source (`servebench/load`, `servebench/cpus.py`) and the
third-party packages it imports, copied file by file from the project's own environment
(nothing downloaded, the very versions the orchestrator runs). It runs as
`PYTHON -S -m servebench.load.on_node` with the tree as PYTHONPATH: `-S` keeps the engine's
site-packages out, so the generator on the node is the generator here. Cached by content.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import re
import shutil
from pathlib import Path

LOAD_SOURCES = ("servebench/__init__.py", "servebench/cpus.py", "servebench/load")
LOAD_DISTRIBUTIONS = ("pydantic", "orjson", "uvloop", "httptools", "prometheus_client")
IMPORT_CHECK = "import servebench.load.on_node, servebench.load.runner"


def requirement_closure(names: tuple[str, ...]) -> list[str]:
    """The distributions `names` need, transitively (extras and absent optional ones left out)."""
    seen: dict[str, None] = {}
    todo = list(names)
    while todo:
        name = _canonical(todo.pop())
        if name in seen:
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            raise RuntimeError(f"the load generator needs {name!r}, which is not installed in "
                               "servebench's environment") from None
        seen[name] = None
        for requirement in dist.requires or []:
            spec, _, marker = requirement.partition(";")
            if "extra" in marker:
                continue
            found = re.match(r"[A-Za-z0-9_.-]+", spec.strip())
            if found is None:
                raise RuntimeError(f"{name!r} has a requirement without a name: {requirement!r}")
            wanted = found.group(0)
            if marker.strip() and not _installed(wanted):
                continue  # an optional one for another platform or Python
            todo.append(wanted)
    return sorted(seen)


def tree_files(project_dir: Path, distributions: list[str]) -> dict[str, Path]:
    """Relative path in the tree -> the file it is copied from."""
    files: dict[str, Path] = {}
    for source in LOAD_SOURCES:
        path = project_dir / source
        for found in ([path] if path.is_file() else sorted(path.rglob("*.py"))):
            files[str(found.relative_to(project_dir))] = found
    for name in distributions:
        dist = importlib.metadata.distribution(name)
        for entry in dist.files or []:
            relative = str(entry)
            if relative.startswith("..") or "__pycache__" in relative or relative.endswith(".pyc"):
                continue  # scripts outside site-packages; bytecode is made where it runs
            located = Path(str(dist.locate_file(entry)))  # typed as a SimplePath, which has no __fspath__
            if located.is_file():
                files[relative] = located
    return files


def load_generator_tree(cache: Path, project_dir: Path) -> Path:
    """The tree under `cache/tools`, named by the digest of what is in it (made once)."""
    files = tree_files(project_dir, requirement_closure(LOAD_DISTRIBUTIONS))
    digest = hashlib.sha256()
    for relative in sorted(files):
        digest.update(relative.encode() + b"\0" + files[relative].read_bytes() + b"\0")
    target = cache / "tools" / f"load-generator-{digest.hexdigest()[:16]}"
    if not target.is_dir():
        scratch = target.with_name(target.name + ".tmp")
        shutil.rmtree(scratch, ignore_errors=True)
        for relative, source in files.items():
            (scratch / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, scratch / relative)
        scratch.rename(target)
    return target


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed(name: str) -> bool:
    try:
        importlib.metadata.distribution(name)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False
