"""The project's text speaks to its users: no issue numbers, no work diary, no seed studies, no local paths and no
dates of work in code, comments, docstrings, test docstrings, campaign comments or docs.

A rule is what a reader can rely on; an anecdote ("measured this morning on this machine") is not, and a
maintainer cannot tell which still holds. Measured numbers live in docs as tables whose rows name the command
and the machine's own figures; a date is allowed only there, in a table row. Upstream projects' issues
(vLLM's, llama.cpp's, Ray's, ...) are cited by their project's name and stay allowed.
"""

from __future__ import annotations

import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# what a user or a maintainer reads: the code, its tests, the campaigns, the warehouse's SQL and the docs
SCOPE = ["servebench", "warehouse", "flows", "tasks", "engine_side", "campaigns", "tests", "benchmarks", "docs",
         "README.md", "prefect.yaml", "pyproject.toml"]
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".sql", ".toml", ".sh", ".txt"}
SKIPPED_FOLDERS = {"__pycache__", "data", ".venv", "runs"}   # tests/data: recorded streams, a server's own words

# an upstream project's issue, cited by its name just before the number
UPSTREAM = re.compile(r"(?:vllm|llama\.cpp|ggml|ray|prefect|duckdb|pytorch|torch|slurm|qemu|altair|vega|pydantic|pip)"
                      r"(?:'s)?(?: own)?[ -]$", re.IGNORECASE)
# each rule: a name a failure prints and the pattern it looks for anywhere in a file's text
EVERYWHERE: dict[str, re.Pattern[str]] = {
    "issue number": re.compile(r"\b[Ii]ssues? #?\d+"),
    "seed study": re.compile(r"\b[Ss]eeds? 0\d\d\b"),
    "work diary": re.compile(
        r"\b(?:this|earlier|previous|last|next|later|\d+(?:st|nd|rd|th)|first|second|third|\w+-(?:first|second|third|"
        r"\w+th)) session(?:'s)?\b(?! of)"
        r"|\bthe brief\b|\bthis machine\b|\bthis (?:morning|afternoon|evening)\b|\byesterday\b|\bsession note\b",
        re.IGNORECASE),
    "local path": re.compile(r"(?<![\w.~])/work/\w"),
}
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")


def files() -> list[Path]:
    found = []
    for entry in SCOPE:
        path = ROOT / entry
        candidates = [path] if path.is_file() else sorted(path.rglob("*"))
        for candidate in candidates:
            parts = set(candidate.relative_to(ROOT).parts)
            if candidate.is_file() and candidate.suffix in SUFFIXES and not parts & SKIPPED_FOLDERS:
                found.append(candidate)
    return found


def python_prose(text: str) -> list[tuple[int, str]]:
    """(line, text) of a module's comments and docstrings: where a date would be one of work, not data."""
    prose: list[tuple[int, str]] = []
    previous = tokenize.INDENT
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            prose.append((token.start[0], token.string))
        elif token.type == tokenize.STRING and previous in (tokenize.INDENT, tokenize.NEWLINE, tokenize.DEDENT,
                                                            tokenize.NL):
            prose.extend((token.start[0] + offset, line) for offset, line in enumerate(token.string.splitlines()))
        if token.type not in (tokenize.COMMENT, tokenize.NL):
            previous = token.type
    return prose


def date_lines(path: Path, text: str) -> list[tuple[int, str]]:
    """The lines of a file where a date may not stand: its prose outside a measured table's rows."""
    lines = list(enumerate(text.splitlines(), start=1))
    if path.suffix == ".py":
        return python_prose(text)
    if path.suffix == ".md":
        return [(number, line) for number, line in lines if not line.lstrip().startswith("|")]
    comment = "--" if path.suffix == ".sql" else "#"
    return [(number, line[line.index(comment):]) for number, line in lines if comment in line]


def findings(path: Path, text: str) -> list[str]:
    """Every place of one file's text that reads as a development log, as `path:line: rule: text`."""
    name = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for rule, pattern in EVERYWHERE.items():
            for match in pattern.finditer(line):
                if rule == "issue number" and UPSTREAM.search(line[:match.start()]):
                    continue
                found.append(f"{name}:{number}: {rule}: {match.group(0)!r} in {line.strip()[:100]!r}")
                break
    for number, line in date_lines(path, text):
        match = DATE.search(line)
        if match:
            found.append(f"{name}:{number}: date of work: {match.group(0)!r} in {line.strip()[:100]!r}")
    return found


def test_the_tree_reads_as_a_product_not_a_log():
    found = [finding for path in files() if path != Path(__file__).resolve()
             for finding in findings(path, path.read_text(errors="replace"))]
    assert not found, f"{len(found)} places read as a development log:\n" + "\n".join(found)


PLANTED = {
    "issue number": ('"""' + "Issue 14: the layers." + '"""\n', ".py"),
    "seed study": ("# the knee of seed 002\n", ".yaml"),
    "work diary": ("Measured on this machine in the twenty-fifth session.\n", ".md"),
    "local path": ("clone it to /work/ci25w first\n", ".md"),
    "date of work": ("def f():\n    return 1   # fixed on 2026-11-29\n", ".py"),
}


@pytest.mark.parametrize("rule", sorted(PLANTED))
def test_a_planted_line_is_found(rule, tmp_path):
    text, suffix = PLANTED[rule]
    found = findings(tmp_path / f"planted{suffix}", text)
    assert any(f": {rule}: " in finding for finding in found), found


@pytest.mark.parametrize("text, suffix", [
    ("vLLM issue 39781 pins an engine process to CPU 0\n", ".md"),           # an upstream project's issue
    ("see llama.cpp's issue 18626\n", ".md"),
    ("| 2026-11-29 | `servebench run campaigns/smoke.yaml` | 224 s |\n", ".md"),   # a measured table's date column
    ('help = "nights since: 2026-11-01, or 7d"\n', ".py"),                 # a date as an example value, not prose
    ("sessions: 1-8 multi-turn sessions at once\n", ".yaml"),
    ("    with session(path) as con:   # the warehouse's session\n", ".py"),
])
def test_what_stays_allowed(text, suffix, tmp_path):
    assert findings(tmp_path / f"allowed{suffix}", text) == []
