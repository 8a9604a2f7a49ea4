"""The report's charts that explain a parallel mode: how evenly the load spread over a
server's instances (vLLM's data-parallel engines dp0, dp1, or the replicas r0, r1 behind a balancer), and
how many bytes each node of a mode sent and received per request (the all-reduce of TP, the activations
of PP, the requests of DP and replicas).

Pure functions of the rows `reads.balance_cells` and `reads.rank_network_cells` give (modes already
labelled, `charts.label_modes`): each chart's data is built by a function of its own, so a test reads
the numbers drawn without a browser. A run whose servers had one instance each has no balance chart; a
run sampled on one node (every byte on lo) no network chart."""

from __future__ import annotations

import json

import altair as alt

from servebench.analysis.charts import load_point_label, load_point_order, nothing_to_show, titled

WIDTH, HEIGHT = 150, 200
MB = 1e6


def _data(values: list[dict]) -> alt.Data:
    return alt.Data(values=json.loads(json.dumps(values, default=str)))


def cell_label(row: dict) -> str:
    """A cell as the balance chart names its panel: 'dp2 · 4 clients' (a repeat after the first: ' #2')."""
    repeat = row.get("cell_key", "").rsplit(".r", 1)
    extra = f" #{int(repeat[1]) + 1}" if len(repeat) == 2 and repeat[1].isdigit() and int(repeat[1]) else ""
    return f"{row['mode']} · {load_point_label(row)}{extra}"


def balance_points(rows: list[dict]) -> list[dict]:
    """One point per cell and instance: what it served (`served`: requests finished, else tokens generated
    when the engine counts no requests: llama.cpp), its share of the cell's, and its queue. `measure`
    names which of the two `served` is."""
    by_requests = any(r.get("requests") is not None for r in rows)
    field = "requests" if by_requests else "generation_tokens"
    totals: dict[str, float] = {}
    for r in rows:
        totals[r["cell_id"]] = totals.get(r["cell_id"], 0.0) + (r.get(field) or 0.0)
    return [{"cell": cell_label(r), "cell_id": r["cell_id"], "mode": r["mode"], "load_point": load_point_label(r),
             "instance": r["instance"], "served": r.get(field),
             "measure": "requests finished" if by_requests else "tokens generated",
             "share": (r.get(field) or 0.0) / totals[r["cell_id"]] if totals[r["cell_id"]] else None,
             "even_share": 1 / r["instances"] if r.get("instances") else None,
             "waiting_mean": r.get("waiting_mean"), "waiting_max": r.get("waiting_max"),
             "running_mean": r.get("running_mean")} for r in rows]


def cell_order(rows: list[dict]) -> list[str]:
    """The panels: by mode, then load point in load order."""
    order = {label: k for k, label in enumerate(load_point_order(rows))}
    ranked = sorted(rows, key=lambda r: (r["mode"], order.get(load_point_label(r), 0), r.get("cell_key", "")))
    return list(dict.fromkeys(cell_label(r) for r in ranked))


def most_uneven(points: list[dict]) -> str:
    """The subtitle's clause on the least even cell: 'most uneven: dp2 · 4 clients, dp1 took 75% (even: 50%)'."""
    judged = [p for p in points if p["share"] is not None and p["even_share"]]
    if not judged:
        return "no instance served anything measured"
    worst = max(judged, key=lambda p: p["share"] - p["even_share"])
    if worst["share"] - worst["even_share"] < 0.005:
        return "every cell evenly spread"
    return (f"most uneven: {worst['cell']}, {worst['instance']} took {worst['share']:.0%} "
            f"(even: {worst['even_share']:.0%})")


def balance_chart(rows: list[dict]) -> alt.TopLevelMixin | None:
    """Requests finished per instance in each cell (bars), and each instance's queue (mean waiting bars,
    the most waiting in one sample as a tick); None for a run without instances."""
    if not rows:
        return None
    points = balance_points(rows)
    measure = points[0]["measure"]
    title = "Load balance across instances"
    if not any(p["served"] for p in points):
        return nothing_to_show(title, f"no {measure} counted in any of the {len({p['cell_id'] for p in points})} "
                                      "cells' instances")
    column = alt.Column("cell:N", title=None, sort=cell_order(rows))
    x = alt.X("instance:N", title=None, axis=alt.Axis(labelAngle=0))
    tooltip = ["cell:N", "instance:N", alt.Tooltip("served:Q", title=measure, format=".0f"),
               alt.Tooltip("share:Q", format=".0%"), alt.Tooltip("waiting_mean:Q", format=".2f"),
               alt.Tooltip("waiting_max:Q", format=".0f"), alt.Tooltip("running_mean:Q", format=".2f")]
    served = alt.Chart(_data(points)).mark_bar().encode(
        x=x, y=alt.Y("served:Q", title=f"{measure} in the cell"),
        color=alt.Color("instance:N", title="instance"),
        tooltip=tooltip).properties(width=WIDTH, height=HEIGHT).facet(column=column).properties(
        title=f"{measure} per instance")
    queued = [p for p in points if p["waiting_mean"] is not None]
    if not queued:
        bottom: alt.Chart | alt.FacetChart = nothing_to_show("requests waiting", "no queue sample inside any cell")
    elif not any(p["waiting_max"] for p in queued):
        bottom = nothing_to_show("requests waiting", "no request waited in any instance's queue in any sample")
    else:
        bars = alt.Chart().mark_bar(opacity=0.6).encode(
            x=x, y=alt.Y("waiting_mean:Q", title="requests waiting (bar: mean, tick: most)"),
            color=alt.Color("instance:N", title="instance"), tooltip=tooltip)
        ticks = alt.Chart().mark_tick(thickness=2, color="black").encode(x=x, y="waiting_max:Q", tooltip=tooltip)
        bottom = alt.layer(bars, ticks, data=_data(queued)).properties(width=WIDTH, height=HEIGHT).facet(
            column=column).properties(title="queue per instance")
    subtitle = (f"each bar one instance (a server's data-parallel engines dp0, dp1; replicas r0, r1) and what it "
                f"served during the cell, warm-up included; {most_uneven(points)}; queue: the engine's requests "
                "waiting, sampled inside the cell")
    return alt.vconcat(served, bottom).properties(title=titled(title, subtitle))


def node_label(row: dict) -> str:
    """A node as drawn: its name, and '(client)' for the load generator's own node."""
    return f"{row['node']} (client)" if row.get("role") == "client" else row["node"]


def network_points(rows: list[dict]) -> list[dict]:
    """One point per mode, node and direction: the bytes the node sent (received) over the mode's cells
    per request completed in them (KB/request, so load points and modes compare), and the totals."""
    grouped: dict[tuple[str, str], dict] = {}
    for r in rows:
        if r.get("bytes_sent") is None or r.get("bytes_received") is None:
            continue  # under two node samples in the cell
        group = grouped.setdefault((r["mode"], node_label(r)), {"sent": 0.0, "received": 0.0, "requests": 0.0,
                                                                 "cells": 0, "layout": layout(r),
                                                                 "ranks": ", ".join(r.get("ranks") or []) or "none"})
        group["sent"] += r["bytes_sent"]
        group["received"] += r["bytes_received"]
        group["requests"] += r.get("completed") or 0
        group["cells"] += 1
    points = []
    for (mode, node), g in grouped.items():
        for direction in ("sent", "received"):
            points.append({"mode": mode, "node": node, "direction": direction, "layout": g["layout"],
                           "ranks": g["ranks"], "bytes": g[direction], "cells": g["cells"], "requests": g["requests"],
                           "kb_per_request": g[direction] / g["requests"] / 1e3 if g["requests"] else None,
                           "mb": g[direction] / MB})
    return points


def layout(row: dict) -> str:
    """The mode's layout as the tooltip says it: 'tp2 pp1 dp1'."""
    parts = [f"{name}{row[name]}" for name in ("tp", "pp", "dp") if row.get(name) is not None]
    return " ".join(parts + (["ep"] if row.get("ep") else [])) or "?"


def rank_network_chart(rows: list[dict]) -> alt.TopLevelMixin | None:
    """Bytes each node sent and received per request, one panel per mode; None when the run's modes
    were sampled on fewer than two nodes (then nothing crosses a network)."""
    if len({r["node"] for r in rows}) < 2:
        return None
    points = network_points(rows)
    title = "Network bytes per node"
    if not any(p["bytes"] for p in points):
        return nothing_to_show(title, "no byte crossed an interface but lo in any cell")
    by_request = all(p["kb_per_request"] is not None for p in points)
    field, axis = ("kb_per_request", "bytes per request completed [KB]") if by_request else \
        ("mb", "bytes over the mode's cells [MB]")
    chart = alt.Chart(_data(points)).mark_bar().encode(
        x=alt.X("node:N", title=None, axis=alt.Axis(labelAngle=-30)),
        xOffset=alt.XOffset("direction:N", sort=["sent", "received"]),
        y=alt.Y(f"{field}:Q", title=axis),
        color=alt.Color("direction:N", title="direction", sort=["sent", "received"]),
        tooltip=["mode:N", "node:N", "layout:N", "ranks:N", "direction:N",
                 alt.Tooltip("mb:Q", title="MB", format=".3f"),
                 alt.Tooltip("kb_per_request:Q", title="KB per request", format=".2f"), "cells:Q", "requests:Q"],
    ).properties(width=WIDTH, height=HEIGHT).facet(column=alt.Column("mode:N", title="mode"))
    subtitle = ("each node's bytes on every interface but lo during the mode's cells (warm-up included) "
                f"{'over the requests they completed' if by_request else 'in total'}; "
                "the ranks each node held in its tooltip (server_ranks)")
    return chart.properties(title=titled(title, subtitle))
