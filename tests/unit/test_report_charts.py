"""Charts that cannot mislead: each test holds one rule of the report's charts and fails on a chart
that breaks it. The charts are inspected as Vega-Lite specs (their dicts), never as
pixels; the data is built here as rows, or landed through servebench's own landing code (no engine)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest
import vl_convert

from servebench import warehouse
from servebench.analysis.capacity_report import pareto_chart
from servebench.analysis.charts import (
    label_modes,
    load_point_label,
    load_point_order,
    oversubscribed_modes,
    server_cpu_models,
    subtitle_lines,
)
from servebench.analysis.engines_report import engines_section
from servebench.analysis.report import (
    KV_NEAR_FULL,
    STARTUP_COLOUR,
    ClientsChart,
    build_charts,
    cell_table,
    history,
    label_capacities,
    modes_side_by_side,
    network_response,
    node_timelines,
    roofline_chart,
    run_report,
    saturation_series,
    throughput_vs_latency,
    versus_clients,
)
from servebench.campaign.loading import parse_campaign
from servebench.config.sweep import expand
from servebench.warehouse import landing
from tests.support.synthetic_runs import synthetic_warehouse

CAMPAIGN = """
name: charts
provider: {kind: local, nodes: [{name: node0, cpus: "0-1"}, {name: loader, cpus: "0"}]}
model: {generate: tiny-llama}
modes: [{name: tp1}, {name: tp2, tp: 2, oversubscribe: true}]
load: {clients: [1, 2], rates: [2, 10], requests: 8, input_len: 32, output_len: 16, client: {node: loader}}
slo: {ttft_p99_ms: 50}
"""
NODE = {"hostname": "h", "cpus": [0, 1], "cpu_model": "Server CPU 9000", "arch": "x86_64", "logical_cores": 2,
        "physical_cores": 2, "numa_nodes": 1, "mem_total_bytes": 8 * 2**30, "kernel": "6", "isa_flags": []}


def spec_texts(chart) -> str:
    return json.dumps(chart.to_dict())


def data_rows(spec) -> list[dict]:
    """Every inline data row anywhere in a Vega-Lite spec (layers, facets, concatenations)."""
    found = []
    if isinstance(spec, dict):
        values = spec.get("values")
        if isinstance(values, list):
            found += [v for v in values if isinstance(v, dict)]
        for value in spec.values():
            found += data_rows(value)
    elif isinstance(spec, list):
        for value in spec:
            found += data_rows(value)
    return found


def marks(spec) -> list[str]:
    """Every mark type in a spec."""
    found = []
    if isinstance(spec, dict):
        mark = spec.get("mark")
        if mark is not None:
            found.append(mark if isinstance(mark, str) else mark["type"])
        for value in spec.values():
            found += marks(value)
    elif isinstance(spec, list):
        for value in spec:
            found += marks(value)
    return found


def encoded(spec, mark: str) -> list[dict]:
    """The encodings of every layer drawing `mark`, with the encodings of the layers around it."""
    found = []
    if isinstance(spec, dict):
        own = spec.get("mark")
        if own is not None and (own if isinstance(own, str) else own["type"]) == mark:
            found.append(spec.get("encoding", {}))
        for key, value in spec.items():
            inner = encoded(value, mark)
            found += [{**spec.get("encoding", {}), **e} if key == "layer" else e for e in inner]
    elif isinstance(spec, list):
        for value in spec:
            found += encoded(value, mark)
    return found


def kv_row(mode: str, clients: int | None, **values) -> dict:
    key = f"{mode}.c{clients}.r0" if clients is not None else f"{mode}.rate8.r0"
    return {"cell_id": f"r/{key}", "cell_key": key, "mode": mode, "clients": clients, "valid": True,
            "invalid_reasons": [], "kv_capacity_tokens": 1000, **values}


def open_cell(mode: str, rate: float, achieved: float, ttft: float, **values) -> dict:
    return {"cell_id": f"r/{mode}.rate{rate:g}.r0", "cell_key": f"{mode}.rate{rate:g}.r0", "mode": mode,
            "executor": "mp", "load_kind": "open", "offered_rate": rate, "clients": None,
            "request_throughput": achieved,
            "output_throughput": 16 * achieved, "ttft_p50_ms": ttft, "ttft_p99_ms": 2 * ttft, "tpot_p50_ms": 3.0,
            "tpot_p99_ms": 4.0, "valid": True, "invalid_reasons": [], **values}


def closed_cell(mode: str, clients: int, tput: float) -> dict:
    return {"cell_id": f"r/{mode}.c{clients}.r0", "cell_key": f"{mode}.c{clients}.r0", "mode": mode,
            "executor": "mp", "load_kind": "closed", "offered_rate": None, "clients": clients,
            "output_throughput": tput,
            "request_throughput": tput / 16, "ttft_p50_ms": 10.0, "ttft_p99_ms": 20.0, "tpot_p50_ms": 3.0,
            "tpot_p99_ms": 4.0, "valid": True, "invalid_reasons": []}


# a theoretical line beyond the axis is written as a number, not drawn at the edge


def test_a_theoretical_saturation_beyond_the_axis_is_a_number_not_a_line_at_the_edge():
    kv = [kv_row("tp1", c, kv_usage_peak=0.1 * c) for c in (1, 4)]
    far = [{"mode": "tp1", "kv_capacity_tokens": 1_000_000, "saturation_clients": 10922.67}]
    spec = versus_clients(kv, ClientsChart("kv_usage_peak", "KV", "peak KV-cache usage", "usage"), far).to_dict()
    assert "rule" not in marks(spec)                      # was a dashed rule at x = 6 (1.5 x the 4 clients drawn)
    assert "tp1 at 10,922.67 clients" in json.dumps(spec["title"])
    near = [{"mode": "tp1", "kv_capacity_tokens": 1000, "saturation_clients": 3.5}]
    spec = versus_clients(kv, ClientsChart("kv_usage_peak", "KV", "peak KV-cache usage", "usage"), near).to_dict()
    rules = [layer for layer in spec["layer"] if layer["mark"] == "rule" or layer["mark"].get("type") == "rule"]
    assert len(rules) == 1 and rules[0]["data"]["values"][0]["saturation_clients"] == 3.5   # where it is
    assert "tp1 3.50 clients" in json.dumps(spec["title"])


# percentages as percentages


def test_fractions_are_drawn_as_percentages_and_usage_on_a_full_scale():
    kv = [kv_row("tp1", c, kv_usage_peak=0.0005 * c) for c in (1, 2)]
    spec = versus_clients(kv, ClientsChart("kv_usage_peak", "KV", "peak KV-cache usage", "usage", full_scale=True),
                          []).to_dict()
    y = spec["encoding"]["y"]
    assert y["axis"]["format"] == "%" and y["scale"]["domain"] == [0, 1.0]   # not a 0-0.001 axis that looks full
    assert "(0-1)" not in json.dumps(spec) and "highest 0.10% (tp1, 2 clients)" in json.dumps(spec["title"])
    roof = [{"cell_key": "tp1.c1.r0", "mode": "tp1", "load_kind": "closed", "clients": 1, "offered_rate": None,
             "judged": True, "emulated": False, "decode_fraction": 0.25, "prefill_fraction": 0.5, "note": None}]
    roofline = roofline_chart(roof).to_dict()
    assert roofline["spec"]["encoding"]["y"]["axis"]["format"] == "%" and "(0-1)" not in json.dumps(roofline)


# a chart with nothing to show says so in one line


def test_a_chart_with_nothing_to_show_says_so_in_one_line():
    zeros = [kv_row("tp1", c, cache_miss_probability=0.0) for c in (1, 4)]
    spec = versus_clients(zeros, ClientsChart("cache_miss_probability", "Cache-miss probability vs clients",
                                              "KV misses per decode attempt", "misses"), []).to_dict()
    assert marks(spec) == ["text"]                           # was a line along 0 on a one-tick axis
    (line,) = data_rows(spec)
    assert line["line"] == ("Cache-miss probability vs clients: nothing to show (KV misses per decode attempt: 0 "
                            "in every one of the 2 closed-loop cells)")
    one_each = [kv_row("tp1.a", 2, normalized_throughput=1.0), kv_row("tp1.b", 2, normalized_throughput=1.0)]
    spec = versus_clients(one_each, ClientsChart("normalized_throughput", "Normalized", "% of best", "n",
                                                 one_point_says_nothing=True), []).to_dict()
    assert marks(spec) == ["text"] and data_rows(spec)[0]["line"] == (
        "Normalized: nothing to show (every mode ran at one client count (2 clients), so each cell is its own best "
        "(100%))")
    alone = [kv_row("tp1.a", 2, kv_usage_peak=0.0007), kv_row("tp1.b", 2, kv_usage_peak=0.0001)]
    spec = versus_clients(alone, ClientsChart("kv_usage_peak", "KV", "peak KV-cache usage", "u", full_scale=True),
                          []).to_dict()
    assert marks(spec) == ["text"] and data_rows(spec)[0]["line"].endswith("no line to draw; highest 0.1% (tp1.a))")
    links = [{"cell_id": f"r/single.{link}.c1.r0", "mode": "single", "executor": "mp", "load_kind": "closed",
              "clients": 1, "offered_rate": None, "output_throughput": 90.0, "tpot_p50_ms": 0.0, "link": link,
              "link_delay_ms": delay, "link_rate_mbit": None} for link, delay in (("plain", 0), ("d5ms", 5))]
    panels = network_response(links).to_dict()["vconcat"]
    assert "line" in marks(panels[0]) and marks(panels[1]) == ["text"]     # TPOT 0 everywhere: was a flat line
    assert data_rows(panels[1])[0]["line"].startswith("TPOT p50 [ms]: nothing to show")
    some = zeros + [kv_row("tp1", 8, cache_miss_probability=0.2)]
    chart = ClientsChart("cache_miss_probability", "C", "misses", "m")
    assert "line" in marks(versus_clients(some, chart, []).to_dict())


# load points labelled one way


def test_load_points_are_labelled_one_way_everywhere_in_load_order():
    cells = [closed_cell("tp1", 4, 100.0), closed_cell("tp1", 1, 30.0), open_cell("tp1", 10, 9.0, 12.0),
             open_cell("tp1", 2, 2.0, 10.0)]
    assert [load_point_label(c) for c in cells] == ["4 clients", "1 client", "10 req/s", "2 req/s"]
    assert load_point_order(cells) == ["1 client", "4 clients", "2 req/s", "10 req/s"]   # not '10' before '2'
    spec = modes_side_by_side(cells).to_dict()
    facet = spec["vconcat"][0]["facet"]["column"]
    assert facet["sort"] == ["1 client", "4 clients", "2 req/s", "10 req/s"]
    assert {row["load_point"] for row in data_rows(spec)} == {"1 client", "4 clients", "2 req/s", "10 req/s"}
    assert "c4" not in {row.get("load_point") for row in data_rows(spec)}
    latency = throughput_vs_latency(cells, "ttft_p50_ms", "TTFT").to_dict()
    labels = [layer for layer in latency["layer"] if layer["mark"].get("type") == "text"]
    assert labels[0]["encoding"]["text"]["field"] == "load_point"
    engines = engines_section([{**c, "engine": "vllm"} for c in cells])
    assert "4 clients" in engines and "10 req/s" in engines


# a mode marked oversubscribed is labelled so wherever it is drawn


def test_an_oversubscribed_mode_is_labelled_so_in_every_chart_and_the_cell_table(report_db):
    db, run_id = report_db
    con = warehouse.connect(db, read_only=True)
    charts = build_charts(con, run_id)
    con.close()
    drawn_modes = {name: {row["mode"] for row in data_rows(chart.to_dict()) if row.get("mode")}
                   for name, chart in charts.items()}
    with_modes = {name: modes for name, modes in drawn_modes.items() if modes}
    assert {"throughput_vs_ttft", "modes_side_by_side", "throughput_vs_clients",
            "normalized_throughput"} <= set(with_modes)
    for name, modes in with_modes.items():
        assert "tp2" not in modes and "tp2 (oversubscribed)" in modes, (name, modes)
        assert "tp1" in modes or name == "node_timelines", (name, modes)   # tp1 is not marked
    assert "tp2 (mp, oversubscribed)" in spec_texts(charts["modes_side_by_side"])
    strip = [row["cell"] for row in data_rows(charts["node_timelines"].to_dict()) if "cell" in row and "start" in row]
    assert "tp2.c1.r0 (oversubscribed)" in strip and "tp1.c1.r0" in strip
    assert oversubscribed_modes({"modes": [{"name": "tp2", "oversubscribe": True}, {"name": "tp2-ray"}]}) == {
        "tp2": True, "tp2-ray": False}
    labelled = label_modes([{"mode": "tp2-ray"}, {"mode": "tp2-mns8"}, {"mode": "tp2.prefix"}],
                           {"tp2": True, "tp2-ray": False})
    assert [r["mode"] for r in labelled] == ["tp2-ray", "tp2-mns8 (oversubscribed)", "tp2.prefix (oversubscribed)"]


def test_the_capacity_chart_labels_an_oversubscribed_configuration_and_keeps_its_roles():
    found = [{"mode": m, "capacity": c, "tpot_p50_ms": t, "knobs": "{}", "search_over": "rate"}
             for m, c, t in (("tp2-mns8", 4.0, 30.0), ("tp2-mns16", 6.0, 35.0), ("tp1", 5.0, 20.0))]
    tuning = {"default_mode": "tp2-mns8", "best_mode": "tp2-mns16", "pareto": json.dumps(["tp2-mns16", "tp1"])}
    labelled, verdict = label_capacities(found, tuning, {"tp1": False, "tp2": True})
    rows = data_rows(pareto_chart(labelled, verdict, 300, 200).to_dict())
    roles = {r["mode"]: (r["role"], r["on_front"]) for r in rows}
    assert roles == {"tp2-mns8 (oversubscribed)": ("default", False), "tp2-mns16 (oversubscribed)": ("best", True),
                     "tp1": ("other", True)}
    assert label_capacities(found, tuning, {"tp1": False, "tp2": False}) == (found, tuning)


# latency drawn against the realized rate, labelled with the offered one, with the SLO line when one is set


def test_latency_is_drawn_at_the_realized_rate_labelled_with_the_offered_one_with_the_slo_line():
    cells = [open_cell("tp1", 2, 1.7, 10.0, realized_rate=1.8), open_cell("tp1", 8, 11.0, 30.0),
             closed_cell("tp1", 4, 100.0)]
    spec = throughput_vs_latency(cells, "ttft_p50_ms", "TTFT", {"ttft_p99_ms": 50, "tpot_p50_ms": 9}).to_dict()
    lines = encoded(spec, "line")
    assert lines and all(encoding["x"]["field"] == "rate" for encoding in lines)
    assert lines[0]["x"]["title"] == "request rate realized [req/s]"
    assert lines[0]["x"]["scale"]["zero"] is True            # rates from 0: one point is not a lone tick
    assert lines[0]["y"]["field"] == "ms"          # latency up, the realized rate along
    # at its realized rate (the offered one where none was recorded), labelled with the rate offered
    drawn = {(r["percentile"], r["rate"], r["ms"]) for r in data_rows(spec) if "percentile" in r}
    assert drawn == {("p50", 1.8, 10.0), ("p50", 8.0, 30.0), ("p99", 1.8, 20.0), ("p99", 8.0, 60.0)}
    labels = [layer for layer in spec["layer"] if layer["mark"].get("type") == "text" and "text" in layer["encoding"]
              and layer["encoding"]["text"]["field"] == "load_point"]
    assert {(r["rate"], r["load_point"]) for r in labels[0]["data"]["values"]} == {(1.8, "2 req/s"), (8.0, "8 req/s")}
    rules = [layer for layer in spec["layer"] if layer["mark"].get("type") == "rule"]
    assert [row["limit"] for layer in rules for row in layer["data"]["values"]] == [50]   # TTFT's, not TPOT's
    assert "SLO TTFT p99 ≤ 50 ms" in json.dumps(spec, ensure_ascii=False)
    without = throughput_vs_latency(cells, "ttft_p50_ms", "TTFT").to_dict()
    assert "rule" not in marks(without) and "SLO" not in json.dumps(without)


# the timelines' cells labelled


def test_the_timelines_name_each_shaded_cell_in_the_picture():
    samples = [{"node": "n0", "mode": "tp1", "t_mono": 100 + i, "cpu_pct": 50.0, "mem_used_bytes": 1e9,
                "engine_rss_bytes": 5e8, "net": {"eth0": [i * 1000, 0]}} for i in range(60)]
    cells = [{"cell_id": "r/tp1.c1.r0", "cell_key": "tp1.c1.r0", "t0_monotonic": 110.0, "t_end_monotonic": 130.0},
             {"cell_id": "r/tp1.rate2.r0", "cell_key": "tp1.rate2.r0", "t0_monotonic": 135.0,
              "t_end_monotonic": 150.0}]
    spec = node_timelines(samples, cells).to_dict()
    strip = spec["vconcat"][0]
    texts = [layer for layer in strip["layer"] if layer["mark"].get("type") == "text"]
    assert texts and texts[0]["encoding"]["text"]["field"] == "cell"
    assert [row["cell"] for row in texts[0]["data"]["values"]] == ["tp1.c1.r0", "tp1.rate2.r0"]
    assert [row["middle"] for row in texts[0]["data"]["values"]] == [20.0, 42.5]   # in the middle of its band
    assert "hover" not in json.dumps(spec["title"])


# the report's cell table with TTFT/TPOT p50/p99, validity and the node's CPU model


def test_the_cell_table_has_latency_percentiles_validity_and_the_servers_cpu_model(report_db, tmp_path):
    cells = [{**closed_cell("tp1", 1, 30.0), "status": "completed", "correctness": "reference", "error": None,
              "client_cpu_fraction": None, "client_cpus": None, "offered_rate": None, "realized_rate": None},
             {**closed_cell("tp2", 1, 20.0), "status": "completed", "correctness": "passed", "error": None,
              "client_cpu_fraction": None, "client_cpus": None, "offered_rate": None, "realized_rate": None,
              "valid": False, "invalid_reasons": ["schedule lag"]}]
    table = cell_table(cells, [], {"tp1": "Server CPU 9000", "tp2": "Other CPU"}, {"tp1": False, "tp2": True})
    assert "<th>TTFT p50 / p99 (ms)</th><th>TPOT p50 / p99 (ms)</th><th>server CPU</th>" in table
    assert "<td>10.0 / 20.0</td><td>3.00 / 4.00</td><td>Server CPU 9000</td>" in table
    assert "<td>NO</td>" in table and "<td>yes</td>" in table and "Other CPU" in table
    assert "tp2.c1.r0 <b>(oversubscribed)</b>" in table and "tp1.c1.r0 <b>" not in table
    spec = {"modes": [{"name": "tp1"}, {"name": "tp2", "nodes": ["b"]}], "load": {"client": {"node": "loader"}}}
    nodes = [{"node": "a", "cpu_model": "A"}, {"node": "b", "cpu_model": "B"}, {"node": "loader", "cpu_model": "L"}]
    assert server_cpu_models(spec, nodes) == {"tp1": "A / B", "tp2": "B"}   # the load generator's node is not one
    db, run_id = report_db
    con = warehouse.connect(db, read_only=True)
    page = run_report(con, run_id, tmp_path / "out").read_text()
    con.close()
    assert "<td>Server CPU 9000</td>" in page and "TTFT p50 / p99 (ms)" in page


# normalized throughput against a cell the chart shows


def test_normalized_throughput_is_against_the_best_cell_drawn():
    kv = [kv_row("tp2", 1, output_throughput=20.0, normalized_throughput=0.2),
          kv_row("tp2", 4, output_throughput=40.0, normalized_throughput=0.4),
          kv_row("tp2", None, output_throughput=100.0, normalized_throughput=1.0)]   # an open-loop cell, not drawn
    drawn = saturation_series(kv)
    assert [r["clients"] for r in drawn] == [1, 4]
    assert max(r["normalized_throughput"] for r in drawn) == pytest.approx(1.0)   # was 0.4: its best is not drawn


# subtitles that fit the chart


def test_a_long_subtitle_is_broken_between_its_clauses():
    text = "; ".join(f"clause number {i} says something about the chart" for i in range(8))
    lines = subtitle_lines(text)
    assert len(lines) > 1 and all(len(line) <= 110 for line in lines)
    assert " ".join(lines).replace("; ", ";").replace(";", "; ") == text.replace(";", "; ").replace(";  ", "; ")
    kv = [kv_row("tp1", c, kv_usage_peak=0.1 * c) for c in (1, 4)]
    spec = versus_clients(kv, ClientsChart("kv_usage_peak", "KV", "usage", "a; " * 60 + "end"), []).to_dict()
    assert isinstance(spec["title"]["subtitle"], list) and max(map(len, spec["title"]["subtitle"])) <= 110


# a landed run: two modes, the second marked oversubscribed, an SLO, a load generator node of its own


@pytest.fixture(scope="module")
def report_db(tmp_path_factory) -> tuple[Path, str]:
    tmp = tmp_path_factory.mktemp("charts")
    db = tmp / "w.duckdb"
    campaign = parse_campaign(CAMPAIGN)
    con = warehouse.connect(db)
    landing.insert_run(con, "r1", landing.RunRecord(
        campaign="charts", spec_hash=campaign.spec_hash(), spec_text=CAMPAIGN, spec_normalized=campaign.normalized(),
        campaign_file="charts.yaml", run_dir=tmp))
    landing.land_node(con, "r1", "node0", "127.0.0.1", NODE)
    landing.land_node(con, "r1", "loader", "127.0.0.1", {**NODE, "cpu_model": "Loader CPU"})
    t0 = 1000.0
    for cell in expand(campaign):
        speed = 1.0 if cell.mode.name == "tp1" else 0.5
        requests: list[dict] = [
            dict(index=i, warmup=False, client=0, scheduled_s=i * 0.1, sent_s=i * 0.1,
                 first_token_s=i * 0.1 + 0.02 / speed, last_token_s=i * 0.1 + 0.3 / speed, input_tokens=32,
                 output_tokens=16, chunks=16, chunk_times=[], chunk_tokens=[], token_source="usage",
                 http_status=200, error_kind=None, error=None) for i in range(8)]
        summary = {"completed": 8, "failed": 0, "duration_s": 1.0, "output_throughput": 100 * speed,
                   "request_throughput": 6 * speed, "ttft_ms": {"p50": 20 / speed, "p99": 40 / speed},
                   "tpot_ms": {"p50": 18 / speed, "p99": 25 / speed}, "valid": True, "invalid_reasons": []}
        landing.land_cell(con, "r1", landing.CellRecord(
            cell=cell, input_len=32, output_len=16, status="completed", correctness="passed",
            measured=landing.CellMeasurement(result={"t0": {"monotonic": t0}, "summary": summary,
                                                     "requests": requests})))
        t0 += 5.0
    node_file, server_file = tmp / "n.jsonl", tmp / "s.jsonl"
    with open(node_file, "w") as nf, open(server_file, "w") as sf:
        for k in range(int((t0 - 1000.0) * 2)):
            t = 1000.0 + k / 2
            nf.write(json.dumps({"node": "node0", "t_mono": t, "t_wall": t, "cpu_pct": 50.0,
                                 "cpu_pct_per_core": {"0": 50.0, "1": 50.0}, "mem_used_bytes": 4e9,
                                 "mem_available_bytes": 2e10, "engine_rss_bytes": 2e9, "engine_processes": 4,
                                 "net": {"lo": [k * 1000, k * 1200, k, k]}}) + "\n")
            sf.write(json.dumps({"t_mono": t, "t_wall": t, "kv_usage": min(1.0, k / 200), "running": 2.0,
                                 "waiting": 0.0, "preemptions_total": k // 20, "prompt_tokens_total": k * 10.0,
                                 "generation_tokens_total": k * 5.0}) + "\n")
    for mode in ("tp1", "tp2"):
        landing.land_server(con, "r1", landing.ServerRecord(
            mode=mode, layout=landing.ServerLayout.of(next(m for m in campaign.modes if m.name == mode)), pid=1, port=1,
            command=["x"], ready_seconds=5.0, status="ready", gate=landing.ServerGate(status="passed"),
            kv_capacity_tokens=480))
        landing.land_samples(con, "r1", mode, [node_file], [server_file])
    con.close()
    return db, "r1"


# the load each instance took and each node's bytes: data from rows, shown only when there
# is something to show


def balance_row(mode: str, clients: int, instance: str, requests: float | None, waiting_max: float,
                **values) -> dict:
    key = f"{mode}.c{clients}.r0"
    return {"cell_id": f"r/{key}", "cell_key": key, "mode": mode, "load_kind": "closed", "clients": clients,
            "offered_rate": None, "instance": instance, "requests": requests, "generation_tokens": 16 * (requests or 0),
            "waiting_mean": waiting_max / 2, "waiting_max": waiting_max, "running_mean": 1.0, "instances": 2,
            **values}


def test_the_balance_chart_draws_each_instances_requests_and_queue_and_names_the_most_uneven_cell():
    from servebench.analysis.parallel_report import balance_chart, balance_points

    rows = [balance_row("dp2", 4, "dp0", 9, 3.0), balance_row("dp2", 4, "dp1", 3, 0.0),
            balance_row("dp2", 1, "dp0", 2, 0.0), balance_row("dp2", 1, "dp1", 2, 0.0)]
    points = {(p["cell"], p["instance"]): p for p in balance_points(rows)}
    assert points[("dp2 · 4 clients", "dp0")]["share"] == 0.75 and points[("dp2 · 1 client", "dp1")]["share"] == 0.5
    assert points[("dp2 · 4 clients", "dp0")]["measure"] == "requests finished"
    spec = balance_chart(rows).to_dict()
    text = json.dumps(spec, ensure_ascii=False)
    assert "most uneven: dp2 · 4 clients, dp0 took 75% (even: 50%)" in text
    assert spec["vconcat"][0]["facet"]["column"]["sort"] == ["dp2 · 1 client", "dp2 · 4 clients"]  # load order
    assert {m for m in marks(spec)} == {"bar", "tick"}
    drawn = {(r["cell"], r["instance"]): r["served"] for r in data_rows(spec)}
    assert drawn[("dp2 · 4 clients", "dp1")] == 3


def test_the_balance_chart_falls_back_to_tokens_and_says_when_nothing_waited():
    from servebench.analysis.parallel_report import balance_chart, balance_points

    rows = [balance_row("r2", 2, "r0", None, 0.0, generation_tokens=160),     # llama.cpp: no request counter
            balance_row("r2", 2, "r1", None, 0.0, generation_tokens=96)]
    assert {p["measure"] for p in balance_points(rows)} == {"tokens generated"}
    assert balance_chart([]) is None
    text = spec_texts(balance_chart(rows))
    assert "requests waiting: nothing to show (no request waited" in text and "tokens generated" in text
    even = [balance_row("dp2", 4, "dp0", 6, 0.0), balance_row("dp2", 4, "dp1", 6, 0.0)]
    assert "every cell evenly spread" in spec_texts(balance_chart(even))
    zero = [balance_row("r2", 2, "r0", 0, 0.0, generation_tokens=0), balance_row("r2", 2, "r1", 0, 0.0,
                                                                               generation_tokens=0)]
    assert "Load balance across instances: nothing to show" in spec_texts(balance_chart(zero))


def network_row(mode: str, node: str, sent: float, received: float, completed: int, **values) -> dict:
    return {"cell_id": f"r/{mode}.c1.r0", "cell_key": f"{mode}.c1.r0", "mode": mode, "node": node, "role": "server",
            "tp": 2, "pp": 1, "dp": 1, "ep": False, "bytes_sent": sent, "bytes_received": received,
            "completed": completed, **values}


def test_the_network_chart_draws_each_nodes_bytes_per_request_per_mode():
    from servebench.analysis.parallel_report import network_points, rank_network_chart

    rows = [network_row("tp2", "h1", 8000, 6000, 4), network_row("tp2", "h2", 6000, 8000, 4),
            {**network_row("tp2", "h3", 400, 2000, 4), "role": "client"},
            {**network_row("tp2", "h1", 8000, 6000, 4), "cell_id": "r/tp2.c2.r0"},
            network_row("pp2", "h1", 1000, None, 4)]            # under two samples: left out
    points = {(p["mode"], p["node"], p["direction"]): p for p in network_points(rows)}
    assert points[("tp2", "h1", "sent")]["kb_per_request"] == 16000 / 8 / 1e3      # two cells, 8 requests
    assert points[("tp2", "h3 (client)", "received")]["kb_per_request"] == 0.5
    assert points[("tp2", "h2", "received")]["layout"] == "tp2 pp1 dp1"
    assert not any(mode == "pp2" for mode, _, _ in points)
    spec = rank_network_chart(rows).to_dict()
    assert "bytes per request completed [KB]" in json.dumps(spec) and marks(spec) == ["bar"]
    assert rank_network_chart([network_row("tp1", "node0", 0, 0, 4)]) is None          # one node: no network
    assert "nothing to show" in spec_texts(rank_network_chart([network_row("tp1", "a", 0, 0, 4),
                                                              network_row("tp1", "b", 0, 0, 4)]))


def test_the_parallel_charts_are_in_a_report_only_when_the_run_has_instances_and_nodes(report_db, tmp_path):
    from tests.support.instance_runs import land_instances_run

    db, run_id = report_db
    con = warehouse.connect(db, read_only=True)
    plain = build_charts(con, run_id)
    con.close()
    assert "load_balance" not in plain and "rank_network" not in plain     # one node, no instances
    con = warehouse.connect(tmp_path / "dp.duckdb")
    land_instances_run(con, tmp_path)
    charts = build_charts(con, "r1")
    page = run_report(con, "r1", tmp_path / "report")     # both drawn by Vega, in the page and as PNGs
    con.close()
    assert (page.parent / "charts" / "load_balance.png").stat().st_size and \
        (page.parent / "charts" / "rank_network.png").stat().st_size
    balance = {(r["instance"], r["served"]) for r in data_rows(charts["load_balance"].to_dict()) if "served" in r}
    assert balance == {("dp0", 3.0), ("dp1", 1.0)}
    network = {(r["node"], r["direction"]): r["kb_per_request"] for r in data_rows(charts["rank_network"].to_dict())
               if "direction" in r}
    assert network[("n0", "sent")] == 2500 / 4 / 1e3 and network[("n1", "received")] == 2000 / 4 / 1e3


# every axis says its unit; times in 24-hour UTC; absolute and normalized throughput both drawn

UNIT = re.compile(r"\[[^\]]+\]|%")
COUNTS = ("clients", "requests", "turn")          # a count needs no unit
TIME_LABEL = re.compile(r"^(\d{4}-\d{2}-\d{2} )?\d{2}:\d{2}(:\d{2})?$")
NUMBER_LABEL = re.compile(r"^[-−]?[\d.,]+(%|[kMG])?$")


def rendered_axes(chart) -> list[tuple[str, list[str]]]:
    """Every axis Vega draws for a chart (its SVG, as vl-convert renders the report's PNGs): its title
    (merged over the layers, as the reader sees it) and its tick labels."""
    svg = vl_convert.vegalite_to_svg(chart.to_json(indent=None, validate=False))
    axes = []
    for chunk in svg.split('<g class="mark-group role-axis"')[1:]:
        labels = re.search(r'role-axis-label"[^>]*>(.*?)</g>', chunk, re.S)
        title = re.search(r'role-axis-title"[^>]*>(.*?)</g>', chunk, re.S)
        texts = re.findall(r">([^<>]+)</text>", labels.group(1)) if labels else []
        if texts or title:
            axes.append((" ".join(re.findall(r">([^<>]+)</text>", title.group(1))) if title else "", texts))
    return axes


def spec_axes(spec) -> list[tuple[str, str, object]]:
    """Every x/y encoding of a quantitative or temporal field in a spec: (field, type, its explicit title)."""
    found = []
    if isinstance(spec, dict):
        for channel in ("x", "y"):
            enc = (spec.get("encoding") or {}).get(channel)
            hidden = isinstance(enc, dict) and (enc.get("axis") is None and "axis" in enc
                                                 or (enc.get("axis") or {}).get("labels") is False)
            if isinstance(enc, dict) and enc.get("type") in ("quantitative", "temporal") and "title" in enc \
                    and not hidden:
                found.append((enc.get("field", ""), enc["type"], enc["title"]))
        for value in spec.values():
            found += spec_axes(value)
    elif isinstance(spec, list):
        for value in spec:
            found += spec_axes(value)
    return found


def has_unit(title: str) -> bool:
    return bool(UNIT.search(title)) or any(word in title for word in COUNTS)


@pytest.fixture(scope="module")
def every_chart(report_db, tmp_path_factory) -> dict:
    """The charts of two landed runs: the report's own (SLO, open and closed loop, an oversubscribed
    mode) and the synthetic nights (history, two nodes, repeats)."""
    db, run_id = report_db
    con = warehouse.connect(db, read_only=True)
    charts = {f"charts:{name}": chart for name, chart in build_charts(con, run_id).items()}
    con.close()
    tmp = tmp_path_factory.mktemp("nights")
    night = synthetic_warehouse(tmp / "n.duckdb", tmp)
    con = warehouse.connect(tmp / "n.duckdb", read_only=True)
    charts.update({f"nights:{name}": chart for name, chart in build_charts(con, night).items()})
    con.close()
    return charts


def test_every_axis_title_carries_a_unit_or_is_a_count_and_times_are_24_hour_utc(every_chart):
    assert {"nights:history", "nights:node_timelines", "charts:throughput_vs_ttft"} <= set(every_chart)
    for name, chart in every_chart.items():
        for title, labels in rendered_axes(chart):
            if labels and all(NUMBER_LABEL.match(label) for label in labels):      # a quantity: its unit said
                assert title and has_unit(title), (name, title, labels[:3])
            if "UTC" in title:                                                   # a time: 24-hour, in full
                assert labels and all(TIME_LABEL.match(label) for label in labels), (name, title, labels)
            assert not any(re.search(r"\b(AM|PM)\b", label) for label in labels), (name, labels)
        for field, kind, title in spec_axes(chart.to_dict()):
            if title:                          # facets' axes too (not in the SVG's axis groups)
                assert has_unit(str(title)), (name, field, title)
            if kind == "temporal":
                assert "UTC" in str(title), (name, field, title)
    timed = {name for name, chart in every_chart.items() for title, _ in rendered_axes(chart) if "UTC" in title}
    assert {"nights:history", "nights:node_timelines"} <= timed


def test_a_night_at_19_03_utc_is_drawn_at_19_03_whatever_the_readers_zone():
    nights = [{"run_id": run, "metric": "output_throughput", "night_at": at, "value": 10.0, "point": "tp1.c1",
               "series_id": "s", "engine_version": "v", "repeats": 1, "cv": None}
              for run, at in (("a", datetime(2026, 11, 30, 19, 3, tzinfo=timezone.utc)),
                              ("b", datetime(2026, 12, 1, 19, 3, tzinfo=timezone.utc)))]
    chart = history(nights, [])
    x = encoded(chart.to_dict(), "line")[0]["x"]
    assert x["scale"]["type"] == "utc" and "%H:%M" in x["axis"]["format"] and "%I" not in x["axis"]["format"]
    assert {row["night_at"] for row in data_rows(chart.to_dict())} == {1796065380000.0, 1796151780000.0}
    (title, labels), _ = rendered_axes(chart)
    assert "UTC" in title and all(TIME_LABEL.match(label) for label in labels), labels
    assert "2026-12-01 19:00" in labels and "2026-12-01 07:00" in labels     # 24-hour: 19:00, not a second 07:00


def test_absolute_and_normalized_throughput_are_both_drawn_and_modes_coloured_by_mode(every_chart):
    for run in ("charts", "nights"):
        absolute, normalized = every_chart[f"{run}:throughput_vs_clients"], every_chart[f"{run}:normalized_throughput"]
        assert "line" in marks(absolute.to_dict()) and "line" in marks(normalized.to_dict())
        assert {e["y"]["title"] for e in encoded(absolute.to_dict(), "line")} == {"output throughput [tok/s]"}
        rows = [r for r in data_rows(absolute.to_dict()) if r.get("output_throughput")]
        by_mode = {r["mode"]: r["output_throughput"] for r in rows}
        assert len(by_mode) == 2 and max(by_mode.values()) / min(by_mode.values()) > 1.5   # the gap, in tok/s
        side = every_chart[f"{run}:modes_side_by_side"].to_dict()
        colours = [e["color"]["field"] for m in ("bar", "point") for e in encoded(side, m) if "color" in e]
        assert colours and set(colours) == {"mode"}                          # was executor: every bar one colour
        assert side["title"]["text"] == "Modes side by side"


# the server start-up shaded and named on the timelines


def test_each_servers_start_up_is_shaded_and_named_on_the_timelines():
    samples = [{"node": "n0", "mode": "tp1", "t_mono": 100 + i, "t_wall": 1_796_151_780 + i, "cpu_pct": 50.0,
                "mem_used_bytes": 1e9, "engine_rss_bytes": 5e8, "net": {"eth0": [i * 1000, 0]}} for i in range(60)]
    cells = [{"cell_id": "r/tp1.c1.r0", "cell_key": "tp1.c1.r0", "t0_monotonic": 130.0, "t_end_monotonic": 150.0}]
    servers = [{"mode": "tp1", "started_unix": 1_796_151_775.0, "ready_seconds": 20.0}]
    spec = node_timelines(samples, cells, servers=servers).to_dict()
    strip = spec["vconcat"][0]
    names = [row["server"] for layer in strip["layer"] for row in layer["data"]["values"] if "server" in row]
    assert names and set(names) == {"tp1 start-up"}
    shaded = [layer for panel in spec["vconcat"][1:] for layer in panel["layer"]
              if layer["mark"].get("color") == STARTUP_COLOUR]
    assert len(shaded) == 4 and shaded[0]["data"]["values"][0]["end"] - shaded[0]["data"]["values"][0]["start"] \
        == pytest.approx(20_000)                                              # launch to ready, in ms
    x = spec["vconcat"][1]["layer"][0]["encoding"]["x"]
    assert x["scale"]["type"] == "utc" and spec["resolve"]["scale"]["x"] == "shared"    # the strip's span too
    assert "start-up" in json.dumps(spec["title"]) and "19:02:55" in json.dumps(rendered_axes(node_timelines(
        samples, cells, servers=servers)))


# the KV chart only where the pool came near full


def test_the_kv_chart_is_drawn_only_where_the_pool_comes_near_full_else_one_sentence():
    low = [kv_row("tp1", c, kv_usage_peak=0.05 * c) for c in (1, 4)]
    far = [{"mode": "tp1", "kv_capacity_tokens": 1_000_000, "saturation_clients": 10922.67}]
    chart = ClientsChart("kv_usage_peak", "KV-cache usage vs clients", "peak KV-cache usage [%]", "u", fmt=".2%",
                         full_scale=True, near_full=KV_NEAR_FULL)
    spec = versus_clients(low, chart, far).to_dict()
    assert marks(spec) == ["text"]                              # was a flat line near 0% on a 0-100% axis
    line = data_rows(spec)[0]["line"]
    assert "never came near full: highest 20.00% (tp1, 4 clients), under the 80%" in line
    assert "tp1 at 10,922.67 clients" in line                    # a saturation far off the axis: a number
    full = [kv_row("tp1", c, kv_usage_peak=0.25 * c) for c in (1, 4)]
    assert "line" in marks(versus_clients(full, chart, far).to_dict())


