"""The report's "engines side by side" section (a campaign with `engines:`): each engine's modes on
the same nodes, model shape and load, in one figure style: output throughput against TTFT
and TPOT, one line per mode through its request rates (open loop) or client counts (closed loop),
the engine told by the line's dash; and a table of the same numbers.

Only for a run whose servers were of more than one engine; a run of one engine has the usual
per-mode charts."""

from __future__ import annotations

import html
import json

import altair as alt

from servebench.analysis.charts import load_point_label
from servebench.warehouse import Connection, reads

LATENCIES = (("ttft_p50_ms", "TTFT p50 [ms]"), ("tpot_p50_ms", "TPOT p50 [ms]"))


def engine_cells(con: Connection, run_id: str) -> list[dict]:
    """The run's completed cells with the engine that served them; [] for a run of one engine."""
    found = reads.engine_cells(con, run_id)
    return found if len({c["engine"] for c in found}) > 1 else []


def engines_chart(cells: list[dict], width: int, height: int) -> alt.TopLevelMixin | None:
    if not cells:
        return None
    points = [{**c, "load": c["offered_rate"] if c["offered_rate"] is not None else c["clients"],
               "load_point": load_point_label(c),
               "series": f"{c['engine']} {c['mode']}"} for c in cells]
    panels = []
    for field, label in LATENCIES:
        base = alt.Chart(alt.Data(values=json.loads(json.dumps(points, default=str))))
        line = base.mark_line(point=True).encode(
            x=alt.X(f"{field}:Q", title=label), y=alt.Y("output_throughput:Q", title="output throughput [tok/s]"),
            color=alt.Color("series:N", title="engine, mode"), strokeDash=alt.StrokeDash("engine:N", title="engine"),
            order="load:Q",
            tooltip=["engine:N", "mode:N", alt.Tooltip("load_point:N", title="load point"),
                     alt.Tooltip("output_throughput:Q", format=".1f"), alt.Tooltip(f"{field}:Q", format=".1f")])
        labels = base.mark_text(dx=8, dy=-6, fontSize=10).encode(
            x=f"{field}:Q", y="output_throughput:Q", text="load_point:N", color="series:N")
        panels.append((line + labels).properties(width=width, height=height))
    return alt.hconcat(*panels).properties(title=alt.TitleParams(
        "Engines side by side", subtitle="the same nodes, model shape and load; each point one load point "
                                         "(labelled), one line per engine and mode"))


def engines_section(cells: list[dict]) -> str:
    """The HTML table under the chart."""
    if not cells:
        return ""
    head = ("<tr><th>engine</th><th>mode</th><th>load</th><th>req/s</th><th>tok/s</th><th>TTFT p50 / p99 ms</th>"
            "<th>TPOT p50 / p99 ms</th><th>valid</th></tr>")
    body = "".join(
        f"<tr><td>{html.escape(c['engine'] or '?')}</td><td>{html.escape(c['mode'])}</td>"
        f"<td>{_load(c)}</td><td>{_num(c['request_throughput'], '.2f')}</td>"
        f"<td>{_num(c['output_throughput'], '.1f')}</td>"
        f"<td>{_num(c['ttft_p50_ms'], '.1f')} / {_num(c['ttft_p99_ms'], '.1f')}</td>"
        f"<td>{_num(c['tpot_p50_ms'], '.2f')} / {_num(c['tpot_p99_ms'], '.2f')}</td>"
        f"<td>{'yes' if c['valid'] else 'no'}</td></tr>" for c in cells)
    return f'<section id="engines"><h2>Engines side by side</h2><table class="cells">{head}{body}</table></section>'


def _load(cell: dict) -> str:
    return load_point_label(cell)


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)
