"""Reports: altair charts from the warehouse, written as one self-contained HTML page per run
(Vega inlined, no CDN: it opens on an air-gapped cluster) plus a PNG and an SVG of each chart.

Reads only the warehouse, so a report can be rendered again for any past run. The page opens
with the answer (`first_screen`, summary_table.py): one line of context (hardware as measured,
engine, model, duration) and per load point each mode's figures and the winner with its margin, or
"no significant difference"; then the side-by-side chart, then the others; the run's identity last.
The charts are the seeds' figures: throughput against TTFT and TPOT per request rate; normalized
throughput, KV-cache usage and cache-miss probability against parallel clients with the
theoretical saturation point; per-node CPU, memory and network timelines with the cells
shaded; modes and executors side by side; the load each DP engine or replica took and each node's
network bytes per request (parallel_report.py); for cells with a workload, the request lengths sent and
served, per-turn TTFT and prompt length, and the prefix-cache hit rate (workload_report.py).

With repeats (`load.repeats` >= 2) the per-cell charts draw one point per load point at the
median of its valid repeats, with error bars: the bootstrap 95% interval of that median
(servebench/analysis/dispersion.py; with 2 to 5 repeats it is their range), and the cells
section adds each point's median ±CV [interval] of every main figure.
"""

from __future__ import annotations

import html
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import altair as alt
import vl_convert as vlc

from servebench.analysis.capacity_report import capacity_rows, capacity_section, pareto_chart, tuning_row
from servebench.analysis.cell_dispersion import METRICS as SPREAD_METRICS
from servebench.analysis.cell_dispersion import PointMetric, run_spreads
from servebench.analysis.charts import (
    is_oversubscribed,
    label_modes,
    load_point_label,
    load_point_order,
    mode_cpu_model,
    mode_label,
    nothing_to_show,
    oversubscribed_modes,
    server_cpu_models,
    slo_limits,
    slo_rules,
    titled,
)
from servebench.analysis.dispersion import Spread, spread
from servebench.analysis.engines_report import engine_cells, engines_chart, engines_section
from servebench.analysis.parallel_report import balance_chart, rank_network_chart
from servebench.analysis.regression.series import cell_point
from servebench.analysis.report_changes import history_section
from servebench.analysis.run_summary import cell_notes, throughput_text, validity_word
from servebench.analysis.saturation import normalized_per_series, run_saturation
from servebench.analysis.scale_report import orchestration_cost_chart
from servebench.analysis.summary_table import context_line, point_summaries, run_facts, summary_html
from servebench.analysis.vega_bundle import vega_bundle
from servebench.analysis.workload_report import whole_axis, workload_charts
from servebench.warehouse import Connection, reads
from servebench.warehouse.history import changes_until, nights_until, run_nodes, run_series_points, run_spec

WIDTH, HEIGHT = 380, 240
TIMELINE_POINTS = 400        # per node, server and metric: about one per two pixels of the timeline


def _data(values: list[dict]) -> alt.Data:
    return alt.Data(values=json.loads(json.dumps(values, default=str)))


def _titled(chart: alt.TopLevelMixin, title: str, subtitle: str) -> alt.TopLevelMixin:
    return chart.properties(title=titled(title, subtitle), width=WIDTH, height=HEIGHT)


def throughput_vs_latency(cells: list[dict], latency: str, label: str,
                          slo: dict[str, float] | None = None) -> alt.TopLevelMixin | None:
    """Latency against the request rate each open-loop load point realized (its schedule as drawn,
    `cells.realized_rate`; the offered rate where none was recorded), one line per mode, each point
    labelled with the rate it was offered (`cells.offered_rate`): p50 solid, p99 dashed, and the
    campaign's SLO on this latency as a horizontal rule when one is set. `latency` is the p50 field
    (`ttft_p50_ms`); its p99 is drawn beside it when the cells have it."""
    opened = [{**c, "rate": c["realized_rate"] if c.get("realized_rate") is not None else c.get("offered_rate")}
              for c in cells if c["load_kind"] == "open" and c.get("request_throughput") and c[latency] is not None]
    opened = [c for c in opened if c["rate"] is not None]
    if not opened:
        return None
    high = latency.replace("_p50_", "_p99_")
    fields = ["rate", "request_throughput", "output_throughput", latency] + ([high] if high != latency else [])
    points = [{**p, "load_point": load_point_label(p)} for p in point_figures(opened, fields)]
    metric = latency.split("_")[0]
    name = label.split(" ")[0]
    long = [{"mode": p["mode"], "point": p["point"], "load_point": p["load_point"], "percentile": percentile,
             "rate": p["rate"], "request_throughput": p["request_throughput"], "ms": p[field], "repeats": p["repeats"],
             "output_throughput": p["output_throughput"], "realized_rate": p.get("realized_rate")}
            for p in points for percentile, field in (("p50", latency), ("p99", high))
            if p.get(field) is not None and (percentile == "p50" or field != latency)]
    # from 0: one load point still gets an axis of rates, not a lone tick
    x = alt.X("rate:Q", title="request rate realized [req/s]", scale=alt.Scale(zero=True))
    y_title = f"{name} [ms]"
    base = alt.Chart(_data(long)).encode(x=x, y=alt.Y("ms:Q", title=y_title), color=alt.Color("mode:N", title="mode"))
    lines = base.mark_line().encode(
        strokeDash=alt.StrokeDash("percentile:N", title="percentile", sort=["p50", "p99"]),
        detail="percentile:N", order=alt.Order("rate:Q"))
    line = lines + base.mark_point(size=60, filled=True).encode(
        tooltip=["point:N", "mode:N", "load_point:N", "percentile:N", "repeats:Q",
                 alt.Tooltip("rate:Q", title="realized req/s", format=".2f"),
                 alt.Tooltip("request_throughput:Q", title="completed req/s", format=".2f"),
                 alt.Tooltip("ms:Q", format=".1f"), alt.Tooltip("output_throughput:Q", title="tok/s", format=".1f")])
    labels = alt.Chart(_data(points)).mark_text(dx=8, dy=-8, fontSize=10, align="left").encode(
        x=alt.X("rate:Q", title="request rate realized [req/s]"), y=alt.Y(f"{latency}:Q", title=y_title),
        text="load_point:N", color="mode:N")
    subtitle = ("open loop; x: the request rate each load point's schedule realized, each point labelled with the "
                "rate offered; one line per mode; solid p50, dashed p99")
    layers = line + labels
    bars = error_bars(points, "rate", latency, ("request rate realized [req/s]", y_title))
    if bars is not None:
        layers = layers + bars
        subtitle += f"; {ERROR_BAR_NOTE}"
    invalid = invalid_marks(opened, "rate", latency, ("request rate realized [req/s]", y_title))
    if invalid is not None:
        layers, subtitle = layers + invalid, subtitle + "; red cross: an invalid measurement (see the cell table)"
    rules = slo_rules(slo or {}, metric)
    if rules:
        layers = layers + alt.Chart(_data(rules)).mark_rule(color="#d62728", strokeDash=[2, 2], strokeWidth=2).encode(
            y="limit:Q", tooltip=["label:N"]) + alt.Chart(_data(rules)).mark_text(
            align="right", baseline="bottom", dy=-3, color="#d62728", fontSize=11).encode(
            x=alt.value(WIDTH), y="limit:Q", text="label:N")
        subtitle += "; red: " + ", ".join(r["label"] for r in rules)
    return _titled(layers, f"{label} vs request rate", subtitle)


ERROR_TICK = 10             # px: an error bar's end ticks (on a band axis they would span the band)
ERROR_BAR_NOTE = "bars: bootstrap 95% interval of the median of repeats (their range below 6 repeats)"


def point_figures(cells: list[dict], fields: list[str]) -> list[dict]:
    """One row per load point of a mode (its repeats folded): each field at the median of the
    point's valid repeats, with `<field>_low`/`_high` (the interval, None for one repeat), `_cv`,
    `_spread` (its text) and `repeats`. A point whose every repeat is invalid keeps its values,
    so its red cross sits on it. The rest of the row is the point's first cell."""
    groups: dict[str, list[dict]] = {}
    for c in cells:
        groups.setdefault(cell_point(c.get("cell_key") or c["cell_id"].split("/", 1)[-1]), []).append(c)
    folded = []
    for point, repeats in groups.items():
        used = [c for c in repeats if c.get("valid") is not False] or repeats
        row = {**used[0], "point": point, "repeats": len(used)}
        for field in fields:
            values = [c[field] for c in used if c[field] is not None]
            figure = spread(values) if values else None
            row.update({field: figure and figure.median, f"{field}_low": figure and figure.low,
                        f"{field}_high": figure and figure.high, f"{field}_cv": figure and figure.cv,
                        f"{field}_spread": figure.text() if figure else None})
        folded.append(row)
    return folded


def error_bars(points: list[dict], x: str | None, y: str,
               titles: tuple[str, str] = ("", "")) -> alt.LayerChart | alt.Chart | None:
    """The intervals of `points` (point_figures' rows) as error bars: vertical for `y`, and
    horizontal for `x` when x is a measured field too; None when no point was repeated. `titles`:
    the chart's x and y axis titles, stated again here (a layer's own default would be merged in)."""
    spread_y = [p for p in points if p.get(f"{y}_low") is not None]
    if not spread_y:
        return None
    tooltip = ["point:N", "mode:N", "repeats:Q", alt.Tooltip(f"{y}_spread:N", title=f"{y} ±CV [95%]")]
    vertical = alt.Chart(_data(spread_y)).mark_errorbar(ticks=True, size=ERROR_TICK).encode(
        x=alt.X(f"{x}:Q", title=titles[0]), y=alt.Y(f"{y}_low:Q", title=titles[1]), y2=f"{y}_high:Q",
        color="mode:N", tooltip=tooltip)
    spread_x = [p for p in points if p.get(f"{x}_low") is not None]
    if not spread_x:
        return vertical
    horizontal = alt.Chart(_data(spread_x)).mark_errorbar(ticks=True, size=ERROR_TICK).encode(
        y=alt.Y(f"{y}:Q", title=titles[1]), x=alt.X(f"{x}_low:Q", title=titles[0]), x2=f"{x}_high:Q", color="mode:N",
        tooltip=["point:N", "mode:N", "repeats:Q", alt.Tooltip(f"{x}_spread:N", title=f"{x} ±CV [95%]")])
    return vertical + horizontal


def invalid_marks(cells: list[dict], x: str, y: str, titles: tuple[str, str] = ("", "")) -> alt.Chart | None:
    """A red cross over every point whose cell failed its validity rules, reasons in the tooltip."""
    bad = [{**c, "reasons": "; ".join(c["invalid_reasons"] or [])} for c in cells if c.get("valid") is False]
    if not bad:
        return None
    return alt.Chart(_data(bad)).mark_point(shape="cross", color="red", size=180, strokeWidth=3).encode(
        x=alt.X(f"{x}:Q", title=titles[0]), y=alt.Y(f"{y}:Q", title=titles[1]),
        tooltip=["cell_id:N", alt.Tooltip("reasons:N", title="invalid because")])


@dataclass(frozen=True)
class ClientsChart:
    """What a chart against the closed-loop client count draws and says. `percent`: the field is a fraction,
    drawn as a percentage; `full_scale`: its axis runs to 100% at least (a usage of 0.05% is not drawn as a
    full chart); `one_point_says_nothing`: with one client count a series is its own best (normalized)."""

    field: str
    title: str
    axis: str
    subtitle: str
    fmt: str = ".1%"
    percent: bool = True
    full_scale: bool = False
    one_point_says_nothing: bool = False
    near_full: float | None = None       # drawn only where some value reaches it (else one sentence)


def versus_clients(rows_: list[dict], chart: ClientsChart, saturation: list[dict],
                   knees: Sequence[dict] = ()) -> alt.TopLevelMixin | None:
    """`chart.field` against the closed-loop client count, one line per mode (series), with each series'
    theoretical KV saturation as a dashed rule where it falls on the axis (beyond it: written as a
    number in the subtitle, not drawn at the edge) and its measured knee. Says so in one line instead
    when every value is 0, or, with `one_point_says_nothing`, when no series has two client counts."""
    field, title, axis, subtitle, fmt = chart.field, chart.title, chart.axis, chart.subtitle, chart.fmt
    percent, full_scale, one_point_says_nothing = chart.percent, chart.full_scale, chart.one_point_says_nothing
    closed = [r for r in rows_ if r.get("clients") is not None and r.get(field) is not None]
    if not closed:
        return None
    if all(r[field] == 0 for r in closed):
        return nothing_to_show(title, f"{axis}: 0 in every one of the {len(closed)} closed-loop cells")
    if chart.near_full is not None and max(r[field] for r in closed) < chart.near_full:
        top = max(closed, key=lambda r: r[field])
        return nothing_to_show(title, f"the pool never came near full: highest {top[field]:{fmt}} ({top['mode']}, "
                               f"{load_point_label(top)}), under the {chart.near_full:.0%} this chart is drawn from"
                               + beyond_note([s for s in saturation if s["saturation_clients"] is not None],
                                             None, "; "))
    counts: dict[str, set[int]] = {}
    for r in closed:
        counts.setdefault(r["mode"], set()).add(r["clients"])
    if all(len(c) < 2 for c in counts.values()):   # no line: a dot per series, overlaid at one x
        drawn_at = ", ".join(load_point_label(r) for r in sorted(
            {r["clients"]: r for r in closed}.values(), key=lambda r: r["clients"]))
        top = max(closed, key=lambda r: r[field])
        return nothing_to_show(title, f"every mode ran at one client count ({drawn_at}), "
                               + ("so each cell is its own best (100%)" if one_point_says_nothing else
                                  f"no line to draw; highest {top[field]:{fmt}} ({top['mode']})"))
    points = point_figures(closed, [field])
    max_clients, min_clients = max(r["clients"] for r in closed), min(r["clients"] for r in closed)
    marks = [s for s in saturation if s["saturation_clients"] is not None]
    drawn = [s for s in marks if s["saturation_clients"] <= max_clients * 1.5]
    top = max([max_clients] + [s["saturation_clients"] for s in drawn])
    bottom = min([min_clients] + [s["saturation_clients"] for s in drawn])
    peak = max((p for p in points if p[field] is not None), key=lambda p: p[field])
    y_scale = alt.Scale(domain=[0, max(1.0, peak[field])]) if full_scale else alt.Undefined
    if full_scale:      # a usage of 0.05% is a flat line at 0: its number is said
        subtitle += f"; highest {peak[field]:.2%} ({peak['mode']}, {load_point_label(peak)})"
    y_axis = alt.Axis(format="%") if percent else alt.Undefined
    line = alt.Chart(_data(points)).mark_line(point=True).encode(
        x=alt.X("clients:Q", title="parallel clients (closed loop)", axis=whole_axis(bottom, top)),
        y=alt.Y(f"{field}:Q", title=axis, axis=y_axis, scale=y_scale),
        color=alt.Color("mode:N", title="mode"),
        tooltip=["point:N", "mode:N", "clients:Q", "repeats:Q", alt.Tooltip(f"{field}:Q", format=fmt, title=axis),
                 alt.Tooltip(f"{field}_spread:N", title="±CV [95%]")],
    )
    bars = error_bars(points, "clients", field, ("parallel clients (closed loop)", axis))
    if bars is not None:
        line, subtitle = line + bars, f"{subtitle}; median of repeats, {ERROR_BAR_NOTE}"
    if drawn:
        rule = alt.Chart(_data(drawn)).mark_rule(strokeDash=[6, 4]).encode(
            x=alt.X("saturation_clients:Q", title="parallel clients (closed loop)"), color="mode:N",
            tooltip=["mode:N", alt.Tooltip("saturation_clients:Q", title="KV saturation (clients)", format=".2f"),
                     alt.Tooltip("kv_capacity_tokens:Q", title="KV capacity (tokens)", format=",")])
        line = line + rule
        subtitle += ("; dashed: theoretical KV saturation = capacity / a client's peak tokens ("
                     + ", ".join(f"{s['mode']} {s['saturation_clients']:,.2f}" for s in drawn) + " clients)")
    subtitle += beyond_note(marks, max_clients * 1.5, "; ")
    measured = [k for k in knees if k.get("measured_knee") is not None]
    if measured:
        medians = {(p["mode"], p["clients"]): p[field] for p in points}
        knees_at = [{**k, field: medians[(k["mode"], k["measured_knee"])]} for k in measured
                    if (k["mode"], k["measured_knee"]) in medians]
        knee = alt.Chart(_data(knees_at)).mark_point(shape="diamond", size=220, filled=True, color="#2ca02c").encode(
            x=alt.X("measured_knee:Q", title="parallel clients (closed loop)"), y=alt.Y(f"{field}:Q", title=axis),
            tooltip=["mode:N", alt.Tooltip("measured_knee:Q", title="measured knee (clients)"),
                     alt.Tooltip("theoretical_clients:Q", title="theoretical saturation", format=".2f")])
        line = line + knee
        subtitle += "; green diamond: the measured knee (most clients without KV misses)"
    return _titled(line, title, subtitle)


def beyond_note(saturation: Sequence[dict], edge: float | None, join: str) -> str:
    """The theoretical saturation points past `edge` (None: every one), as numbers: a rule drawn at
    the chart's edge would say 'here' of a point thousands of clients away."""
    far = [s for s in saturation if s.get("saturation_clients") is not None
           and (edge is None or s["saturation_clients"] > edge)]
    if not far:
        return ""
    where = "theoretical KV saturation" + (" beyond the axis, not drawn" if edge is not None else "")
    return f"{join}{where}: " + ", ".join(f"{s['mode']} at {s['saturation_clients']:,.2f} clients" for s in far)


def saturation_series(kv: list[dict]) -> list[dict]:
    """`cell_kv` rows as the saturation charts draw them: the closed-loop cells, one line per mode and
    workload (`mode` becomes `<mode>.<workload>` for a workload's cells, as `servebench saturation`
    names the series), each normalized against its own best drawn cell (not an open-loop cell the
    chart does not show)."""
    closed = [row for row in kv if row.get("clients") is not None]
    return [{**row, "mode": f"{row['mode']}.{row['workload_name']}" if row.get("workload_name") else row["mode"]}
            for row in normalized_per_series(closed)]


def thin_timeline(points: list[dict], most: int = TIMELINE_POINTS) -> list[dict]:
    """At most `most` points per line (node, server, metric), each the highest of a run of
    consecutive samples: a chart a few hundred pixels wide shows no more, a spike stays visible,
    and altair (which validates and copies every inline row) renders a long run in seconds, not
    a minute."""
    lines: dict[tuple, list[dict]] = {}
    for p in points:
        lines.setdefault((p["node"], p["mode"], p["metric"]), []).append(p)
    thinned = []
    for line in lines.values():
        step = -(-len(line) // most)
        for start in range(0, len(line), step):
            run = line[start:start + step]
            thinned.append({**run[0], "value": max(p["value"] for p in run)})
    return thinned


TIMELINE_METRICS = ("CPU busy [%]", "memory used [GB]", "engine RSS [GB]", "network [MB/s, all interfaces]")
STARTUP_COLOUR = "#ff7f0e"
STARTUP_BEFORE_S = 900.0     # a server launched this long before the first sample is still drawn (s)


def wall_offset(samples: Sequence[dict]) -> float | None:
    """Unix time minus the samples' monotonic clock (their median difference); None when the samples
    carry no wall time."""
    found = [s["t_wall"] - s["t_mono"] for s in samples if s.get("t_wall") is not None]
    return statistics.median(found) if len(found) == len(samples) and found else None


def startup_spans(servers: Sequence[dict], offset: float | None, start: float) -> list[dict]:
    """Each server's start-up (launch to ready, `servers.started_at` and `ready_seconds`) on the
    timelines' clock (seconds since the first sample), where its launch time is known."""
    if offset is None:
        return []
    spans = []
    for s in servers:
        if s.get("started_unix") is None:
            continue
        begin = s["started_unix"] - offset - start
        ready = s.get("ready_seconds")
        spans.append({"server": f"{s['mode']} start-up", "start": begin, "end": begin + (ready or 0.0),
                      "middle": begin + (ready or 0.0) / 2,
                      "ready": "not ready" if ready is None else f"ready after {ready:.1f} s"})
    return [s for s in spans if s["end"] >= -STARTUP_BEFORE_S]


def time_axis(offset: float | None, start: float, span_s: float) -> tuple[str, dict[str, Any]]:
    """The timelines' x: 24-hour UTC wall time (`%H:%M`, with seconds for a run under 10 minutes) when
    the samples carry it, else seconds since the first sample. Returns its title and axis options."""
    if offset is None:
        return "seconds since the first sample [s]", {}
    fmt = "%H:%M" if span_s >= 600 else "%H:%M:%S"
    return "time [UTC, 24-hour]", {"format": fmt, "labelAngle": 0}     # on a utc scale: labels in UTC


def node_timelines(samples: list[dict], cells: list[dict], faults: Sequence[dict] = (),
                   servers: Sequence[dict] = ()) -> alt.VConcatChart | None:
    """Each node's CPU, memory and network over the run, cells shaded, each server's start-up shaded
    and named, injected faults as red rules; along 24-hour UTC time when the samples have wall time."""
    if not samples:
        return None
    start = min(s["t_mono"] for s in samples)
    offset = wall_offset(samples)
    points: list[dict] = []
    previous: dict[tuple[str, str], tuple[float, float]] = {}  # (node, mode) -> (t_mono, bytes so far)
    for s in sorted(samples, key=lambda s: (s["node"], s["mode"], s["t_mono"])):
        net = json.loads(s["net"]) if isinstance(s["net"], str) else (s["net"] or {})
        total = sum(v[0] + v[1] for v in net.values())
        last = previous.get((s["node"], s["mode"]))
        rate = (total - last[1]) / (s["t_mono"] - last[0]) / 1e6 if last and s["t_mono"] > last[0] else None
        previous[(s["node"], s["mode"])] = (s["t_mono"], total)
        t = round(s["t_mono"] - start, 2)
        base = {"t": t, "node": s["node"], "mode": s["mode"]}
        points += [{**base, "metric": TIMELINE_METRICS[0], "value": s["cpu_pct"]},
                   {**base, "metric": TIMELINE_METRICS[1], "value": s["mem_used_bytes"] / 1e9},
                   {**base, "metric": TIMELINE_METRICS[2], "value": s["engine_rss_bytes"] / 1e9}]
        if rate is not None:
            points.append({**base, "metric": TIMELINE_METRICS[3], "value": rate})
    thinned = thin_timeline(points)
    marks = [{"t": f["t_mono"] - start, "fault": f"{f['action']} on {f['node']}", "cell": f["cell_key"],
              "hit": f["hit"]} for f in faults if f.get("t_mono") is not None]
    spans = [{"cell_id": c["cell_id"], "cell": c["cell_key"] + (" (oversubscribed)" if c.get("oversubscribed") else ""),
              "start": c["t0_monotonic"] - start, "end": c["t_end_monotonic"] - start,
              "middle": (c["t0_monotonic"] + c["t_end_monotonic"]) / 2 - start}
             for c in cells if c["t0_monotonic"] and c["t_end_monotonic"]]
    startups = startup_spans(servers, offset, start)
    ends = [p["t"] for p in thinned] + [s["end"] for s in spans + startups] + [m["t"] for m in marks]
    first, last = min([0.0] + [s["start"] for s in startups]), max(ends or [1.0])
    title, axis = time_axis(offset, start, last - first)
    if offset is not None:     # on the wall clock: Vega's times are milliseconds since the epoch
        def wall(rows: list[dict], keys: tuple[str, ...]) -> list[dict]:
            return [{**r, **{k: (r[k] + start + offset) * 1000 for k in keys}} for r in rows]
        thinned, marks = wall(thinned, ("t",)), wall(marks, ("t",))
        spans, startups = wall(spans, ("start", "end", "middle")), wall(startups, ("start", "end", "middle"))
        first, last = (first + start + offset) * 1000, (last + start + offset) * 1000
    kind = "T" if offset is not None else "Q"
    when: dict[str, Any] = {"format": "%H:%M:%S", "formatType": "utc"} if offset is not None else {"format": ".1f"}
    # on the wall clock the rows shared by every panel fix the span (the panels share one x scale): a
    # domain given as numbers beside Vega-Lite's own datetime domain is a console warning per panel
    x_scale = alt.Scale(nice=False, type="utc") if offset is not None else alt.Scale(domain=[first, last], nice=False)
    charts: list[alt.LayerChart | alt.FacetChart] = [cell_strip(spans, x_scale, startups, kind)] \
        if spans or startups else []

    def along(name: str) -> alt.X:     # every layer states the axis: a layer's own default would be merged in
        return alt.X(f"{name}:{kind}", title=title, scale=x_scale, axis=alt.Axis(**axis))

    for metric in TIMELINE_METRICS:
        line = alt.Chart(_data([p for p in thinned if p["metric"] == metric])).mark_line(strokeWidth=1).encode(
            x=along("t"),
            y=alt.Y("value:Q", title=metric),
            color=alt.Color("node:N", title="node"),
            detail="mode:N",  # one segment per server: no line drawn across the gaps between them
            tooltip=["node:N", "mode:N", alt.Tooltip(f"t:{kind}", title=title, **when),
                     alt.Tooltip("value:Q", format=".2f")])
        shade = alt.Chart(_data(spans)).mark_rect(opacity=0.12, color="#888").encode(
            x=along("start"), x2="end", tooltip=["cell_id:N", "cell:N"])
        layers = [shade, line]
        if startups:
            layers.insert(1, alt.Chart(_data(startups)).mark_rect(opacity=0.18, color=STARTUP_COLOUR).encode(
                x=along("start"), x2="end", tooltip=["server:N", "ready:N"]))
        if marks:
            layers.append(alt.Chart(_data(marks)).mark_rule(color="#d62728", strokeWidth=2).encode(
                x=along("t"), tooltip=["fault:N", "cell:N", "hit:N"]))
        charts.append(alt.layer(*layers).properties(width=WIDTH * 2 + 60, height=110, title=metric))
    subtitle = "grey: the cells, named in the top row; sampled by servebench's node sampler" + \
        ("; orange: each server's start-up (launch to ready), named in the top row" if startups else "") + \
        ("; red: faults the campaign injected" if marks else "") + \
        (f"; at most {TIMELINE_POINTS} points a line, each the highest of its samples" if len(thinned) < len(points)
         else "")
    timelines = alt.vconcat(*charts).properties(title=titled("Per-node timelines", subtitle))
    return timelines.resolve_scale(x="shared") if offset is not None else timelines


CELL_STRIP_HEIGHT = 120      # px: a cell key written upright in 9 px type fits


def cell_strip(spans: list[dict], x_scale: alt.Scale, startups: Sequence[dict] = (),
               kind: str = "Q") -> alt.LayerChart | alt.FacetChart:
    """The timelines' top row: each cell's span shaded as below it and its key written upright in it, and
    each server's start-up shaded orange and named, so a PNG (no hover) says what each band is."""
    layers = []
    axis = alt.Axis(labels=False, ticks=False, grid=False, domain=False)
    for rows, colour, opacity, name in ((spans, "#888", 0.12, "cell"), (list(startups), STARTUP_COLOUR, 0.18,
                                                                         "server")):
        if not rows:
            continue
        layers.append(alt.Chart(_data(rows)).mark_rect(opacity=opacity, color=colour).encode(
            x=alt.X(f"start:{kind}", title=None, scale=x_scale, axis=axis), x2="end",
            tooltip=[f"{name}:N"] + (["cell_id:N"] if name == "cell" else ["ready:N"])))
        layers.append(alt.Chart(_data(rows)).mark_text(
            angle=270, align="right", baseline="middle", fontSize=9, dy=0,
            color="#b35900" if name == "server" else "black").encode(
            x=alt.X(f"middle:{kind}", scale=x_scale, title=None, axis=axis), y=alt.value(2), text=f"{name}:N"))
    return alt.layer(*layers).properties(width=WIDTH * 2 + 60, height=CELL_STRIP_HEIGHT, title="cells and start-ups")


def modes_side_by_side(cells: list[dict]) -> alt.VConcatChart | None:
    # one bar per mode, link setting and workload: a workload campaign's cells share their load point
    done = [{**c, "mode_executor": f"{c['mode'].removesuffix(' (oversubscribed)')} ({c['executor']}"
             + (", oversubscribed)" if c.get("oversubscribed") else ")") + (f" {c['link']}" if c.get("link") else "")
             + (f" {c['workload_name']}" if c.get("workload_name") else "")}
            for c in cells if c["output_throughput"]]
    if not done:
        return None
    latencies = (("TTFT p50", "ttft_p50_ms"), ("TTFT p99", "ttft_p99_ms"), ("TPOT p50", "tpot_p50_ms"),
                 ("TPOT p99", "tpot_p99_ms"))
    points = [{**p, "load_point": _point(p)}
              for p in point_figures(done, ["output_throughput", *(field for _, field in latencies)])]
    repeated = any(p["output_throughput_low"] is not None for p in points)
    x = alt.X("mode_executor:N", title=None, axis=alt.Axis(labelAngle=-30))
    bars = alt.Chart().mark_bar().encode(
        x=x, y=alt.Y("output_throughput:Q", title="output throughput [tok/s]", stack=None),
        color=alt.Color("mode:N", title="mode"),
        tooltip=["point:N", "mode:N", "executor:N", "repeats:Q", alt.Tooltip("output_throughput:Q", format=".1f"),
                 alt.Tooltip("output_throughput_spread:N", title="±CV [95%]")])
    throughput = [bars]
    if repeated:
        throughput.append(alt.Chart().mark_errorbar(ticks=True, size=ERROR_TICK, color="black").encode(
            x=x, y=alt.Y("output_throughput_low:Q", title="output throughput [tok/s]"),
            y2="output_throughput_high:Q"))
    latency = []
    for p in points:
        for name, field in latencies:
            if p[field] is not None:
                latency.append({"point": p["point"], "mode_executor": p["mode_executor"], "executor": p["executor"],
                                "mode": p["mode"],
                                "load_point": p["load_point"], "percentile": name, "ms": p[field],
                                "low": p[f"{field}_low"], "high": p[f"{field}_high"], "repeats": p["repeats"],
                                "spread": p[f"{field}_spread"]})
    dots = [alt.Chart().mark_point(filled=True, size=70).encode(
        x=x, y=alt.Y("ms:Q", title="latency [ms, log scale]", scale=alt.Scale(type="log")),
        shape=alt.Shape("percentile:N", title="percentile"), color=alt.Color("mode:N", title="mode"),
        tooltip=["point:N", "percentile:N", "repeats:Q", alt.Tooltip("ms:Q", format=".1f"),
                 alt.Tooltip("spread:N", title="±CV [95%]")])]
    if repeated:
        dots.append(alt.Chart().transform_filter("datum.low != null").mark_errorbar(ticks=True, size=ERROR_TICK).encode(
            x=x, y=alt.Y("low:Q", title="latency [ms, log scale]", scale=alt.Scale(type="log")), y2="high:Q",
            color=alt.Color("mode:N", title="mode")))
    column = alt.Column("load_point:N", title="load point", sort=load_point_order(points))
    # each panel its own modes: a workload campaign's load points are not every mode's
    top = alt.layer(*throughput, data=_data(points)).properties(width=140, height=HEIGHT).facet(
        column=column).resolve_scale(x="independent").properties(title="throughput")
    bottom = alt.layer(*dots, data=_data(latency)).properties(width=140, height=HEIGHT).facet(
        column=column).resolve_scale(x="independent").properties(title="latency percentiles")
    subtitle = ("one panel per load point; each bar a mode (its executor in brackets), coloured by mode"
                + (f"; medians of repeats, {ERROR_BAR_NOTE}" if repeated else ""))
    return alt.vconcat(top, bottom).properties(title=titled("Modes side by side", subtitle))


def _point(cell: dict) -> str:
    return load_point_label(cell)


def network_response(cells: list[dict]) -> alt.VConcatChart | None:
    """How each mode reacts to the network (campaigns with a `network:` axis): output throughput
    and TPOT p50 under each link setting (plain, then more delay, then rate caps), one panel per
    load point."""
    swept = [{**c, "point": _point(c)} for c in cells if c.get("link") and c["output_throughput"]]
    if not swept:
        return None
    ranked = sorted(swept, key=lambda c: (c["link_rate_mbit"] is not None, c["link_delay_ms"] or 0,
                                          -(c["link_rate_mbit"] or 0)))
    order = list(dict.fromkeys(c["link"] for c in ranked))  # plain, more delay, then tighter caps
    panels: list[alt.Chart] = []
    for field, title in (("output_throughput", "output throughput [tok/s]"), ("tpot_p50_ms", "TPOT p50 [ms]")):
        if not any(c.get(field) for c in swept):      # every value 0 or unknown: a flat line at 0 says nothing
            panels.append(nothing_to_show(title, f"0 or not measured in every one of the {len(swept)} cells"))
            continue
        panels.append(alt.Chart(_data(swept)).mark_line(point=True).encode(
            x=alt.X("link:N", sort=order, title="link setting", axis=alt.Axis(labelAngle=0)),
            y=alt.Y(f"mean({field}):Q", title=title), color=alt.Color("mode:N", title="mode"),
            column=alt.Column("point:N", title="load point", sort=load_point_order(swept)),
            tooltip=["cell_id:N", "link:N", alt.Tooltip("link_delay_ms:Q", title="delay ms"),
                     alt.Tooltip("link_rate_mbit:Q", title="rate Mbit/s"),
                     alt.Tooltip(f"mean({field}):Q", format=".1f")],
        ).properties(width=220, height=HEIGHT, title=title))
    return alt.vconcat(*panels).properties(title=alt.TitleParams(
        "Modes against the network", subtitle="the same workload under each link setting (added one-way delay "
        "dNms, rate cap rNmbit) on the testbed's host links"))


def roofline_rows(cells: list[dict]) -> list[dict]:
    """One row per judged cell and phase (decode, prefill) with its fraction of the roofline."""
    found = []
    for cell in cells:
        for phase in ("decode", "prefill"):
            if cell["judged"] and cell[f"{phase}_fraction"] is not None:
                found.append({"mode": cell["mode"], "point": _point(cell), "phase": phase,
                              "fraction": cell[f"{phase}_fraction"]})
    return found


def roofline_chart(cells: list[dict]) -> alt.FacetChart | None:
    """Fraction of the roofline per mode and load point: decode (bytes per step / TPOT against the
    node's bandwidth) and prefill (FLOPs per prompt token / its time against the peak matmul rate);
    emulated cells are named in the subtitle, not judged (docs/roofline.md)."""
    found = roofline_rows(cells)
    if not found:
        return None
    emulated = sorted({f"{c['mode']} {_point(c)}" for c in cells if c["emulated"]})
    subtitle = ("decode: bytes per step / TPOT vs memory bandwidth; prefill: FLOPs per prompt token / its time "
                "vs peak matmul" + (f"; emulated, not judged: {', '.join(emulated)}" if emulated else ""))
    chart = alt.Chart(_data(found)).mark_bar().encode(
        x=alt.X("point:N", title="load point", sort=load_point_order(cells)),
        xOffset=alt.XOffset("mode:N"),
        y=alt.Y("mean(fraction):Q", title="share of the roofline [%]", axis=alt.Axis(format="%")),
        color=alt.Color("mode:N", title="mode"),
        tooltip=["mode:N", "point:N", "phase:N", alt.Tooltip("mean(fraction):Q", format=".2%")],
    ).properties(width=WIDTH // 2 + 60, height=HEIGHT)
    return chart.facet(column=alt.Column("phase:N", title=None, sort=["decode", "prefill"])).properties(
        title=alt.TitleParams("Fraction of the roofline per mode and load point", subtitle=subtitle))


def roofline_note(cells: list[dict]) -> str:
    """The one line said instead of the roofline chart when no cell can be judged against it."""
    if roofline_rows(cells):
        return ""
    if cells and all(cell["emulated"] for cell in cells):
        why = "every cell ran on an emulated node (qemu-user): measured, not judged"
    else:
        notes = sorted({cell["note"] for cell in cells if cell["note"]})
        why = "; ".join(notes) if notes else "no completed cell"
    return f'<p class="sub">Fraction of the roofline: not known ({html.escape(why)}; docs/roofline.md).</p>'


def history(nights: list[dict], changes: list[dict]) -> alt.VConcatChart | None:
    """Each series of the run, night by night (median of repeats), with the regressions and
    improvements detection placed at their first bad night."""
    if len({n["run_id"] for n in nights}) < 2:
        return None
    nights = [{**n, "night_at": epoch_ms(n["night_at"])} for n in nights]
    changes = [{**c, "first_bad_at": epoch_ms(c.get("first_bad_at"))} for c in changes]
    utc: dict[str, Any] = {"format": "%Y-%m-%d %H:%M"}       # on a utc scale: labels in UTC
    x_scale = alt.Scale(type="utc")
    panels = []
    for metric in dict.fromkeys(n["metric"] for n in nights):
        line = alt.Chart(_data([n for n in nights if n["metric"] == metric])).mark_line(
            point=alt.OverlayMarkDef(size=40)).encode(
            x=alt.X("night_at:T", title="night: the run's start [UTC, 24-hour]", scale=x_scale,
                    axis=alt.Axis(labelAngle=0, **utc)),
            y=alt.Y("value:Q", title=metric_title(metric), scale=alt.Scale(zero=False)),
            color=alt.Color("point:N", title="cell"),
            tooltip=["point:N", "run_id:N", "engine_version:N",
                     alt.Tooltip("night_at:T", title="night (UTC)", formatType="utc", **utc),
                     alt.Tooltip("value:Q", format=".4g"),
                     alt.Tooltip("repeats:Q"), alt.Tooltip("cv:Q", format=".1%")])
        marks = [c for c in changes if c["metric"] == metric]
        layer = line
        if marks:
            layer = line + alt.Chart(_data(marks)).mark_rule(strokeDash=[4, 3], strokeWidth=2).encode(
                x=alt.X("first_bad_at:T", title="night: the run's start [UTC, 24-hour]", scale=x_scale,
                        axis=alt.Axis(labelAngle=0, **utc)),
                color=alt.Color("kind:N", title="change", scale=alt.Scale(
                    domain=["regression", "improvement"], range=["#d62728", "#2ca02c"])),
                tooltip=["kind:N", "status:N", "point:N", "first_bad_run:N", "last_good_run:N",
                         alt.Tooltip("change:Q", format="+.1%"), alt.Tooltip("p_value:Q", format=".2g"),
                         "engine_first_bad:N"])
        panels.append(layer.resolve_scale(color="independent").properties(width=WIDTH * 2 + 60, height=150,
                                                                            title=metric_title(metric)))
    return alt.vconcat(*panels).properties(title=alt.TitleParams(
        "History of this run's series", subtitle="median of repeats per night; dashed: change found "
                                                 "(first bad night), red regression, green improvement"))


METRIC_TITLES = {"output_throughput": "output throughput [tok/s]", "request_throughput": "request throughput [req/s]",
                 "goodput": "goodput [req/s]"}


def metric_title(metric: str) -> str:
    """A cells column as an axis title with its unit: 'TTFT p99 [ms]', 'output throughput [tok/s]'."""
    if metric in METRIC_TITLES:
        return METRIC_TITLES[metric]
    if metric.endswith("_ms"):
        name, *rest = metric.removesuffix("_ms").split("_")
        return " ".join([name.upper(), *rest]) + " [ms]"
    return metric.replace("_", " ")


def epoch_ms(value: object) -> float | None:
    """A timestamp as Vega's time: milliseconds since the epoch, so no browser reads it in its own zone."""
    if value is None:
        return None
    if isinstance(value, datetime):
        moment = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return moment.timestamp() * 1000
    if isinstance(value, (int, float)):
        return float(value)
    return epoch_ms(datetime.fromisoformat(str(value)))


# the KV-usage chart is drawn only where some cell's peak reaches this share of the pool: below it the pool
# was never near full, and a chart of a flat line near 0% says less than its one sentence
KV_NEAR_FULL = 0.8
# what the cache-miss chart plots: `cell_kv.cache_miss_probability`, defined in warehouse/views/cell_kv.sql
CACHE_MISS_SUBTITLE = ("the fraction of decode attempts that found no room in the KV cache (batches that failed, "
                       "or sequences preempted); a cell without a step count: misses per completed request")


def build_charts(con: Connection, run_id: str) -> dict[str, alt.TopLevelMixin]:
    spec = run_spec(con, run_id)
    modes = oversubscribed_modes(spec)
    slo = slo_limits(spec)
    cells = label_modes(reads.report_cells(con, run_id), modes)
    kv = label_modes(saturation_series(reads.kv_cells(con, run_id)), modes)
    samples = label_modes(reads.node_samples(con, run_id), modes)
    knees = label_modes([{**k.model_dump(), "mode": k.series} for k in run_saturation(con, run_id)], modes)
    saturation = [{"mode": k["mode"], "kv_capacity_tokens": k["kv_capacity_tokens"],
                   "saturation_clients": k["theoretical_clients"]} for k in knees]
    capacities, tuning = label_capacities(capacity_rows(con, run_id), tuning_row(con, run_id), modes)
    charts = {
        "modes_side_by_side": modes_side_by_side(cells),     # the first chart: under the summary it draws
        "throughput_vs_ttft": throughput_vs_latency(cells, "ttft_p50_ms", "TTFT", slo),
        "throughput_vs_tpot": throughput_vs_latency(cells, "tpot_p50_ms", "TPOT", slo),
        # absolute beside normalized: a percentage of each mode's own best hides how far apart the modes are
        "throughput_vs_clients": versus_clients(kv, ClientsChart(
            "output_throughput", "Output throughput vs clients", "output throughput [tok/s]",
            "absolute: output tokens per second; the same cells normalized per mode in the chart below",
            fmt=",.1f", percent=False), saturation, knees=knees),
        "normalized_throughput": versus_clients(kv, ClientsChart(
            "normalized_throughput", "Normalized throughput vs clients", "throughput [% of the mode's best cell]",
            "100% = the mode's best cell on this chart; the absolute figures in the chart above",
            one_point_says_nothing=True), saturation, knees=knees),
        "kv_usage": versus_clients(kv, ClientsChart(
            "kv_usage_peak", "KV-cache usage vs clients", "peak KV-cache usage [%]",
            "the engine's KV-cache usage, peak during the cell, on a 0-100% axis", fmt=".2%", full_scale=True,
            near_full=KV_NEAR_FULL), saturation, knees=knees),
        "cache_miss": versus_clients(kv, ClientsChart(
            "cache_miss_probability", "Cache-miss probability vs clients", "KV misses per decode attempt [%]",
            CACHE_MISS_SUBTITLE, fmt=".2%"), saturation, knees=knees),
        "node_timelines": node_timelines(samples, cells, reads.faults(con, run_id),
                                         label_modes(reads.server_starts(con, run_id), modes)),
        "network_response": network_response(cells),
        # DP engines' and replicas' share of the load; each node's bytes per request
        "load_balance": balance_chart(label_modes(reads.balance_cells(con, run_id), modes)),
        "rank_network": rank_network_chart(label_modes(reads.rank_network_cells(con, run_id), modes)),
        "history": history(*history_rows(con, run_id)),
        "roofline": roofline_chart(label_modes(reads.roofline_cells(con, run_id), modes)),
        "capacity_pareto": pareto_chart(capacities, tuning, WIDTH, HEIGHT),
        "engines_side_by_side": engines_chart(label_modes(engine_cells(con, run_id), modes), WIDTH, HEIGHT),
        # every run of the campaign at two or more sizes: servebench's own cost per stage against hosts
        "orchestration_cost": orchestration_cost_chart(reads.stage_costs(con, run_id)),
        # lengths sent and served, per turn, prefix cache: workload cells only
        **workload_charts(con, run_id, lambda rows: label_modes(rows, modes)),
    }
    return {name: chart for name, chart in charts.items() if chart is not None}


def label_capacities(found: list[dict], tuning: dict | None,
                     modes: dict[str, bool]) -> tuple[list[dict], dict | None]:
    """The capacity rows and the tuner's verdict with their configurations as drawn (`mode_label`)."""
    if not any(is_oversubscribed(r["mode"], modes) for r in found):
        return found, tuning
    found = label_modes(found, modes)
    if tuning:
        tuning = {**tuning, **{key: mode_label(tuning[key], modes) for key in ("default_mode", "best_mode")
                               if tuning.get(key)}}
        if tuning.get("pareto"):
            tuning["pareto"] = json.dumps([mode_label(m, modes) for m in json.loads(tuning["pareto"])])
    return found, tuning


def history_rows(con: Connection, run_id: str) -> tuple[list[dict], list[dict]]:
    """Nights of the run's series up to the run (output throughput, and every metric with a
    finding), and the findings of those series up to the run."""
    points = {r["series_id"]: cell_point(r["cell_key"]) for r in run_series_points(con, run_id)}
    if not points:
        return [], []
    changes = changes_until(con, list(points), run_id)
    metrics = sorted({"output_throughput"} | {c["metric"] for c in changes})
    nights = nights_until(con, list(points), metrics, run_id)
    firsts: dict[tuple, dict] = {}
    for c in changes:      # one mark per change (it is reported again every night it stays open)
        firsts.setdefault((c["series_id"], c["metric"], c["first_bad_run"]), c)
    for row in [*nights, *firsts.values()]:
        row["point"] = points[row["series_id"]]
    return nights, list(firsts.values())


def run_report(con: Connection, run_id: str, out_dir: Path) -> Path:
    """Write <out_dir>/report.html (every chart), and charts/<name>.png and .svg; return the HTML path."""
    info = reads.run_header(con, run_id)
    if info is None:
        raise ValueError(f"no run {run_id!r} in the warehouse")
    charts = build_charts(con, run_id)
    out_dir.mkdir(parents=True, exist_ok=True)
    chart_dir = out_dir / "charts"
    chart_dir.mkdir(exist_ok=True)
    # once per chart: validating inline rows against the Vega-Lite schema was most of a report's minute (the
    # browser and vl-convert check the spec as they render it; tests/e2e/test_report_browser.py renders every chart)
    specs = {name: chart.to_json(indent=None, validate=False) for name, chart in charts.items()}
    for name, spec in specs.items():
        svg = vlc.vegalite_to_svg(spec)
        (chart_dir / f"{name}.svg").write_text(svg)
        # rasterized from that SVG: the same bytes as vegalite_to_png, without rendering the chart twice
        (chart_dir / f"{name}.png").write_bytes(vlc.svg_to_png(svg, scale=1.5))
    cells = sorted(reads.report_cells(con, run_id), key=lambda cell: (cell["mode"], cell["cell_key"]))
    gates = reads.gates(con, run_id)
    spec = run_spec(con, run_id)
    cpu_by_mode = server_cpu_models(spec, run_nodes(con, run_id))
    page = _page(f"servebench run {run_id}", info["campaign"], specs,
                 first_screen(con, run_id, spec) + history_section(con, run_id),
                 roofline_note(reads.roofline_cells(con, run_id))
                 + capacity_section(capacity_rows(con, run_id), tuning_row(con, run_id))
                 + engines_section(engine_cells(con, run_id))
                 + cell_table(cells, gates, cpu_by_mode, oversubscribed_modes(spec))
                 + spread_table(run_spreads(con, run_id))
                 + run_facts(run_id, reads.run_times(con, run_id) or {}))
    path = out_dir / "report.html"
    path.write_text(page)
    return path


def first_screen(con: Connection, run_id: str, spec: str | dict | None) -> str:
    """The answer first: the line of context (hardware as measured, engine, model, duration) and the
    summary per load point (`summary_table.py`)."""
    modes = oversubscribed_modes(spec)
    times = reads.run_times(con, run_id) or {}
    servers = label_modes(reads.server_starts(con, run_id), modes)
    context = context_line(reads.server_hardware(con, run_id), servers, spec, times.get("seconds"))
    points = point_summaries(label_modes(reads.report_cells(con, run_id), modes),
                             label_modes(reads.roofline_cells(con, run_id), modes), slo_limits(spec),
                             run_spreads(con, run_id), label_modes(reads.predicted_cells(con, run_id), modes))
    return f'<p class="context" id="context">{html.escape(context)}</p>' + summary_html(points, slo_limits(spec))


def cell_table(cells: list[dict], gates: list[dict], cpu_by_mode: dict[str, str] | None = None,
               modes: dict[str, bool] | None = None) -> str:
    """Every cell with its verdicts (status, correctness gate, validity and why, and an open-loop
    schedule that realized a rate off the one asked), its throughput and latency percentiles and the
    CPU model of its mode's server nodes (`cpu_by_mode`, from `server_cpu_models`), and each mode's
    gate: a chart shows numbers, this says which of them to trust. A cell of a mode marked
    oversubscribed (`modes`) says so beside its key."""
    head = "<tr><th>cell</th><th>status</th><th>gate</th><th>valid</th><th>tok/s</th>" \
           "<th>TTFT p50 / p99 (ms)</th><th>TPOT p50 / p99 (ms)</th><th>server CPU</th><th>client CPU</th>" \
           "<th>invalid because / error</th></tr>"
    body = []
    for c in cells:
        valid = validity_word(c["valid"])
        busy = "-" if c["client_cpu_fraction"] is None else \
            f"{c['client_cpu_fraction']:.0%} of CPU {c['client_cpus']}"
        rate_note = reads.schedule_note(c["offered_rate"], c["realized_rate"])
        why = cell_notes(c["error"], list(c["invalid_reasons"] or []) + ([rate_note] if rate_note else []))
        tokens = throughput_text(c["output_throughput"])
        flagged = ' class="bad"' if c["valid"] is False or c["status"] != "completed" else ""
        tag = " <b>(oversubscribed)</b>" if modes and is_oversubscribed(c["mode"], modes) else ""
        cpu = mode_cpu_model(c["mode"], cpu_by_mode) if cpu_by_mode else "-"
        body.append(f"<tr{flagged}><td>{html.escape(c['cell_key'])}{tag}</td><td>{c['status']}</td>"
                    f"<td>{c['correctness'] or '-'}</td><td>{valid}</td><td>{tokens}</td>"
                    f"<td>{_pair(c.get('ttft_p50_ms'), c.get('ttft_p99_ms'), '.1f')}</td>"
                    f"<td>{_pair(c.get('tpot_p50_ms'), c.get('tpot_p99_ms'), '.2f')}</td>"
                    f"<td>{html.escape(cpu)}</td><td>{busy}</td><td>{html.escape(why)}</td></tr>")
    gate_rows = "".join(f"<li><b>{html.escape(g['mode'])}</b>: {g['correctness'] or 'not gated'}"
                        f"{' - ' + html.escape(g['correctness_detail']) if g['correctness_detail'] else ''}</li>"
                        for g in gates)
    return (f'<section id="cells"><h2>Cells</h2><table class="cells">{head}{"".join(body)}</table>'
            f"<h3>Correctness gate per mode</h3><ul>{gate_rows}</ul></section>")


def _pair(p50: float | None, p99: float | None, fmt: str) -> str:
    """'12.3 / 45.6' ('-' for a percentile not measured)."""
    return " / ".join("-" if v is None else format(v, fmt) for v in (p50, p99))


SPREAD_HEADINGS = {"output_throughput": "tok/s", "request_throughput": "req/s", "ttft_p50_ms": "TTFT p50 ms",
                   "ttft_p99_ms": "TTFT p99 ms", "tpot_p50_ms": "TPOT p50 ms", "e2el_p50_ms": "E2EL p50 ms",
                   "goodput": "goodput req/s"}


def spread_table(spreads: dict[PointMetric, Spread]) -> str:
    """Each load point measured validly at least twice: every main figure as the median of its
    repeats ±CV [bootstrap 95% interval] (the `cell_dispersion` view's numbers); empty without
    repeats."""
    points = sorted({point for (point, _), s in spreads.items() if s.repeats >= 2})
    if not points:
        return ""
    metrics = [m for m in SPREAD_METRICS if any((p, m) in spreads for p in points)]
    head = "<tr><th>load point</th><th>repeats</th>" + "".join(f"<th>{SPREAD_HEADINGS[m]}</th>" for m in metrics) \
        + "</tr>"
    body = []
    for point in points:
        figures = [spreads.get((point, m)) for m in metrics]
        repeats = max(s.repeats for s in figures if s is not None)
        body.append(f"<tr><td>{html.escape(point)}</td><td>{repeats}</td>"
                    + "".join(f"<td>{'-' if s is None else s.text()}</td>" for s in figures) + "</tr>")
    return (f'<section id="spread"><h2>Spread over repeats</h2><p class="sub">median of the valid repeats '
            f"±coefficient of variation [bootstrap 95% interval of the median]; with 2 to 5 repeats the interval "
            f"is their range, which holds the true median with 50% (2 repeats) to 94% (5) chance, not 95%</p>"
            f'<table class="cells">{head}{"".join(body)}</table></section>')


def _page(title: str, heading: str, specs: dict[str, str], top_html: str = "", cells_html: str = "") -> str:
    """One HTML page: the heading, `top_html` (the first screen: context line and summary), one div per
    chart (`specs`: name -> its Vega-Lite JSON), then the tables and the run's identity (`cells_html`);
    the Vega/Vega-Lite/vega-embed bundle inlined once. The charts' calls are a module script after the
    bundle's (module scripts run in document order, the bundle's first: it puts vegaEmbed on window)."""
    divs, calls = [], []
    for index, (name, spec) in enumerate(specs.items()):
        divs.append(f'<section><div id="chart-{index}" class="chart" data-name="{name}"></div></section>')
        calls.append(f"vegaEmbed('#chart-{index}', {spec}, {{renderer: 'svg', actions: false}})"
                     ".catch(e => console.error(e));")
    if not specs:
        divs.append("<p>No cell of this run was measured.</p>")
    script = "\n".join(calls)
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>body{{font-family:sans-serif;margin:16px 24px}} section{{margin:20px 0}} h1{{margin:0;font-size:24px}}
h2{{font-size:18px;margin:12px 0 6px}} .sub{{color:#555;margin-top:4px}}
#summary .sub{{font-size:12px;max-width:1050px}}
.context{{font-size:13px;margin:6px 0 0;padding:4px 8px;background:#f3f3f3;border-left:3px solid #888}}
table.cells{{border-collapse:collapse;font-size:13px}}
table.cells td,table.cells th{{border:1px solid #ccc;padding:2px 6px;text-align:left}}
table.summary td{{white-space:nowrap}} table.summary .ci{{color:#666;font-size:11px}}
tr.won td{{font-weight:bold}}
table.summary td.verdict{{font-weight:bold;background:#eef6ee;white-space:normal;min-width:220px;max-width:320px}}
td.verdict.none{{background:#f6f6e6}} .miss{{color:#b00;font-weight:normal}}
tr.bad{{background:#fdd}}</style></head>
<body><h1>{html.escape(heading)}</h1>
{top_html}
{''.join(divs)}
{cells_html}
<script type="module">{vega_bundle()}</script>
<script type="module">{script}</script>
</body></html>"""
