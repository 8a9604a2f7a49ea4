"""The report's capacity section: each configuration's capacity under the SLO, the
Pareto chart (capacity against TPOT p50 at it) and, for a tuning run, the best configuration
against the default with the exact server commands of both. Reads only the warehouse."""

from __future__ import annotations

import html
import json
import shlex

import altair as alt

from servebench.warehouse import Connection, reads

LATENCY_NOTE = ("Latencies are measured from each request's scheduled send time, not from when it was "
                "sent: a generator or server that falls behind is charged for it (no coordinated omission).")


def capacity_rows(con: Connection, run_id: str) -> list[dict]:
    """The run's capacities with each configuration's server command and environment."""
    return reads.capacities(con, run_id)


def pareto_chart(found: list[dict], tuning: dict | None, width: int, height: int) -> alt.Chart | None:
    """Capacity against TPOT p50 at the capacity, one point per configuration; the Pareto front
    joined by a line, the default and the best labelled."""
    points = [dict(r, role=_role(r["mode"], tuning), on_front=r["mode"] in _front(tuning))
              for r in found if r["capacity"] is not None and r["tpot_p50_ms"] is not None]
    if not points:
        return None
    unit = "clients" if found[0]["search_over"] == "clients" else "req/s"
    data = alt.Data(values=json.loads(json.dumps(points, default=str)))
    base = alt.Chart(data).encode(
        x=alt.X("tpot_p50_ms:Q", title="TPOT p50 at the capacity [ms]", scale=alt.Scale(zero=False)),
        y=alt.Y("capacity:Q", title=f"capacity under the SLO [{unit}]"))
    dots = base.mark_point(size=80, filled=True).encode(
        color=alt.Color("role:N", title="configuration", scale=alt.Scale(
            domain=["default", "best", "default and best", "other"], range=["#888", "#d62728", "#d62728", "#1f77b4"])),
        tooltip=["mode:N", alt.Tooltip("capacity:Q", format=".3g"), alt.Tooltip("tpot_p50_ms:Q", format=".1f"),
                 "knobs:N"])
    front = base.transform_filter("datum.on_front").mark_line(strokeDash=[4, 3], color="#d62728")
    labels = base.mark_text(dx=8, dy=-8, fontSize=10, align="left").encode(text="mode:N")
    subtitle = "one point per configuration (mode x knob values)" + ("; dashed: the Pareto front" if tuning else "")
    return (dots + front + labels).properties(
        title=alt.TitleParams("Capacity vs TPOT per configuration", subtitle=subtitle), width=width, height=height)


def capacity_section(found: list[dict], tuning: dict | None) -> str:
    """The HTML: the SLO, the latency note, every configuration's capacity, and best vs default."""
    if not found:
        return ""
    unit = "clients" if found[0]["search_over"] == "clients" else "req/s"
    head = ("<tr><th>configuration</th><th>knobs</th><th>capacity</th><th>missed at</th><th>probes</th>"
            "<th>TPOT p50 (ms)</th><th>search</th></tr>")
    body = "".join(
        f"<tr><td>{html.escape(r['mode'])}</td><td>{html.escape(r['knobs'] or '-')}</td><td>{_num(r['capacity'])}</td>"
        f"<td>{_num(r['upper'])}</td><td>{r['probes']}</td><td>{_num(r['tpot_p50_ms'])}</td>"
        f"<td>{html.escape(r['why'] or '')}</td></tr>" for r in found)
    text = (f'<section id="capacity"><h2>Capacity under the SLO ({unit})</h2>'
            f"<p>SLO {html.escape(found[0]['slo'])}; a probe meets it only if it is also valid. "
            f"{LATENCY_NOTE}</p><table class=\"cells\">{head}{body}</table>")
    if tuning:
        text += best_versus_default(found, tuning)
    return text + "</section>"


def best_versus_default(found: list[dict], tuning: dict) -> str:
    """The tuner's verdict and the two configurations' exact server commands."""
    by_mode = {r["mode"]: r for r in found}
    ratio = "-" if tuning["ratio"] is None else (
        f"{tuning['ratio']:.2f}x (the probes' brackets allow {times(tuning['ratio_low'], 'unknown')} to "
        f"{times(tuning['ratio_high'])})")
    lines = [f"<h3>Best vs default</h3><p>{html.escape(tuning['why'] or '')}. Ratio {ratio}; "
             f"{tuning['configurations']} configurations, {tuning['launches']} server launches, "
             f"{tuning['probes']} probes. The default measured first: {_num(tuning.get('default_first'))}, "
             f"again after the others: {_num(tuning.get('default_again'))}.</p>"
             "<table class=\"cells\"><tr><th></th><th>configuration</th>"
             "<th>capacity</th><th>server command</th></tr>"]
    for label, mode in (("default", tuning["default_mode"]), ("best", tuning["best_mode"])):
        r = by_mode.get(mode or "", {})
        lines.append(f"<tr><td>{label}</td><td>{html.escape(mode or '-')}</td><td>{_num(r.get('capacity'))}</td>"
                     f"<td><code>{html.escape(server_command(r))}</code></td></tr>")
    return "".join(lines) + "</table>"


def server_command(row: dict) -> str:
    """`VAR=value ... argv` as the server was started (what to paste to serve the same way)."""
    if not row.get("command"):
        return "-"
    env = json.loads(row["env"]) if row.get("env") else {}
    return " ".join([f"{k}={shlex.quote(str(v))}" for k, v in sorted(env.items())] +
                    [shlex.quote(part) for part in row["command"]])


def tuning_row(con: Connection, run_id: str) -> dict | None:
    return reads.tuning(con, run_id)


def _front(tuning: dict | None) -> list[str]:
    return json.loads(tuning["pareto"]) if tuning and tuning.get("pareto") else []


def _role(mode: str, tuning: dict | None) -> str:
    if not tuning:
        return "other"
    default = mode in (tuning["default_mode"], tuning["default_mode"] + "-again")
    best = mode == tuning["best_mode"]
    return "default and best" if default and best else "default" if default else "best" if best else "other"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def times(ratio: float | None, unknown: str = "unbounded") -> str:
    """1.54 -> '1.54x'; None: a bound the probes did not give."""
    return unknown if ratio is None else f"{ratio:.2f}x"
