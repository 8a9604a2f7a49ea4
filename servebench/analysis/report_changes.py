"""What a run's report says of it against its history, below the summary: the regression verdict of every
series the run measured (counted, and each one that found a change or could not judge listed with why) and
`servebench compare` against the campaign's previous finished run, per load point and metric.

The verdicts are computed again from the warehouse at the campaign's detection settings, as `servebench
regressions` does; the comparison is the one `servebench runs --html` sums up per mode, here in full."""

from __future__ import annotations

import html
from collections.abc import Sequence

from servebench.analysis.regression.compare import Delta, compare_runs, side_text
from servebench.analysis.regression.detect import SeriesVerdict
from servebench.analysis.regression.history import point_values, run_settings, run_verdicts
from servebench.analysis.regression.series import cell_point
from servebench.analysis.regression.summary import verdict_counts
from servebench.analysis.runs_index import previous_in
from servebench.warehouse import Connection
from servebench.warehouse.history import run_series_points, runs_for_index

LISTED = ("regression", "improvement", "too noisy", "not enough history")  # verdicts the table names one by one


def previous_run(con: Connection, run_id: str) -> str | None:
    """The campaign's finished run with cells started last before this one, or None."""
    found = runs_for_index(con)  # newest first
    mine = next((index for index, run in enumerate(found) if run["run_id"] == run_id), None)
    return None if mine is None else previous_in(found, mine)


def verdicts_html(verdicts: Sequence[SeriesVerdict], point_of: dict[str, str]) -> str:
    """The counts line, then one row per series and metric whose verdict is not `no change`."""
    listed = sorted((v for v in verdicts if v.verdict in LISTED),
                    key=lambda v: (LISTED.index(v.verdict), point_of.get(v.series_id, v.series_id), v.metric))
    head = f'<h2 id="regressions">Regressions</h2><p>{html.escape(verdict_counts(list(verdicts)))}.</p>'
    if not listed:
        return head
    rows = "".join(
        f'<tr><td>{html.escape(point_of.get(v.series_id, v.series_id))}</td><td>{html.escape(v.metric)}</td>'
        f'<td>{html.escape(v.verdict)}</td><td>{v.nights}</td><td>{html.escape(verdict_why(v))}</td></tr>'
        for v in listed)
    return (head + '<table class="cells"><tr><th>load point</th><th>metric</th><th>verdict</th>'
            f'<th>nights</th><th>why</th></tr>{rows}</table>')


def verdict_why(verdict: SeriesVerdict) -> str:
    """What a reader needs beside the verdict: the nights a short history needs, or the detector's detail."""
    if verdict.verdict == "not enough history" and verdict.nights_needed:
        return f"needs {verdict.nights_needed} nights at {verdict.repeats} repeat(s) a night"
    return verdict.detail


def comparison_html(previous: str | None, run_id: str, deltas: Sequence[Delta]) -> str:
    """`servebench compare previous run_id` as a table, worse and better first."""
    head = '<h2 id="previous-run">Against the previous run</h2>'
    if previous is None:
        return head + "<p>The campaign's first finished run: nothing to compare with.</p>"
    command = f"servebench compare {previous} {run_id}"
    if not deltas:
        return head + f"<p>{html.escape(previous)} and this run share no measured load point.</p>"
    order = {"worse": 0, "better": 1, "within noise": 2, "same": 3, "untested": 4}
    rows = "".join(
        f'<tr><td>{html.escape(d.point)}</td><td>{html.escape(d.metric)}</td>'
        f'<td>{html.escape(side_text(d.a, d.cv_a, d.interval_a))}</td>'
        f'<td>{html.escape(side_text(d.b, d.cv_b, d.interval_b))}</td><td>{d.change:+.1%}</td>'
        f'<td class="{"miss" if d.verdict == "worse" else ""}">{html.escape(d.verdict)}</td></tr>'
        for d in sorted(deltas, key=lambda d: (order.get(d.verdict, 9), d.point, d.metric)))
    return (head + f"<p>Run {html.escape(previous)} (A) against this one (B): <code>{html.escape(command)}</code>. "
            "A, B: median of repeats ±CV [bootstrap 95% interval]; within noise: no significant change and the "
            "intervals overlap; untested: one repeat on a side.</p>"
            '<table class="cells"><tr><th>load point</th><th>metric</th><th>A</th><th>B</th><th>change</th>'
            f"<th>verdict</th></tr>{rows}</table>")


def history_section(con: Connection, run_id: str) -> str:
    """The regressions' verdicts and the comparison with the previous run, as HTML."""
    point_of = {row["series_id"]: cell_point(row["cell_key"]) for row in run_series_points(con, run_id)}
    verdicts = run_verdicts(con, run_id, run_settings(con, run_id))
    previous = previous_run(con, run_id)
    deltas = compare_runs(point_values(con, previous), point_values(con, run_id)) if previous else []
    return verdicts_html(verdicts, point_of) + comparison_html(previous, run_id, deltas)
