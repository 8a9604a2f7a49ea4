"""The report's first screen: the answer to "which mode serves the most within the SLO, by how much,
and on what". One line of context (the server nodes' CPU, cores, measured memory bandwidth and
matmul peak, the engine and its version, the model's shape and dtype, the run's duration), then one
row per load point and mode: output throughput, TTFT and TPOT p50/p99 (the median of the valid
repeats with its bootstrap 95% interval where the point was repeated), the share of the node's
roofline, the performance model's prediction for it (docs/performance-model.md) and how the measurement
compares, and per load point the winner and its margin, or "no significant difference".

The rule (WINNER_RULE): among the modes that meet the campaign's SLO at the point (every measured
mode when the campaign sets none), the one with the highest median output throughput wins; when
its 95% interval overlaps the runner-up's, the point says "no significant difference". A point
measured once per mode has no interval: its winner is named with "one repeat, no interval".

Pure functions of plain rows (the report's cells, the roofline rows, `reads.server_hardware`,
`reads.server_starts`, `reads.run_times`) and the run's spreads; no warehouse, no browser.
"""

from __future__ import annotations

import html
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from servebench.analysis.cell_dispersion import PointMetric
from servebench.analysis.charts import load_point_label, load_point_order
from servebench.analysis.dispersion import Spread, spread
from servebench.analysis.regression.series import cell_point

WINNER_RULE = ("winner: the highest median output throughput among the modes within the SLO at that load point "
               "(every mode when the campaign sets none); no significant difference: the winner's bootstrap 95% "
               "interval of the median overlaps the runner-up's")
FIGURES = (("output_throughput", "output throughput [tok/s]", ".1f"), ("ttft_p50_ms", "TTFT p50 [ms]", ".1f"),
           ("ttft_p99_ms", "TTFT p99 [ms]", ".1f"), ("tpot_p50_ms", "TPOT p50 [ms]", ".2f"),
           ("tpot_p99_ms", "TPOT p99 [ms]", ".2f"))
NO_DIFFERENCE = "no significant difference"


@dataclass(frozen=True)
class ModeAtPoint:
    """One mode at one load point: its figures over the valid repeats, whether it met the SLO
    (None: no SLO), and its median share of the roofline (decode, prefill; None: not judged)."""

    mode: str
    figures: dict[str, Spread]
    repeats: int
    within_slo: bool | None
    decode_fraction: float | None = None
    prefill_fraction: float | None = None
    prediction: Prediction | None = None


@dataclass(frozen=True)
class Prediction:
    """The performance model's figures for one mode at one load point (the median over its cells) and
    what the measurement made of them: measured / predicted throughput, what bounds its steps."""

    output_throughput: float | None
    tpot_p50_ms: float | None
    throughput_ratio: float | None
    bound: str | None
    calibrated: bool


@dataclass(frozen=True)
class PointSummary:
    load_point: str
    modes: list[ModeAtPoint]
    winner: str | None
    verdict: str
    missing: list[str] = field(default_factory=list)     # modes with no valid measurement at the point


def point_key(cell: dict) -> str:
    """A load point as the summary names it: '4 clients', and its link setting and workload when set."""
    extras = [cell[k] for k in ("link", "workload_name") if cell.get(k)]
    return " ".join([load_point_label(cell), *extras])


def _measured(cell: dict) -> bool:
    return cell.get("status", "completed") == "completed" and cell.get("valid") is not False \
        and cell.get("output_throughput") is not None


def _figure(values: list[float], known: Spread | None) -> Spread | None:
    """The warehouse's spread of the point (`cell_dispersion`'s numbers) when it has this metric, else
    the same seeded bootstrap computed from the values."""
    if known is not None and known.repeats == len(values):
        return known
    return spread(values) if values else None


def within_slo(cells: Sequence[dict], figures: dict[str, Spread], slo: dict[str, float]) -> bool | None:
    """Whether a mode met every SLO limit at a point: each limited figure's median at or under its limit
    (a figure the summary does not hold: every repeat's `slo_met`). None: the campaign sets no SLO."""
    if not slo:
        return None
    for key, limit in slo.items():
        if key in figures:
            if figures[key].median > limit:
                return False
        elif key in cells[0]:
            values = [c[key] for c in cells if c.get(key) is not None]
            if not values or statistics.median(values) > limit:
                return False
        elif not all(c.get("slo_met") for c in cells):
            return False
    return True


def verdict(modes: Sequence[ModeAtPoint]) -> tuple[str | None, str]:
    """The winner at a point and what the summary says of it (WINNER_RULE)."""
    eligible = [m for m in modes if m.within_slo is not False and "output_throughput" in m.figures]
    if not eligible:
        return None, "no mode within the SLO" if modes else "no valid measurement"
    ranked = sorted(eligible, key=lambda m: m.figures["output_throughput"].median, reverse=True)
    best = ranked[0]
    if len(ranked) == 1:
        alone = "the only mode within the SLO" if best.within_slo else "the only mode measured"
        return best.mode, f"{best.mode} ({alone})"
    top, second = best.figures["output_throughput"], ranked[1].figures["output_throughput"]
    overlap = top.overlaps(second)
    if overlap:
        return None, f"{NO_DIFFERENCE} ({best.mode} vs {ranked[1].mode}: 95% intervals overlap)"
    margin = f"{top.median / second.median:.2f}x, {top.median - second.median:+.1f} tok/s" if second.median else \
        f"{top.median - second.median:+.1f} tok/s"
    note = "" if overlap is False else "; one repeat, no interval"
    return best.mode, f"{best.mode} by {margin} over {ranked[1].mode}{note}"


def _median(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def mode_predictions(rows: Sequence[dict]) -> dict[tuple[str, str], Prediction]:
    """(load point, mode) -> the median of its cells' predictions (`reads.predicted_cells`)."""
    grouped: dict[tuple[str, str], list[dict]] = {}
    for row in rows:
        grouped.setdefault((point_key(row), row["mode"]), []).append(row)
    return {key: Prediction(_median([r.get("output_throughput") for r in found]),
                            _median([r.get("tpot_p50_ms") for r in found]),
                            _median([r.get("throughput_ratio") for r in found]),
                            statistics.mode([r.get("bound") for r in found]),
                            any(str(r.get("efficiency_source") or "").startswith("fitted") for r in found))
            for key, found in grouped.items()}


def point_summaries(cells: Sequence[dict], roofline: Sequence[dict] = (), slo: dict[str, float] | None = None,
                    spreads: dict[PointMetric, Spread] | None = None,
                    predictions: Sequence[dict] = ()) -> list[PointSummary]:
    """One summary per load point (load order), each with every mode measured at it (mode order) and the
    performance model's prediction for it (`predictions`: `reads.predicted_cells`)."""
    slo, spreads = slo or {}, spreads or {}
    predicted = mode_predictions(predictions)
    modes = list(dict.fromkeys(c["mode"] for c in sorted(cells, key=lambda c: c["mode"])))
    by_point: dict[str, dict[str, list[dict]]] = {}
    order = {label: k for k, label in enumerate(load_point_order(cells))}
    for cell in sorted(cells, key=lambda c: (order.get(load_point_label(c), 0), point_key(c))):
        by_point.setdefault(point_key(cell), {}).setdefault(cell["mode"], []).append(cell)
    fractions: dict[tuple[str, str], dict[str, list[float]]] = {}
    for row in roofline:
        if row.get("judged"):
            found = fractions.setdefault((point_key(row), row["mode"]), {"decode": [], "prefill": []})
            for phase in ("decode", "prefill"):
                if row.get(f"{phase}_fraction") is not None:
                    found[phase].append(row[f"{phase}_fraction"])
    summaries = []
    for point, of_modes in by_point.items():
        at_point = []
        for mode in modes:
            used = [c for c in of_modes.get(mode, []) if _measured(c)]
            if not used:
                continue
            figures = {}
            for metric, _, _ in FIGURES:
                values = [c[metric] for c in used if c.get(metric) is not None]
                known = spreads.get((cell_point(used[0].get("cell_key") or ""), metric))
                if (figure := _figure(values, known)) is not None:
                    figures[metric] = figure
            roof = fractions.get((point, mode), {})
            at_point.append(ModeAtPoint(
                mode, figures, len(used), within_slo(used, figures, slo),
                statistics.median(roof["decode"]) if roof.get("decode") else None,
                statistics.median(roof["prefill"]) if roof.get("prefill") else None, predicted.get((point, mode))))
        winner, said = verdict(at_point)
        missing = [m for m in modes if m in of_modes and m not in {a.mode for a in at_point}]
        summaries.append(PointSummary(point, at_point, winner, said, missing))
    return summaries


def _cell(figure: Spread | None, fmt: str) -> str:
    if figure is None:
        return "-"
    text = format(figure.median, fmt)
    if figure.low is not None and figure.high is not None and format(figure.low, fmt) != format(figure.high, fmt):
        text += f' <span class="ci">[{figure.low:{fmt}}, {figure.high:{fmt}}]</span>'
    return text


def _roofline(mode: ModeAtPoint) -> str:
    if mode.decode_fraction is None and mode.prefill_fraction is None:
        return "not measured"
    return " · ".join(f"{phase} {value:.0%}" for phase, value in (("decode", mode.decode_fraction),
                                                                   ("prefill", mode.prefill_fraction))
                      if value is not None)


def _predicted(mode: ModeAtPoint) -> str:
    """'312 tok/s · TPOT 11.2 ms · measured 0.94x · bandwidth-bound', or '-' with no prediction."""
    p = mode.prediction
    if p is None or p.output_throughput is None:
        return "-"
    parts = [f"{p.output_throughput:,.1f} tok/s"]
    if p.tpot_p50_ms is not None:
        parts.append(f"TPOT {p.tpot_p50_ms:.2f} ms")
    if p.throughput_ratio is not None:
        parts.append(f"measured {p.throughput_ratio:.2f}x")
    if p.bound:
        parts.append(f"{p.bound}-bound")
    return html.escape(" · ".join(parts))


def prediction_note(points: Sequence[PointSummary]) -> str | None:
    """What the 'predicted' column is, said once under the table (None: no mode has a prediction)."""
    predictions = [m.prediction for p in points for m in p.modes if m.prediction is not None]
    if not predictions:
        return None
    how = ("calibrated on the run's TP=1 cells (their own ratio is near 1 by construction)"
           if any(p.calibrated for p in predictions) else "with its default efficiencies (no TP=1 cell to fit)")
    return (f"predicted: the performance model's output throughput and TPOT p50 for the point (docs/"
            f"performance-model.md), {how}; measured Nx: measured throughput / predicted")


def summary_html(points: Sequence[PointSummary], slo: dict[str, float] | None = None) -> str:
    """The summary table: a row per load point and mode, the point's verdict beside its rows."""
    if not points:
        return '<section id="summary"><h2>Summary</h2><p>No cell of this run was measured.</p></section>'
    head = ("<tr><th>load point</th><th>mode</th>" + "".join(f"<th>{title}</th>" for _, title, _ in FIGURES)
            + "<th>roofline share</th><th>predicted</th><th>winner at this load point</th></tr>")
    body = []
    for point in points:
        rows = point.modes or []
        span = max(1, len(rows) + len(point.missing))
        verdict_cell = (f'<td rowspan="{span}" class="verdict{" none" if point.winner is None else ""}">'
                        f"{html.escape(point.verdict)}</td>")
        first = True
        for mode in rows:
            won = ' class="won"' if mode.mode == point.winner else ""
            slo_note = ' <span class="miss">(misses the SLO)</span>' if mode.within_slo is False else ""
            cells = "".join(f"<td>{_cell(mode.figures.get(metric), fmt)}</td>" for metric, _, fmt in FIGURES)
            lead = f'<td rowspan="{span}">{html.escape(point.load_point)}</td>' if first else ""
            body.append(f"<tr{won}>{lead}<td>{html.escape(mode.mode)}{slo_note}</td>{cells}"
                        f"<td>{_roofline(mode)}</td><td>{_predicted(mode)}</td>{verdict_cell if first else ''}</tr>")
            first = False
        for name in point.missing:
            lead = f'<td rowspan="{span}">{html.escape(point.load_point)}</td>' if first else ""
            body.append(f'<tr class="bad">{lead}<td>{html.escape(name)}</td>'
                        f'<td colspan="{len(FIGURES) + 2}">no valid measurement</td>'
                        f"{verdict_cell if first else ''}</tr>")
            first = False
    repeated = any(f.low is not None for p in points for m in p.modes for f in m.figures.values())
    limits = ", ".join(f"{key.removesuffix('_ms').replace('_', ' ').upper()} ≤ {limit:g} ms"
                       for key, limit in sorted((slo or {}).items()))
    notes = [f"SLO: {limits}" if limits else "the campaign sets no SLO",
             "median of the valid repeats" + (", [bootstrap 95% interval of the median] (with 2 to 5 repeats: "
                                               "their range)" if repeated else "; one repeat each, no interval"),
             WINNER_RULE]
    if (predicted := prediction_note(points)) is not None:
        notes.append(predicted)
    return (f'<section id="summary"><h2>Which mode serves the most</h2><table class="cells summary">{head}'
            f'{"".join(body)}</table><p class="sub">{html.escape("; ".join(notes))}</p></section>')


# the line of context above the summary


def _join(values: Sequence[str]) -> str:
    return " / ".join(dict.fromkeys(v for v in values if v)) or "?"


def _figures(values: Sequence[float | None], unit: str) -> str | None:
    known = [v for v in values if v is not None]
    if not known:
        return None
    low, high = min(known), max(known)
    return f"{low:,.0f} {unit}" if round(low) == round(high) else f"{low:,.0f}-{high:,.0f} {unit}"


def duration_text(seconds: float | None) -> str:
    """'35 s', '4 min 10 s', '2 h 05 min'; None: the run has not ended."""
    if seconds is None:
        return "not ended"
    whole = int(round(seconds))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60:02d} s"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def model_text(spec: dict, dtypes: Sequence[str]) -> str:
    """'tiny-llama (llama, 4 layers, hidden 128, 4 heads / 2 KV heads, vocab 1,024), dtype auto (served
    bfloat16)': the model's shape and dtype from the normalized campaign and the servers."""
    model = spec.get("model") or {}
    name = model.get("generate") or model.get("path") or "?"
    shape = [model.get("architecture")]
    if model.get("layers"):
        shape.append(f"{model['layers']} layers")
    if model.get("hidden"):
        shape.append(f"hidden {model['hidden']}")
    if model.get("heads"):
        shape.append(f"{model['heads']} heads / {model.get('kv_heads') or model['heads']} KV heads")
    if model.get("experts"):
        shape.append(f"{model['experts']} experts, {model.get('experts_per_token')} per token")
    if model.get("vocab_size"):
        shape.append(f"vocab {model['vocab_size']:,}")
    dtype = f"dtype {model.get('dtype') or '?'}"
    if model.get("quantization"):
        dtype += f", {model['quantization']}"
    served = _join(dtypes)
    if served != "?":
        dtype += f" (served {served})"
    inner = ", ".join(str(s) for s in shape if s)
    return f"{name}" + (f" ({inner})" if inner else "") + f", {dtype}"


def engine_text(spec: dict, servers: Sequence[dict]) -> str:
    """'vllm 0.32.0+cpu', one per engine; 'version not recorded' (and what the campaign asked for) when
    no build says."""
    engines: dict[str, list[str]] = {}
    for s in servers:
        engines.setdefault(s.get("engine") or (spec.get("engine") or {}).get("kind") or "?", []).append(
            s.get("engine_version") or "")
    if not engines:
        engines[(spec.get("engine") or {}).get("kind") or "?"] = []
    texts = []
    for engine, versions in engines.items():
        version = _join(versions)
        if version == "?":
            asked = next((e.get("package") for e in [spec.get("engine") or {}] + list(spec.get("engines") or [])
                          if isinstance(e, dict) and e.get("kind") == engine and e.get("package")), None)
            version = "version not recorded" + (f" (asked: {asked})" if asked else "")
        texts.append(f"{engine} {version}")
    return ", ".join(texts)


def hardware_text(nodes: Sequence[dict]) -> str:
    """The server nodes: CPU model, cores, memory bandwidth and matmul peak as measured (the roofline
    columns of `nodes`), "not measured" where they are not."""
    servers = [n for n in nodes if n.get("role") != "client"] or list(nodes)
    if not servers:
        return "nodes not recorded"
    count = f"{len(servers)} node{'' if len(servers) == 1 else 's'}"
    cores = _join([f"{len(n['cpus'])} of {n.get('physical_cores') or '?'} cores" if n.get("cpus") else
                   f"{n.get('physical_cores') or '?'} cores" for n in servers])
    memory = _figures([n["mem_total_bytes"] / 2**30 if n.get("mem_total_bytes") else None for n in servers], "GiB")
    bandwidth = _figures([n.get("mem_bandwidth_gbps") for n in servers], "GB/s")
    bf16 = _figures([n.get("matmul_peak_gflops_bf16") for n in servers], "GFLOP/s bf16")
    fp32 = _figures([n.get("matmul_peak_gflops_fp32") for n in servers], "GFLOP/s fp32")
    matmul = " / ".join(f for f in (bf16, fp32) if f) or "not measured"
    emulated = " (emulated: recorded, not judged)" if any(n.get("roofline_emulated") for n in servers) else ""
    return (f"{count} of {_join([n.get('cpu_model') or '?' for n in servers])}, {cores} each"
            + (f", {memory}" if memory else "")
            + f"; memory bandwidth {bandwidth or 'not measured'}; matmul {matmul}{emulated}")


def context_line(nodes: Sequence[dict], servers: Sequence[dict], spec: str | dict | None,
                 seconds: float | None) -> str:
    """The one line above the summary (plain text)."""
    found = json.loads(spec) if isinstance(spec, str) else (spec or {})
    dtypes = [s.get("served_dtype") or "" for s in servers]
    return " · ".join([hardware_text(nodes), f"engine {engine_text(found, servers)}",
                       f"model {model_text(found, dtypes)}", f"run {duration_text(seconds)}"])


def run_facts(run_id: str, times: dict) -> str:
    """The run's identity, below the charts: id, campaign, status, spec hash, start and end in UTC."""
    ended = f"{times['ended_utc']} UTC" if times.get("ended_utc") else "not ended"
    return (f'<section id="run"><h2>Run</h2><p class="sub">run {html.escape(run_id)} · campaign '
            f"{html.escape(times['campaign'])} · status {html.escape(times['status'])} · spec "
            f"{html.escape(times['spec_hash'])} · started {times['started_utc']} UTC · ended {ended}</p></section>")
