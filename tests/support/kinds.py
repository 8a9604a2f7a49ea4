"""Each test's kind is its folder: tests/unit/ (logic, files, DuckDB: seconds, no server), tests/e2e/ (a
campaign flow, an engine server, the testbed, a browser), tests/nightly/ (the nightly lane). The folder gives
the `e2e` marker, so `-m "not e2e"` is the unit run; a marker that says otherwise is refused at collection, so a
slow test cannot hide in the unit folder nor a nightly one in the test command's e2e folder."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePosixPath

KINDS = ("unit", "e2e", "nightly")
HEAVY_MARKS = frozenset({"vllm", "llamacpp", "testbed", "root", "arm", "browser"})  # what starts a real stack


def kind_of(relative_path: str) -> str | None:
    """The kind of a test file from its path under tests/ (`unit/test_x.py` -> unit); None outside a kind folder."""
    parts = PurePosixPath(relative_path).parts
    return parts[0] if len(parts) > 1 and parts[0] in KINDS else None


def kind_problem(relative_path: str, marks: Iterable[str]) -> str | None:
    """Why a test's markers disagree with its folder, or None."""
    marks = set(marks)
    kind = kind_of(relative_path)
    if kind is None:
        return f"tests/{relative_path}: a test lives in tests/unit/, tests/e2e/ or tests/nightly/"
    if kind == "unit" and marks & (HEAVY_MARKS | {"e2e", "nightly"}):
        found = ", ".join(sorted(marks & (HEAVY_MARKS | {"e2e", "nightly"})))
        return (f"tests/{relative_path}: marked {found}, so it belongs in tests/e2e/ (or tests/nightly/), "
                "not tests/unit/")
    if kind == "e2e" and "nightly" in marks:
        return f"tests/{relative_path}: marked nightly, so it belongs in tests/nightly/"
    if kind == "nightly" and "nightly" not in marks:
        return f"tests/{relative_path}: in tests/nightly/ without @pytest.mark.nightly(reason=...)"
    return None
