"""The report's "orchestration cost against hosts" chart: what each stage of servebench's own machinery
(provision, placement, the servers' starts, release) took in every run of the campaign the warehouse holds,
against the hosts the run covered; with the orchestrator's own CPU time per host beside it, the figure that
says whether the orchestration scales (flat) or not. A campaign run at one size only has no chart.

Pure functions of the rows `reads.stage_costs` gives: one per run and stage (docs/scale.md)."""

from __future__ import annotations

import json

import altair as alt

from servebench.analysis.charts import titled

WIDTH, HEIGHT = 320, 220
STAGE_ORDER = ("provision", "placement", "shared-services", "server-start", "release")


def stage_points(rows: list[dict]) -> list[dict]:
    """One point per run and stage: its hosts, seconds, and the orchestrator's CPU seconds per host."""
    return [{"run_id": r["run_id"], "hosts": r["hosts"], "stage": r["stage"], "seconds": r["seconds"],
             "cpu_per_host": (r["orchestrator_cpu_s"] / r["hosts"]) if r.get("orchestrator_cpu_s") is not None
             and r["hosts"] else None} for r in rows if r.get("hosts")]


def orchestration_cost_chart(rows: list[dict]) -> alt.TopLevelMixin | None:
    """Seconds per stage against hosts (log2 axis), and the orchestrator's CPU time per host per stage; None
    when the campaign's runs cover fewer than two host counts (a single size says nothing of growth)."""
    points = stage_points(rows)
    if len({p["hosts"] for p in points}) < 2:
        return None
    data = alt.Data(values=json.loads(json.dumps(points)))
    order = [s for s in STAGE_ORDER if any(p["stage"] == s for p in points)] + \
        sorted({p["stage"] for p in points} - set(STAGE_ORDER))
    x = alt.X("hosts:Q", scale=alt.Scale(type="log", base=2), title="hosts [count, log2 axis]",
              axis=alt.Axis(values=sorted({p["hosts"] for p in points}), format="d"))   # ticks at the sizes run
    color = alt.Color("stage:N", sort=order, title="stage")
    base = alt.Chart(data).encode(x=x, color=color, tooltip=["run_id:N", "hosts:Q", "stage:N",
                                                            alt.Tooltip("seconds:Q", format=".2f"),
                                                            alt.Tooltip("cpu_per_host:Q", format=".3f")])
    seconds = base.mark_line(point=True).encode(y=alt.Y("mean(seconds):Q", title="stage wall time [s]")).properties(
        width=WIDTH, height=HEIGHT, title=titled("Stage wall time against hosts",
                                                 "each run of the campaign; server starts summed over its servers"))
    cpu = base.mark_line(point=True).encode(
        y=alt.Y("mean(cpu_per_host):Q", title="orchestrator CPU per host [s]")).properties(
        width=WIDTH, height=HEIGHT, title=titled("Orchestrator CPU time per host",
                                                 "its process and the node commands it waited for; "
                                                 "flat: the orchestration scales"))
    return alt.hconcat(seconds, cpu).properties(title=titled(
        "Orchestration cost against hosts", f"{len({p['run_id'] for p in points})} runs of this campaign"))
