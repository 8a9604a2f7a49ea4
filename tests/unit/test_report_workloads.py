"""The report's workload charts (docs/workloads.md, "In the report"): from a synthetic warehouse landed
through servebench's own landing code (no engine), the histograms count exactly the measured request
rows, the per-turn medians are the turns' medians, the shared-prefix cells show their hit rate beside
TTFT, and a run without workloads has none of these charts."""

from __future__ import annotations

import json
import random
import re
import statistics
from pathlib import Path

import pytest
import vl_convert

from servebench import warehouse
from servebench.analysis.charts import label_modes
from servebench.analysis.report import build_charts
from servebench.analysis.workload_report import (
    length_bins,
    length_count_rows,
    length_histograms,
    prefix_cell_rows,
    prefix_chart,
    turn_chart,
    turn_points,
    turn_request_rows,
    workload_charts,
)
from servebench.campaign.loading import parse_campaign
from servebench.config.sweep import Cell, expand
from servebench.load.records import RequestRecord
from servebench.warehouse import landing

HEAD = """
name: {name}
provider: {{kind: local, nodes: [{{name: n0, cpus: "0-1"}}]}}
model: {{generate: tiny-llama, max_position: 1024}}
modes: [{{name: tp1}}]
load:
  clients: [1, 2]
  requests: 12
"""
WORKLOADS = HEAD.format(name="wl") + (
    "  workload:\n"
    "    - {kind: synthetic, name: mixed, input: {dist: uniform, min: 16, max: 200}, "
    "output: {dist: uniform, min: 4, max: 40}}\n"
    "    - {kind: shared-prefix, groups: 2, prefix_len: 64, suffix_len: 8, output: 8}\n"
    "    - {kind: sessions, sessions: 3, turns: 4, first_input: 16, turn_input: 8, output: 8}\n")
PLAIN = HEAD.format(name="plain") + "  input_len: 32\n  output_len: 16\n"
WORKLOAD_CHARTS = {"workload_lengths", "session_turns", "prefix_cache"}
HIT_RATES = {"tp1.mixed.c1.r0": 0.0, "tp1.prefix.c1.r0": 0.8, "tp1.prefix.c2.r0": None,  # c2: a server without
             "tp1.sessions.c1.r0": 0.55, "tp1.sessions.c2.r0": 0.6}                       # the counters


def synthetic_requests(cell: Cell) -> list[dict]:
    """The cell's requests: a warm-up one, then the workload's (sessions: S x T turns whose TTFT
    grows with the turn); the last measured request failed, its answer cut short."""
    rng = random.Random(cell.key)
    kind = cell.workload.kind
    records = [RequestRecord(index=0, warmup=True, sent_s=0.0, first_token_s=0.01, expected_input_tokens=999,
                             input_tokens=999, requested_output_tokens=999, output_tokens=999)]
    if kind == "sessions":
        shapes = [dict(session=s, turn=t, expected_input_tokens=16 + 16 * t, ttft=0.01 * (t + 1) + rng.uniform(0, 0.02))
                  for s in range(3) for t in range(4)]
    elif kind == "shared-prefix":
        shapes = [dict(prefix_group=i % 2, expected_input_tokens=72, ttft=0.005) for i in range(12)]
    else:
        shapes = [dict(expected_input_tokens=rng.randint(16, 200), ttft=0.02) for _ in range(12)]
    for i, shape in enumerate(shapes, start=1):
        asked = 8 if kind != "synthetic" else rng.randint(4, 40)
        sent = i * 0.1
        records.append(RequestRecord(index=i, warmup=False, client=0, scheduled_s=sent, sent_s=sent,
                                     first_token_s=sent + shape.pop("ttft"), last_token_s=sent + 0.2,
                                     requested_output_tokens=asked, output_tokens=asked, chunks=asked,
                                     token_source="usage", http_status=200, **shape))
        records[-1].input_tokens = records[-1].expected_input_tokens
    failed = records[-1]
    failed.input_tokens, failed.output_tokens = None, 1   # a partial answer (its first token came): not served
    failed.error_kind, failed.error = "disconnect", "the server closed the stream"
    return [r.to_dict() for r in records]


def land_campaign(con, tmp: Path, run_id: str, text: str) -> dict[str, list[dict]]:
    """Every cell of the campaign landed as measured; returns each cell's request records."""
    campaign = parse_campaign(text, host_cpus={0, 1})
    landing.insert_run(con, run_id, landing.RunRecord(
        campaign=campaign.name, spec_hash=campaign.spec_hash(), spec_text=text, spec_normalized=campaign.normalized(),
        campaign_file="c.yaml", run_dir=tmp))
    landed = {}
    for n, cell in enumerate(expand(campaign)):
        requests = synthetic_requests(cell) if cell.workload else fixed_requests()
        summary = {"completed": 11, "failed": 1, "output_throughput": 50.0, "request_throughput": 5.0,
                   "ttft_ms": {"p50": 5.0 + 10 * (n % 2), "p99": 9.0 + 10 * (n % 2)}, "tpot_ms": {"p50": 10.0},
                   "valid": True, "invalid_reasons": [], "prefix_cache_hit_rate": HIT_RATES.get(cell.key)}
        landing.land_cell(con, run_id, landing.CellRecord(
            cell=cell, input_len=32, output_len=16, status="completed", correctness="passed",
            measured=landing.CellMeasurement(result={"t0": {"monotonic": 1000.0 + 5 * n}, "summary": summary,
                                                     "requests": requests})))
        landed[cell.key] = requests
    landing.update_run(con, run_id, landing.RunUpdate(status="completed", ended_at=landing.now()))
    return landed


def fixed_requests() -> list[dict]:
    """A fixed-length cell's requests (no workload), as a run without a workload block lands them."""
    return [RequestRecord(index=i, warmup=False, sent_s=i * 0.1, first_token_s=i * 0.1 + 0.02,
                          last_token_s=i * 0.1 + 0.3, input_tokens=32, output_tokens=16, http_status=200).to_dict()
            for i in range(8)]


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> tuple[Path, dict[str, list[dict]]]:
    tmp = tmp_path_factory.mktemp("workload-report")
    path = tmp / "w.duckdb"
    con = warehouse.connect(path)
    landed = land_campaign(con, tmp, "wl", WORKLOADS)
    land_campaign(con, tmp, "plain", PLAIN)
    con.close()
    return path, landed


def read(path: Path, fetch, run_id: str = "wl") -> list[dict]:
    con = warehouse.connect(path, read_only=True)
    try:
        return fetch(con, run_id)
    finally:
        con.close()


def test_the_histograms_count_every_measured_request_row_once(db):
    path, landed = db
    bins = length_bins(read(path, length_count_rows))
    for workload in ("mixed", "prefix", "sessions"):
        measured = [r for key, requests in landed.items() if f".{workload}." in key for r in requests
                    if not r["warmup"]]
        for (length, source), column in {("input", "sent"): "expected_input_tokens",
                                         ("input", "served"): "input_tokens",
                                         ("output", "sent"): "requested_output_tokens",
                                         ("output", "served"): "output_tokens"}.items():
            counted = [b for b in bins if (b["workload"], b["length"], b["source"]) == (workload, length, source)]
            landed_as = [r for r in measured if r[column] is not None and (source == "sent" or r["error_kind"] is None)]
            assert sum(b["requests"] for b in counted) == len(landed_as), (workload, length, source)
    served = sum(b["requests"] for b in bins if b["workload"] == "mixed" and b["source"] == "served"
                 and b["length"] == "input")
    assert served == 2 * 11                  # 2 cells of 12, the failed one not served, the warm-up not counted
    prefix = [b for b in bins if b["workload"] == "prefix" and b["length"] == "input"]
    assert [(b["source"], b["tokens"], b["requests"]) for b in prefix] == [("sent", "72", 24), ("served", "72", 22)]


def test_wide_lengths_share_bins_between_sent_and_served():
    counts = [{"workload": "w", "length": "input", "source": source, "tokens": tokens, "requests": n}
              for source, tokens, n in [("sent", 10, 2), ("sent", 14, 1), ("served", 10, 1), ("served", 12, 3),
                                        ("sent", 130, 4)]]
    bins = length_bins(counts)               # 10..130: 121 lengths, 5 tokens a bin
    assert [(b["source"], b["start"], b["end"], b["tokens"], b["requests"]) for b in bins] == [
        ("sent", 10, 15, "10-14", 3), ("sent", 130, 135, "130-134", 4), ("served", 10, 15, "10-14", 4)]
    spec = json.dumps(length_histograms(bins).to_dict())
    assert "w: input tokens" in spec and '"filled": false' in spec


def test_short_axes_of_whole_numbers_tick_only_whole_numbers():
    """Counts of 2 requests and 3 turns (a llama.cpp run's sessions cell: 2 sessions x 3 turns): Vega's
    tickMinStep alone drew ticks at 0.5 and 1.5 (labelled '0 1 1 2 2' on the count axis)."""
    def ticks(chart, title: str) -> list[str]:         # an axis's tick labels: the numbers drawn just before its title
        texts = re.findall(r"<text[^>]*>([^<]*)</text>", vl_convert.vegalite_to_svg(chart.to_json(indent=None)))
        before = texts[:texts.index(title)]
        start = len(before)
        while start and re.fullmatch(r"-?[\d.]+", before[start - 1]):
            start -= 1
        return before[start:]
    bins = length_bins([{"workload": "s", "length": "input", "source": source, "tokens": tokens, "requests": 2}
                        for source in ("sent", "served") for tokens in (64, 88, 112)])
    assert ticks(length_histograms(bins), "requests") == ["0", "1", "2"]
    points = [{"cell_key": "c", "mode": "m", "workload": "sessions", "turn": t, "requests": 2, "answered": 2,
               "ttft_p50_ms": 8.0 - t, "input_tokens_p50": 64 + 24 * t} for t in range(3)]
    assert ticks(turn_chart(points), "turn (0: the first)") == ["0", "1", "2"]


def test_each_turns_p50_is_the_median_of_its_answered_requests(db):
    path, landed = db
    points = turn_points(read(path, turn_request_rows))
    assert {p["cell_key"] for p in points} == {"tp1.sessions.c1.r0", "tp1.sessions.c2.r0"}
    for p in points:
        answered = [r for r in landed[p["cell_key"]] if r["turn"] == p["turn"] and r["error_kind"] is None
                    and not r["warmup"]]
        assert p["answered"] == len(answered)
        assert p["ttft_p50_ms"] == pytest.approx(statistics.median(
            1000 * (r["first_token_s"] - r["sent_s"]) for r in answered))
        assert p["input_tokens_p50"] == statistics.median(r["input_tokens"] for r in answered) == 16 + 16 * p["turn"]
    last = [p for p in points if p["turn"] == 3]
    assert [p["requests"] for p in last] == [3, 3] and [p["answered"] for p in last] == [2, 2]  # the failed one


def test_repeating_prefix_cells_show_their_hit_rate_beside_ttft_with_the_unshared_baseline(db):
    """Shared-prefix and sessions cells, and in their run every other cell with a hit rate (the mixed
    cell at 0 %: prompts that share nothing); a mixed cell without one, and the plain run, not at all."""
    path, _ = db
    cells = read(path, prefix_cell_rows)
    assert [(c["cell_key"], c["prefix_cache_hit_rate"]) for c in cells] == list(HIT_RATES.items())
    assert read(path, prefix_cell_rows, "plain") == []
    spec = json.dumps(prefix_chart(cells).to_dict())
    assert '"80%"' in spec and '"none"' in spec and '"55%"' in spec and "ttft_p50_ms" in spec
    assert ("2 groups x 64 + 8 tokens" in spec and "3 sessions x 4 turns" in spec
            and "synthetic: no shared prefix" in spec)


def test_a_workload_run_has_the_charts_and_a_run_without_workloads_has_none(db):
    """The plain run's report keeps its charts and has none of these; the workload run's three are
    valid Vega-Lite that vl-convert draws (run_report writes each as SVG and PNG this way; rendering
    whole reports twice would add seconds to a suite over its budget)."""
    path, _ = db
    con = warehouse.connect(path, read_only=True)
    try:
        plain, charts = build_charts(con, "plain"), build_charts(con, "wl")
    finally:
        con.close()
    assert plain and not WORKLOAD_CHARTS & set(plain)
    assert WORKLOAD_CHARTS <= set(charts)
    titles = {"workload_lengths": "Request lengths per workload", "session_turns": "Multi-turn sessions: per turn",
              "prefix_cache": "Prefix reuse: prefix-cache hit rate and TTFT"}
    for name, title in titles.items():
        svg = vl_convert.vegalite_to_svg(charts[name].to_json(indent=None, validate=False))
        assert title in svg and "<svg" in svg, name
    # the workloads share their load points: each its own bar beside the others, not drawn over them
    side = json.dumps(charts["modes_side_by_side"].to_dict())
    assert all(f'"tp1 (mp) {w}"' in side for w in ("mixed", "prefix", "sessions"))


def test_the_workload_charts_label_an_oversubscribed_mode_as_the_report_does(db):
    """The report gives the workload charts its mode labels: an oversubscribed mode says so there too."""
    path, _ = db
    con = warehouse.connect(path, read_only=True)
    try:
        charts = workload_charts(con, "wl", lambda rows: label_modes(rows, {"tp1": True}))
    finally:
        con.close()
    prefix = json.dumps(charts["prefix_cache"].to_dict())
    assert '"mode": "tp1 (oversubscribed)"' in prefix and '"mode": "tp1"' not in prefix
