"""The report's workload charts (docs/workloads.md): what a workload asked for and what
the server served, per request, so a distribution, a dataset or a trace can be seen to be the one
intended; how a conversation's turns grow (prompt length and TTFT per turn); and, for shared
prefixes, the prefix cache's hit rate beside TTFT, so its effect is visible.

Every chart is absent for a run whose cells have no workload (fixed lengths), so an older run's
report is unchanged. The reads are the `*_rows` functions; the rest are pure functions of their
rows (binning, per-turn medians, the altair charts), testable without a warehouse or a browser."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable

import altair as alt

from servebench.load.metrics import percentile
from servebench.warehouse import Connection, reads

MAX_BINS = 30                       # a histogram panel a few hundred pixels wide shows no more
PANEL_WIDTH, PANEL_HEIGHT = 300, 160
WHOLE_TICKS = 5                     # an axis of whole numbers spanning no more is given every one as a tick
SOURCES = {"sent": "#1f77b4", "served": "#ff7f0e"}


def length_count_rows(con: Connection, run_id: str) -> list[dict]:
    """How many measured requests of each workload had each length, sent and served (one row per
    workload, length, source and tokens, with its `requests`)."""
    return reads.workload_length_counts(con, run_id)


def turn_request_rows(con: Connection, run_id: str) -> list[dict]:
    """The measured requests of the run's sessions cells with their turn, the prompt length the
    server counted and their times (TTFT is computed by `turn_points`, as the load generator does)."""
    return reads.session_turn_requests(con, run_id)


def prefix_cell_rows(con: Connection, run_id: str) -> list[dict]:
    """The cells of the prefix-cache chart: those whose prefixes repeat and, beside them, every other
    cell with a hit rate (NULL: nothing looked up, or a server that says nothing of its cache); none
    in a run without repeating prefixes (no chart)."""
    return reads.prefix_cache_cells(con, run_id)


def bin_width(lowest: int, highest: int, most: int = MAX_BINS) -> int:
    """Whole tokens a bin: 1 (every length its own bar) when the lengths span at most `most`."""
    return max(1, math.ceil((highest - lowest + 1) / most))


def length_bins(counts: list[dict]) -> list[dict]:
    """`length_count_rows` binned: per workload and length (input, output) one set of bins shared by
    what was sent and what was served (so their bars overlay), each row a bin of one source with
    its `requests`. Bins without requests are left out; counts add up to the rows counted."""
    panels: dict[tuple[str, str], list[dict]] = {}
    for row in counts:
        panels.setdefault((row["workload"], row["length"]), []).append(row)
    binned = []
    for (workload, length), found in panels.items():
        lowest = min(r["tokens"] for r in found)
        width = bin_width(lowest, max(r["tokens"] for r in found))
        bins: dict[tuple[str, int], int] = {}
        for r in found:
            start = lowest + (r["tokens"] - lowest) // width * width
            bins[(r["source"], start)] = bins.get((r["source"], start), 0) + r["requests"]
        binned += [{"workload": workload, "length": length, "source": source, "start": start, "end": start + width,
                    "tokens": str(start) if width == 1 else f"{start}-{start + width - 1}", "requests": n}
                   for (source, start), n in sorted(bins.items())]
    return binned


def length_histograms(bins: list[dict]) -> alt.TopLevelMixin | None:
    """Per workload, the prompt and answer lengths as sent (asked for: outlined) and as served
    (the server's counts: filled), one row of two panels per workload."""
    if not bins:
        return None
    panels: dict[str, dict[str, list[dict]]] = {}      # workload -> length -> its bins (a length none landed: none)
    for b in bins:
        panels.setdefault(b["workload"], {}).setdefault(b["length"], []).append(b)
    panel_rows = [alt.hconcat(*(_histogram(found[length], f"{w}: {length} tokens")
                                for length in ("input", "output") if length in found))
                  for w, found in panels.items()]
    return alt.vconcat(*panel_rows).properties(title=alt.TitleParams(
        "Request lengths per workload: sent and served", subtitle=(
            "measured requests (no warm-up); outlined: what the workload asked for (prompt tokens sent, answer "
            "length asked), filled: what the server counted; equal bars overlay exactly")))


def _histogram(bins: list[dict], title: str) -> alt.LayerChart | alt.FacetChart:
    """One panel: the sent bins outlined over the served bins filled, one colour legend for both.
    A bin of one token is drawn centred on its length, and a narrow panel (one fixed length) is
    widened to 10 tokens, so a single bar reads as a length, not as a band between two."""
    color = alt.Color("source:N", title="requests", scale=alt.Scale(domain=list(SOURCES), range=list(SOURCES.values())))
    drawn = [{**b, "left": b["start"] - 0.5, "right": b["start"] + 0.5} if b["end"] - b["start"] == 1
             else {**b, "left": b["start"], "right": b["end"]} for b in bins]
    low, high = min(b["left"] for b in drawn), max(b["right"] for b in drawn)
    if high - low < 10:
        low, high = (low + high) / 2 - 5, (low + high) / 2 + 5
    encoding = dict(x=alt.X("left:Q", title="length [tokens]", scale=alt.Scale(domain=[low, high], nice=False),
                            axis=whole_axis(low, high)),
                    x2="right:Q", y=alt.Y("requests:Q", title="requests", stack=None,
                                          axis=whole_axis(0, max(b["requests"] for b in bins))), y2=alt.datum(0),
                    color=color, tooltip=["source:N", alt.Tooltip("tokens:N", title="tokens"), "requests:Q"])
    bins = drawn
    served = alt.Chart(_data([b for b in bins if b["source"] == "served"])).mark_bar(opacity=0.55).encode(**encoding)
    sent = alt.Chart(_data([b for b in bins if b["source"] == "sent"])).mark_bar(
        filled=False, strokeWidth=1.5).encode(**encoding)
    return alt.layer(served, sent).properties(width=PANEL_WIDTH, height=PANEL_HEIGHT, title=title)


def whole_axis(lowest: float, highest: float) -> alt.Axis:
    """An axis of whole numbers (counts, turns) over [lowest, highest]. `tickMinStep` alone is not
    enough: over a span of 1 or 2 Vega still asks d3 for 2 or 3 ticks, which steps by 0.5 (a sessions
    run of 3 turns had ticks at turn 0.5 and 1.5, and a histogram of 2 requests an axis labelled
    0 1 1 2 2), so a short span gets its whole numbers as the tick values (turns and counts from 0)."""
    if highest - lowest <= WHOLE_TICKS:
        return alt.Axis(format="d", values=list(range(math.ceil(lowest), math.floor(highest) + 1)))
    return alt.Axis(format="d", tickMinStep=1)


def turn_points(requests: list[dict]) -> list[dict]:
    """Per sessions cell and turn: the requests, those answered, and the medians (type 7, as the
    load summary's `turns`) of TTFT (first token from the send, ms) and of the prompt tokens the
    server counted, over the answered requests."""
    turns: dict[tuple[str, int], list[dict]] = {}
    for r in requests:
        turns.setdefault((r["cell_key"], r["turn"]), []).append(r)
    points = []
    for (cell_key, turn), found in sorted(turns.items()):
        answered = [r for r in found if r["error_kind"] is None and r["first_token_s"] is not None
                    and r["sent_s"] is not None]
        ttfts = sorted(1000 * (r["first_token_s"] - r["sent_s"]) for r in answered)
        prompts = sorted(r["input_tokens"] for r in answered if r["input_tokens"] is not None)
        points.append({"cell_key": cell_key, "mode": found[0]["mode"], "workload": found[0]["workload"],
                       "turn": turn, "requests": len(found), "answered": len(answered),
                       "ttft_p50_ms": percentile(ttfts, 50), "input_tokens_p50": percentile(prompts, 50)})
    return points


def turn_chart(points: list[dict]) -> alt.TopLevelMixin | None:
    """TTFT p50 and prompt length p50 against the turn, one line per sessions cell: with a growing
    context both rise with the turn, and the cells' lines show how concurrency changes that."""
    if not points:
        return None
    panels = []
    for field, axis in (("ttft_p50_ms", "TTFT p50 [ms]"), ("input_tokens_p50", "prompt length p50, served [tokens]")):
        panels.append(alt.Chart(_data(points)).mark_line(point=True).encode(
            x=alt.X("turn:Q", title="turn (0: the first)", axis=whole_axis(0, max(p["turn"] for p in points))),
            y=alt.Y(f"{field}:Q", title=axis), color=alt.Color("cell_key:N", title="cell"),
            tooltip=["cell_key:N", "turn:Q", "requests:Q", "answered:Q", alt.Tooltip(f"{field}:Q", format=".1f")],
        ).properties(width=PANEL_WIDTH + 80, height=PANEL_HEIGHT + 40, title=axis))
    return alt.hconcat(*panels).properties(title=alt.TitleParams(
        "Multi-turn sessions: per turn", subtitle="median over each turn's answered requests (no warm-up); each "
                                                  "prompt is the conversation so far, so both rise with the turn"))


def prefix_chart(cells: list[dict]) -> alt.TopLevelMixin | None:
    """Each cell's prefix-cache hit rate next to its TTFT (p50 bar, p99 tick), on one shared cell axis:
    a cell that reuses its prefixes answers sooner than one that cannot."""
    if not cells:
        return None
    shown = [{**c, "hit_rate": c["prefix_cache_hit_rate"] or 0.0, "hit_text": _hit_text(c["prefix_cache_hit_rate"]),
              "shape": prefix_shape(c["workload_block"])} for c in cells]
    y = alt.Y("cell_key:N", title="cell", sort=[c["cell_key"] for c in shown])
    tooltip: list[str | alt.Tooltip] = [
        "cell_key:N", "shape:N", alt.Tooltip("hit_text:N", title="hit rate"),
        alt.Tooltip("ttft_p50_ms:Q", format=".1f"), alt.Tooltip("ttft_p99_ms:Q", format=".1f"), "valid:N"]
    base = alt.Chart(_data(shown)).encode(y=y, tooltip=tooltip)
    mode = alt.Color("mode:N", title="mode")
    hits = (base.mark_bar().encode(x=alt.X("hit_rate:Q", title="prefix-cache hit rate [% of prompt tokens]",
                                           scale=alt.Scale(domain=[0, 1]), axis=alt.Axis(format="%")), color=mode)
            + base.mark_text(align="left", dx=4, color="black").encode(x="hit_rate:Q", text="hit_text:N"))
    ttft = (base.mark_bar().encode(x=alt.X("ttft_p50_ms:Q", title="TTFT p50 (bar), p99 (tick) [ms]"), color=mode)
            + base.mark_tick(color="black", thickness=2).encode(x="ttft_p99_ms:Q"))
    return alt.hconcat(hits.properties(width=PANEL_WIDTH, title="prefix-cache hit rate"),
                       ttft.properties(width=PANEL_WIDTH, title="TTFT")).properties(title=alt.TitleParams(
        "Prefix reuse: prefix-cache hit rate and TTFT", subtitle="prompt tokens the server's prefix cache supplied, "
        "over the cell; 'none': nothing was looked up (caching off) or the server does not say"))


def _hit_text(rate: float | None) -> str:
    return "none" if rate is None else f"{rate:.0%}"


def prefix_shape(workload: str | dict | None) -> str:
    """What repeats in a cell's prompts, from its workload block (its JSON as landed): 'G groups x P + Q
    tokens', 'S sessions x T turns', or that nothing is shared."""
    block = json.loads(workload) if isinstance(workload, str) else (workload or {})
    kind = block.get("kind")
    if kind == "sessions":
        return f"{block.get('sessions')} sessions x {block.get('turns')} turns"
    if kind != "shared-prefix":
        return f"{kind or 'fixed lengths'}: no shared prefix"
    suffix = block.get("suffix_len")
    if isinstance(suffix, dict):      # a length as landed: fixed (its value) or drawn (its distribution)
        suffix = suffix.get("value") or suffix.get("dist")
    return f"{block.get('groups')} groups x {block.get('prefix_len')} + {suffix} tokens"


def workload_charts(con: Connection, run_id: str, label: Callable[[list[dict]], list[dict]] | None = None
                    ) -> dict[str, alt.TopLevelMixin | None]:
    """The three charts by their report names (None where no cell of the run has their data); `label`
    gives rows their modes as drawn (the report's: an oversubscribed mode says so)."""
    named = label or (lambda rows: rows)
    return {"workload_lengths": length_histograms(length_bins(length_count_rows(con, run_id))),
            "session_turns": turn_chart(turn_points(named(turn_request_rows(con, run_id)))),
            "prefix_cache": prefix_chart(named(prefix_cell_rows(con, run_id)))}


def _data(values: Iterable[dict]) -> alt.Data:
    return alt.Data(values=json.loads(json.dumps(list(values), default=str)))
