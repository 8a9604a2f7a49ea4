"""Reports: altair charts from the warehouse, written as self-contained HTML.

Reads only the warehouse, so a report can be rendered again for any past run. The
Vega JavaScript is inlined (no CDN): the page opens on an air-gapped cluster.
"""

from __future__ import annotations

from pathlib import Path

import altair as alt
import duckdb

CELL_COLUMNS = """cell_key, mode, tp, pp, executor, load_kind, rate, clients, "repeat", status,
    completed, failed, request_throughput, output_throughput, ttft_p50_ms, ttft_p99_ms, tpot_p50_ms"""


def rows(con: duckdb.DuckDBPyConnection, sql: str, params: list | None = None) -> list[dict]:
    cursor = con.execute(sql, params or [])
    names = [d[0] for d in cursor.description]
    return [dict(zip(names, row)) for row in cursor.fetchall()]


def latest_run_id(con: duckdb.DuckDBPyConnection, campaign: str | None = None) -> str | None:
    sql = "select run_id from runs" + (" where campaign = ?" if campaign else "") + " order by started_at desc limit 1"
    found = con.execute(sql, [campaign] if campaign else []).fetchone()
    return found[0] if found else None


def throughput_vs_clients(cells: list[dict]) -> alt.Chart:
    closed = [c for c in cells if c["load_kind"] == "closed" and c["output_throughput"] is not None]
    return alt.Chart(alt.Data(values=closed)).mark_line(point=True).encode(
        x=alt.X("clients:Q", title="parallel clients (closed loop)"),
        y=alt.Y("mean(output_throughput):Q", title="output throughput (tokens/s)"),
        color=alt.Color("mode:N", title="mode"),
        tooltip=["cell_key:N", "mode:N", "clients:Q", alt.Tooltip("mean(output_throughput):Q", format=".1f"),
                 alt.Tooltip("mean(ttft_p50_ms):Q", title="TTFT p50 (ms)", format=".1f")],
    ).properties(title="Throughput vs parallel clients, per mode", width=420, height=280)


def throughput_vs_rate(cells: list[dict]) -> alt.Chart:
    opened = [c for c in cells if c["load_kind"] == "open" and c["output_throughput"] is not None]
    return alt.Chart(alt.Data(values=opened)).mark_line(point=True).encode(
        x=alt.X("rate:Q", title="offered request rate (req/s, open loop)"),
        y=alt.Y("mean(output_throughput):Q", title="output throughput (tokens/s)"),
        color=alt.Color("mode:N", title="mode"),
        tooltip=["cell_key:N", "mode:N", "rate:Q", alt.Tooltip("mean(output_throughput):Q", format=".1f"),
                 alt.Tooltip("mean(ttft_p50_ms):Q", title="TTFT p50 (ms)", format=".1f")],
    ).properties(title="Throughput vs offered rate, per mode", width=420, height=280)


def run_report(con: duckdb.DuckDBPyConnection, run_id: str, out_dir: Path) -> Path:
    """Write <out_dir>/report.html for one run and return its path."""
    run = rows(con, "select campaign, started_at, status, spec_hash from runs where run_id = ?", [run_id])
    if not run:
        raise ValueError(f"no run {run_id!r} in the warehouse")
    cells = rows(con, f"select {CELL_COLUMNS} from cells where run_id = ? order by cell_key", [run_id])
    info = run[0]
    charts = [chart for chart, kind in ((throughput_vs_clients(cells), "closed"), (throughput_vs_rate(cells), "open"))
              if any(c["load_kind"] == kind for c in cells)]
    page = alt.hconcat(*charts) if charts else alt.Chart(alt.Data(values=[{}])).mark_text(text="no cells measured")
    page = page.properties(title=f"servebench run {run_id}: campaign {info['campaign']} ({info['status']})")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "report.html"
    page.save(str(path), inline=True)
    return path
