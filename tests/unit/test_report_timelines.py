"""The per-node timelines of a long run are thinned before altair sees them (it validates and
copies every inline row: a 10-minute run on three nodes took 40 s to render, now about 10)."""

from servebench.analysis.report import node_timelines, thin_timeline


def _line(node: str, metric: str, values: list[float]) -> list[dict]:
    return [{"t": i * 0.2, "node": node, "mode": "tp1", "metric": metric, "value": v} for i, v in enumerate(values)]


def test_a_long_line_keeps_at_most_its_points_and_its_spike_and_a_short_one_is_untouched():
    flat = [10.0] * 1000
    flat[537] = 99.0
    short = _line("n1", "CPU busy (%)", [1.0, 2.0, 3.0])
    thinned = thin_timeline(_line("n0", "CPU busy (%)", flat) + short, most=100)
    long_line = [p for p in thinned if p["node"] == "n0"]
    assert len(long_line) == 100 and max(p["value"] for p in long_line) == 99.0
    assert [p["t"] for p in long_line] == sorted(p["t"] for p in long_line) and long_line[0]["t"] == 0.0
    assert [p for p in thinned if p["node"] == "n1"] == short


def test_the_timeline_chart_says_when_it_was_thinned():
    samples = [{"node": "n0", "mode": "tp1", "t_mono": 100 + i * 0.2, "cpu_pct": 50.0, "mem_used_bytes": 1e9,
                "engine_rss_bytes": 5e8, "net": {"eth0": [i * 1000, 0]}} for i in range(3000)]
    cells = [{"cell_id": 1, "cell_key": "tp1.c1.r0", "t0_monotonic": 110.0, "t_end_monotonic": 200.0}]
    spec = node_timelines(samples, cells).to_dict()
    assert "at most 400 points a line" in str(spec["title"])
    lines = [layer for panel in spec["vconcat"] for layer in panel["layer"] if layer["mark"]["type"] == "line"]
    assert len(lines) == 4 and all(len(layer["data"]["values"]) <= 400 for layer in lines)
    short = node_timelines(samples[:300], cells).to_dict()
    assert "points a line" not in str(short["title"])
