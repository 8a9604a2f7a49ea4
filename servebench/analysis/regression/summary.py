"""Findings as a reader wants them in the morning: a markdown list (the Prefect artifact) and
plain table rows (the CLI), alarms first, each with its engine version range, and for a regression
between two engine commits the `servebench bisect` command that finds the commit."""

from __future__ import annotations

import re
import shlex
from collections import Counter

from servebench.analysis.regression.detect import VERDICTS, SeriesVerdict
from servebench.analysis.regression.series import METRICS

COMMIT = re.compile(r"[0-9a-f]{7,40}")

ORDER = {("regression", "confirmed"): 0, ("regression", "suspected"): 1, ("improvement", "confirmed"): 2,
         ("improvement", "suspected"): 3, ("noisy", "noisy"): 4}
COLUMNS = ["night", "series", "metric", "kind", "status", "baseline", "value", "change", "p", "last good",
           "first bad", "engine versions"]


def sort_key(row: dict) -> tuple:
    return ORDER.get((row["kind"], row["status"]), 9), row["series_label"], row["metric"]


def version_range(row: dict) -> str:
    versions = row.get("engine_versions") or []
    if not versions:
        return row.get("engine_first_bad") or "?"
    return versions[0] if len(versions) == 1 else f"{versions[0]} .. {versions[-1]} ({len(versions)})"


def table_rows(rows: list[dict]) -> list[list[str]]:
    out = []
    for r in sorted(rows, key=sort_key):
        unit = METRICS[r["metric"]].unit if r["metric"] in METRICS else ""
        out.append([
            str(r["run_id"]), r["series_label"], r["metric"], r["kind"], r["status"],
            _num(r.get("baseline_value"), unit), _num(r.get("value"), unit),
            f"{r['change']:+.1%}" if r.get("change") is not None else "",
            f"{r['p_value']:.2g}" if r.get("p_value") is not None else "",
            str(r.get("last_good_run") or ""), str(r.get("first_bad_run") or ""), version_range(r),
        ])
    return out


def bisect_command(row: dict) -> str | None:
    """The bisect that chases a regression whose last good and first bad nights ran different commits
    of an engine built from git (engine versions are then commit hashes); None for any other finding.
    Its threshold is half the change found, so the bisect calls the commit bad that made it."""
    good, bad = row.get("engine_last_good"), row.get("engine_first_bad")
    if row.get("kind") != "regression" or not good or not bad or good == bad or row.get("metric") == "capacity":
        return None
    if not (COMMIT.fullmatch(good) and COMMIT.fullmatch(bad)):
        return None
    campaign = row.get("campaign_file") or f"campaigns/{row['campaign']}.yaml"
    threshold = max(0.02, round(abs(row.get("change") or 0.0) / 2, 3))
    point = f" --point {row['cell_point'].rsplit('.', 1)[-1]}" if row.get("cell_point") else ""
    return (f"servebench bisect {shlex.quote(campaign)} --good {good} --bad {bad} --mode {shlex.quote(row['mode'])}"
            f"{point} --metric {row['metric']} --threshold {threshold:g}")


def bisect_commands(rows: list[dict]) -> list[str]:
    """Each distinct bisect command of the findings, alarms first."""
    commands: list[str] = []
    for row in sorted(rows, key=sort_key):
        command = bisect_command(row)
        if command and command not in commands:
            commands.append(command)
    return commands


def verdict_counts(verdicts: list[SeriesVerdict]) -> str:
    """One line: how many series (and metrics) got each verdict, with what the history lacks where it does."""
    counts = Counter(v.verdict for v in verdicts)
    parts = [f"{counts[name]} {name}" for name in VERDICTS if counts[name]]
    short = [v for v in verdicts if v.verdict == "not enough history"]
    if short:
        has = min(v.nights for v in short)
        needs = max(v.nights_needed or 0 for v in short)
        repeats = sorted({v.repeats for v in short})
        parts[parts.index(f"{counts['not enough history']} not enough history")] += (
            f" (has {has} night{'s' if has != 1 else ''}, needs {needs} at "
            f"{'/'.join(map(str, repeats))} repeat{'s' if repeats != [1] else ''} a night)")
    return f"{len(verdicts)} series judged: " + (", ".join(parts) if parts else "none")


def markdown(rows: list[dict], run_id: str | None, verdicts: list[SeriesVerdict] | None = None) -> str:
    alarms = [r for r in rows if r["kind"] == "regression"]
    better = [r for r in rows if r["kind"] == "improvement"]
    noisy = [r for r in rows if r["kind"] == "noisy"]
    lines = [f"# servebench: regressions in run `{run_id}`" if run_id else "# servebench: regressions", ""]
    if verdicts is not None:
        lines += [verdict_counts(verdicts) + ".", ""]
    if not alarms and not better:
        short = verdicts is not None and any(v.verdict == "not enough history" for v in verdicts)
        lines.append("No regression and no improvement in any series"
                     + (" that has the history to judge." if short else "."))
    for title, group in (("Regressions", alarms), ("Improvements", better)):
        if not group:
            continue
        lines += ([] if lines[-1] == "" else [""]) + [f"## {title} ({len(group)})", "",
                  "| series | metric | status | baseline | tonight | change | p | engine versions |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in sorted(group, key=sort_key):
            unit = METRICS[r["metric"]].unit
            lines.append(f"| {r['series_label']} | {r['metric']} | {r['status']} | "
                         f"{_num(r['baseline_value'], unit)} | {_num(r['value'], unit)} | {r['change']:+.1%} | "
                         f"{r['p_value']:.2g} | {version_range(r)} (last good `{r['last_good_run']}`, "
                         f"first bad `{r['first_bad_run']}`) |")
    if noisy:
        lines += ["", f"{len(noisy)} series were too noisy tonight to test: "
                  + ", ".join(sorted({f"{r['series_label']} {r['metric']}" for r in noisy}))]
    if chase := bisect_commands(alarms):
        lines += ["", "## Find the commit", "", *(f"    {command}" for command in chase)]
    lines += ["", "Accept an intended change with `servebench annotate accept RUN --note ...`; "
                  "drop a bad night with `servebench annotate exclude RUN --note ...`."]
    return "\n".join(lines)


def _num(value, unit: str) -> str:
    if value is None:
        return ""
    return f"{value:.4g} {unit}".strip()
