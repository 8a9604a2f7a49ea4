"""The report's network chart: only for campaigns with a network axis, settings in a readable order."""

from servebench.analysis.report import modes_side_by_side, network_response


def cell(mode: str, link: str | None, delay: float | None, rate: float | None, tput: float) -> dict:
    return {"cell_id": f"r/{mode}.{link}.c1.r0", "mode": mode, "executor": "ray", "load_kind": "closed",
            "clients": 1, "offered_rate": None, "output_throughput": tput, "tpot_p50_ms": 1000 / tput,
            "tpot_p99_ms": None,
            "ttft_p50_ms": None, "ttft_p99_ms": None, "link": link, "link_delay_ms": delay, "link_rate_mbit": rate}


def test_no_network_axis_no_chart_and_side_by_side_keeps_its_labels():
    cells = [cell("tp2", None, None, None, 10.0)]
    assert network_response(cells) is None
    assert "tp2 (ray)" in str(modes_side_by_side(cells).to_dict())


def test_link_settings_run_plain_then_more_delay_then_tighter_caps():
    cells = [cell("tp2", label, delay, rate, 10.0) for label, delay, rate in
             [("d5ms", 5, None), ("plain", 0, None), ("r10mbit", 0, 10), ("d1ms", 1, None), ("r100mbit", 0, 100)]]
    spec = network_response(cells).to_dict()
    assert spec["vconcat"][0]["encoding"]["x"]["sort"] == ["plain", "d1ms", "d5ms", "r100mbit", "r10mbit"]
    assert "tp2 (ray) d5ms" in str(modes_side_by_side(cells).to_dict())  # one bar per mode and setting
