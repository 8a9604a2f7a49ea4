"""What every chart of the report says the same way, so that no chart can mislead: a load
point's label, a mode's label (an oversubscribed mode says so wherever it is drawn), a fraction as a
percentage, a subtitle that fits the chart, and the one line said instead of a chart with nothing
to show. Pure functions of plain rows and the run's normalized campaign; no warehouse, no browser."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterable, Sequence

import altair as alt

OVERSUBSCRIBED = "oversubscribed"
SUBTITLE_WIDTH = 110         # characters a subtitle line holds before it wraps (a chart is about 800 px wide)


def load_point_label(cell: dict) -> str:
    """A load point as every chart and table names it: '1 client', '4 clients' (closed loop), '2 req/s'
    (open loop, the rate offered: the campaign's, as the cell key names it)."""
    if cell.get("load_kind") == "closed" or (cell.get("clients") is not None and cell.get("offered_rate") is None):
        clients = cell.get("clients")
        return "? clients" if clients is None else f"{clients} client{'' if clients == 1 else 's'}"
    rate = cell.get("offered_rate")
    return "? req/s" if rate is None else f"{rate:.4g} req/s"


def load_point_order(cells: Iterable[dict]) -> list[str]:
    """The load points' labels in load order: closed loop by clients, then open loop by rate (not
    as text, where '10 req/s' comes before '2 req/s')."""
    def key(cell: dict) -> tuple:
        closed = load_point_label(cell).endswith(("client", "clients"))
        return (0, cell.get("clients") or 0) if closed else (1, cell.get("offered_rate") or 0)
    return list(dict.fromkeys(load_point_label(c) for c in sorted(cells, key=key)))


def _spec(spec: str | dict | None) -> dict:
    return json.loads(spec) if isinstance(spec, str) else (spec or {})


def _base_mode(name: str, modes: Sequence[str]) -> str | None:
    """The campaign mode a drawn name is of: the mode itself, a configuration of it (`tp1-mns8`) or
    a series of it (`tp1.prefix`, a workload's)."""
    served = name.split(".", 1)[0]
    found = [m for m in modes if served == m or served.startswith(m + "-")]
    return max(found, key=len) if found else None


def oversubscribed_modes(spec: str | dict | None) -> dict[str, bool]:
    """Each mode of the campaign and whether it is marked `oversubscribe: true` (more workers than the
    node's server CPUs, on purpose): what such a mode measures is the distributed path, not what it
    is worth."""
    return {m["name"]: bool(m.get("oversubscribe")) for m in _spec(spec).get("modes", [])}


def is_oversubscribed(name: str, oversubscribed: dict[str, bool]) -> bool:
    base = _base_mode(name, sorted(oversubscribed))
    return base is not None and oversubscribed[base]


def mode_label(name: str, oversubscribed: dict[str, bool]) -> str:
    """A mode (or a configuration or series of it) as drawn: 'tp2 (oversubscribed)' for a mode so marked."""
    return f"{name} ({OVERSUBSCRIBED})" if is_oversubscribed(name, oversubscribed) else name


def label_modes(rows: Iterable[dict], oversubscribed: dict[str, bool], field: str = "mode") -> list[dict]:
    """The rows with `field` as drawn (mode_label) and `oversubscribed` set, so every chart of them
    labels an oversubscribed mode the same way."""
    return [{**r, field: mode_label(r[field], oversubscribed) if r.get(field) else r.get(field),
             OVERSUBSCRIBED: bool(r.get(field)) and is_oversubscribed(r[field], oversubscribed)} for r in rows]


def slo_limits(spec: str | dict | None) -> dict[str, float]:
    """The campaign's SLO ({'ttft_p99_ms': 500, ...}); empty when none is set."""
    return dict(_spec(spec).get("slo") or {})


def slo_rules(slo: dict[str, float], metric: str) -> list[dict]:
    """The SLO limits on `metric` ('ttft', 'tpot'), one row each: its key, limit and label."""
    return [{"slo": key, "limit": limit, "label": f"SLO {metric.upper()} {key.split('_')[1]} ≤ {limit:g} ms"}
            for key, limit in sorted(slo.items()) if key.split("_")[0] == metric]


def server_cpu_models(spec: str | dict | None, nodes: Sequence[dict]) -> dict[str, str]:
    """Each mode's server nodes' CPU model ('AMD EPYC'; two models: 'A / B'): the mode's `nodes` when
    the campaign names them, else every node of the run but the load generator's own."""
    found = _spec(spec)
    client = ((found.get("load") or {}).get("client") or {}).get("node")
    models = {n["node"]: n.get("cpu_model") or "?" for n in nodes}
    by_mode = {}
    for mode in found.get("modes", []):
        names = mode.get("nodes") or [n for n in models if n != client] or list(models)
        by_mode[mode["name"]] = " / ".join(dict.fromkeys(models.get(n, "?") for n in names))
    return by_mode


def mode_cpu_model(name: str, by_mode: dict[str, str]) -> str:
    """`server_cpu_models` for a drawn mode name (a configuration of a mode has its mode's nodes)."""
    base = _base_mode(name, sorted(by_mode))
    return by_mode[base] if base else "-"


def subtitle_lines(text: str, width: int = SUBTITLE_WIDTH) -> list[str]:
    """A subtitle as lines of at most `width` characters, broken between its clauses ('; ') where it
    can: one long line made a chart's PNG three times its width."""
    lines: list[str] = []
    for clause in text.split("; "):
        if lines and len(lines[-1]) + 2 + len(clause) <= width:
            lines[-1] += "; " + clause
        else:
            if lines:
                lines[-1] += ";"
            lines += textwrap.wrap(clause, width) or [""]
    return lines


def titled(title: str, subtitle: str) -> alt.TitleParams:
    return alt.TitleParams(title, subtitle=subtitle_lines(subtitle))


def nothing_to_show(title: str, why: str) -> alt.Chart:
    """The one line said instead of a chart whose plot would be empty or say nothing (every value 0,
    one point a line normalized to itself): '<title>: nothing to show (<why>)'. A chart still, so the
    report's page and its PNG both say it where the chart would be."""
    line = f"{title}: nothing to show ({why})"
    return alt.Chart(alt.Data(values=[{"line": line}])).mark_text(
        align="left", baseline="middle", fontSize=13, color="#555").encode(
        text="line:N", x=alt.value(0), y=alt.value(10)).properties(
        width=max(200, 7 * len(line)), height=20, description=line)
