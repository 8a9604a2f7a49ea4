"""Every run of the warehouse at a glance (`servebench runs --html`, and `runs/index.html`, which
every run writes again after its report): newest first, each with its campaign, start (UTC),
status, cells valid of all, a headline figure, a link to its report and the verdict of
`servebench compare` against the campaign's previous run.

The headline is the best mode's median output throughput at the highest load point a mode met the
campaign's SLO at (`servebench.analysis.best.best_per_point`; with no SLO, every valid cell counts):
closed-loop points before open-loop ones, as a run with both is read. The comparison is per mode:
`worse` when some figure of the mode got significantly worse and none better (`better` the other
way, `mixed` both), else `within noise`. One page, its style inline, nothing fetched.
"""

from __future__ import annotations

import html
import json
import os
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

from servebench.analysis.best import PointBest, best_per_point
from servebench.analysis.regression.compare import Delta, compare_runs
from servebench.analysis.regression.history import point_values
from servebench.analysis.regression.series import cell_point
from servebench.warehouse import Connection
from servebench.warehouse.history import point_cells, run_spec, runs_for_index

# the order a comparison names its modes in: what a reader must see first
VERDICT_ORDER = ("worse", "mixed", "better", "within noise", "untested")


class ModeChange(BaseModel):
    """One mode's verdict against the previous run, with how many of its figures said what."""

    mode: str
    verdict: str                      # worse | better | mixed | within noise | untested
    counts: dict[str, int]            # compare's verdicts over the mode's (load point, metric) pairs

    @property
    def detail(self) -> str:
        """' (12 of 25 figures)' for worse or better; '' otherwise."""
        if self.verdict not in ("worse", "better"):
            return ""
        return f" ({self.counts[self.verdict]} of {sum(self.counts.values())} figures)"


class IndexEntry(BaseModel):
    run_id: str
    campaign: str
    started_at: datetime
    status: str
    cells: int
    cells_valid: int
    headline: str | None              # '101 tok/s, tp1 at 8 clients'
    report: str | None                # the run's report.html (None: not written)
    previous: str | None              # the campaign's previous finished run
    changes: list[ModeChange]         # against it, worst first

    @property
    def comparison(self) -> str:
        """'vs r0: tp2-ray worse (12 of 25 figures), tp1 within noise'."""
        if self.previous is None:
            return "first run of the campaign"
        if not self.changes:
            return f"vs {self.previous}: no load point both measured validly"
        return f"vs {self.previous}: " + ", ".join(f"{c.mode} {c.verdict}{c.detail}" for c in self.changes)


def index_entries(con: Connection) -> list[IndexEntry]:
    """Every run, newest first, with its headline and its comparison with the campaign's previous run."""
    found = runs_for_index(con)
    entries = []
    for index, run in enumerate(found):
        previous = previous_in(found, index)
        cells = point_cells(con, run["run_id"])
        entries.append(IndexEntry(
            run_id=run["run_id"], campaign=run["campaign"], started_at=run["started_at"], status=run["status"],
            cells=run["cells"], cells_valid=run["cells_valid"],
            headline=headline(best_per_point(cells, run_slo(con, run["run_id"]))),
            report=str(Path(run["run_dir"]) / "report.html") if run["run_dir"] else None,
            previous=previous if run["status"] != "running" and run["cells"] else None,
            changes=mode_changes(con, previous, run["run_id"], cells) if previous and run["cells"] else []))
    return entries


def previous_in(found: list[dict], index: int) -> str | None:
    """The campaign's finished run with cells started last before `found[index]` (`found`: newest first)."""
    campaign = found[index]["campaign"]
    return next((older["run_id"] for older in found[index + 1:]
                 if older["campaign"] == campaign and older["status"] != "running" and older["cells"]), None)


def run_slo(con: Connection, run_id: str) -> dict[str, float]:
    """The SLO of the campaign as the run had it (its `slo:` block; empty: none)."""
    spec = run_spec(con, run_id)
    data = json.loads(spec) if isinstance(spec, str) else spec or {}
    return {key: float(limit) for key, limit in (data.get("slo") or {}).items()}


def headline(points: list[PointBest]) -> str | None:
    """The best mode's throughput at the highest load point where one met the SLO."""
    met = [point for point in points if point.best is not None and point.throughput is not None]
    closed = [point for point in met if "client" in point.load]
    top = (closed or met)[-1] if met else None
    return None if top is None else f"{top.throughput:.4g} tok/s, {top.best} at {top.load}"


def mode_changes(con: Connection, previous: str, run_id: str, cells: list[dict]) -> list[ModeChange]:
    """`servebench compare previous run_id`, summed up per mode."""
    deltas = compare_runs(point_values(con, previous), point_values(con, run_id))
    return summarize(deltas, {cell_point(cell["cell_key"]): cell["mode"] for cell in cells})


def summarize(deltas: list[Delta], mode_of: dict[str, str]) -> list[ModeChange]:
    counts: dict[str, Counter[str]] = {}
    for delta in deltas:
        mode = mode_of.get(delta.point, delta.point.split(".")[0])
        counts.setdefault(mode, Counter())[delta.verdict] += 1
    changes = []
    for mode, said in counts.items():
        worse, better = said["worse"] > 0, said["better"] > 0
        verdict = ("mixed" if worse and better else "worse" if worse else "better" if better
                   else "untested" if set(said) == {"untested"} else "within noise")
        changes.append(ModeChange(mode=mode, verdict=verdict, counts=dict(said)))
    return sorted(changes, key=lambda change: (VERDICT_ORDER.index(change.verdict), change.mode))


def write_index(con: Connection, path: Path) -> Path:
    """The index page of every run at `path` (its directory made), replaced whole: two runs ending
    together each leave a complete page; the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    partial.write_text(render_index(index_entries(con), path.parent))
    os.replace(partial, path)
    return path


STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}
th,td{padding:.35em .7em;border-bottom:1px solid #ddd;text-align:left;vertical-align:top}th{background:#f4f4f4}
td.n{text-align:right;font-variant-numeric:tabular-nums}.worse{color:#b00020;font-weight:600}
.better{color:#1b7f1b;font-weight:600}.mixed{color:#a05a00;font-weight:600}.muted{color:#777}
.completed{color:#1b7f1b}.failed,.invalid,.interrupted{color:#b00020}.partial,.running{color:#a05a00}"""
COLUMNS = ("run", "campaign", "started (UTC)", "status", "cells valid", "headline", "report",
           "against the campaign's previous run")


def render_index(entries: list[IndexEntry], where: Path) -> str:
    """The page: one row a run, links relative to `where` (the page's directory) where they can be."""
    rows = "\n".join(entry_row(entry, where) for entry in entries) or \
        f'<tr><td colspan="{len(COLUMNS)}" class="muted">no run in the warehouse</td></tr>'
    head = "".join(f"<th>{html.escape(name)}</th>" for name in COLUMNS)
    return (f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>servebench runs</title>'
            f"<style>{STYLE}</style></head><body>\n<h1>servebench runs</h1>\n"
            f'<p class="muted">{len(entries)} runs, newest first. Headline: the best mode\'s median output '
            "throughput at the highest load point a mode met the campaign's SLO at. The comparison is "
            "<code>servebench compare PREVIOUS RUN</code> summed up per mode: worse or better where a figure "
            "changed significantly, else within noise.</p>\n"
            f"<table><thead><tr>{head}</tr></thead><tbody>\n{rows}\n</tbody></table>\n</body></html>\n")


def entry_row(entry: IndexEntry, where: Path) -> str:
    escape = html.escape
    started = entry.started_at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M")
    report = entry.report and Path(entry.report)
    link = (f'<a href="{escape(relative_href(report, where))}">report</a>' if report and report.is_file()
            else f'<span class="muted">not written (servebench report --run {escape(entry.run_id)})</span>')
    if entry.previous is None or not entry.changes:
        comparison = f'<span class="muted">{escape(entry.comparison)}</span>'
    else:
        said = ", ".join(f'{escape(change.mode)} <span class="{change.verdict.replace(" ", "-")}">'
                         f"{escape(change.verdict)}</span>{escape(change.detail)}" for change in entry.changes)
        comparison = (f'<span title="{escape(entry.comparison)}">vs {escape(entry.previous)}: {said}</span>'
                      f'<br><code class="muted">servebench compare {escape(entry.previous)} '
                      f"{escape(entry.run_id)}</code>")
    cells = (f"<td>{escape(entry.run_id)}</td><td>{escape(entry.campaign)}</td><td>{started}</td>"
             f'<td class="{escape(entry.status)}">{escape(entry.status)}</td>'
             f'<td class="n">{entry.cells_valid} of {entry.cells}</td>'
             f"<td>{escape(entry.headline or '-')}</td><td>{link}</td><td>{comparison}</td>")
    return f"<tr>{cells}</tr>"


def relative_href(target: Path, where: Path) -> str:
    """The link from a page in `where` to `target`: relative where both lie on one file system
    root, else the target's file URI."""
    try:
        return Path(os.path.relpath(target.resolve(), where.resolve())).as_posix()
    except ValueError:  # another drive
        return target.resolve().as_uri()
