"""The report's first screen: the context line (hardware as measured, engine, model, duration) and the
summary per load point, with its winner and margin or "no significant difference"; pure functions of rows."""

from servebench.analysis.summary_table import (
    NO_DIFFERENCE,
    WINNER_RULE,
    context_line,
    duration_text,
    point_summaries,
    summary_html,
)


def cell(mode: str, clients: int, repeat: int, tput: float, ttft: float = 20.0, **values) -> dict:
    key = f"{mode}.c{clients}.r{repeat}"
    return {"cell_id": f"r/{key}", "cell_key": key, "mode": mode, "load_kind": "closed", "clients": clients,
            "offered_rate": None, "status": "completed", "valid": True, "output_throughput": tput,
            "ttft_p50_ms": ttft, "ttft_p99_ms": 2 * ttft, "tpot_p50_ms": 5.0, "tpot_p99_ms": 7.0, **values}


def test_a_clear_gap_names_the_winner_and_its_margin_and_overlapping_intervals_say_no_difference():
    cells = [cell("tp1", 4, r, t) for r, t in enumerate((99, 100, 101))] + \
            [cell("tp2", 4, r, t) for r, t in enumerate((44, 45, 46))] + \
            [cell("tp1", 8, r, t) for r, t in enumerate((99, 100, 103))] + \
            [cell("tp2", 8, r, t) for r, t in enumerate((98, 101, 102))]
    four, eight = point_summaries(cells)
    assert (four.load_point, four.winner) == ("4 clients", "tp1")
    assert four.verdict == "tp1 by 2.22x, +55.0 tok/s over tp2"           # the gap a normalized chart hides
    assert eight.winner is None and eight.verdict.startswith(NO_DIFFERENCE)
    page = summary_html([four, eight])
    assert "100.0 <span" in page and "[99.0, 101.0]" in page and WINNER_RULE.split(":")[0] in page


def test_the_slo_decides_who_may_win_and_one_repeat_says_it_has_no_interval():
    cells = [cell("tp1", 4, 0, 100.0, ttft=300.0), cell("tp2", 4, 0, 60.0, ttft=40.0), cell("tp3", 4, 0, 50.0)]
    (point,) = point_summaries(cells, slo={"ttft_p99_ms": 100})
    assert point.winner == "tp2" and point.verdict == "tp2 by 1.20x, +10.0 tok/s over tp3; one repeat, no interval"
    assert "(misses the SLO)" in summary_html([point], {"ttft_p99_ms": 100})
    (none,) = point_summaries([cell("tp1", 4, 0, 100.0, ttft=300.0)], slo={"ttft_p99_ms": 100})
    assert none.winner is None and none.verdict == "no mode within the SLO"
    invalid = [cell("tp1", 4, 0, 100.0, valid=False), cell("tp2", 4, 0, 60.0)]
    (point,) = point_summaries(invalid)
    assert point.winner == "tp2" and point.missing == ["tp1"] and "no valid measurement" in summary_html([point])


def test_the_roofline_share_is_shown_where_judged_and_not_measured_otherwise():
    cells = [cell("tp1", 4, 0, 100.0), cell("tp2", 4, 0, 60.0)]
    roof = [{"cell_key": "tp1.c4.r0", "mode": "tp1", "load_kind": "closed", "clients": 4, "offered_rate": None,
             "judged": True, "decode_fraction": 0.42, "prefill_fraction": 0.2}]
    page = summary_html(point_summaries(cells, roof))
    assert "decode 42% · prefill 20%" in page and page.count("not measured") == 1


def test_each_mode_shows_its_prediction_and_how_the_measurement_compares():
    cells = [cell("tp1", 4, r, t) for r, t in enumerate((99, 100, 101))] + [cell("tp2", 4, 0, 45.0)]

    def predicted(mode: str, repeat: int, tput: float, ratio: float) -> dict:
        return {"cell_key": f"{mode}.c4.r{repeat}", "mode": mode, "load_kind": "closed", "clients": 4,
                "offered_rate": None, "output_throughput": tput, "tpot_p50_ms": 9.5, "throughput_ratio": ratio,
                "bound": "bandwidth", "efficiency_source": "fitted on 3 TP=1 cells"}

    rows = [predicted("tp1", r, 100.0, 1.0) for r in range(3)] + [predicted("tp2", 0, 90.0, 0.5)]
    (point,) = point_summaries(cells, predictions=rows)
    tp1, tp2 = point.modes
    assert tp1.prediction is not None and tp1.prediction.calibrated
    assert tp2.prediction is not None and (tp2.prediction.output_throughput, tp2.prediction.throughput_ratio) == \
        (90.0, 0.5)
    page = summary_html([point])
    assert "90.0 tok/s · TPOT 9.50 ms · measured 0.50x · bandwidth-bound" in page
    assert "calibrated on the run&#x27;s TP=1 cells" in page
    (bare,) = point_summaries(cells)
    assert "<th>predicted</th>" in summary_html([bare]) and "performance model" not in summary_html([bare])


def test_the_context_line_says_the_measured_roofline_or_not_measured():
    node = {"node": "n0", "role": "server", "cpu_model": "AMD EPYC 9654", "physical_cores": 96, "logical_cores": 192,
            "cpus": list(range(32)), "mem_total_bytes": 768 * 2**30, "mem_bandwidth_gbps": 301.4,
            "matmul_peak_gflops_bf16": 5012.0, "matmul_peak_gflops_fp32": None}
    client = {**node, "node": "loader", "role": "client", "cpu_model": "Loader CPU"}
    spec = {"model": {"generate": "llama-3.1-8b", "architecture": "llama", "layers": 32, "hidden": 4096, "heads": 32,
                      "kv_heads": 8, "vocab_size": 128256, "dtype": "bfloat16"}, "engine": {"kind": "vllm"}}
    servers = [{"mode": "tp1", "engine": "vllm", "engine_version": "0.32.0+cpu", "served_dtype": "bfloat16"}]
    line = context_line([node, client], servers, spec, 3725)
    assert line.startswith("1 node of AMD EPYC 9654, 32 of 96 cores each, 768 GiB; memory bandwidth 301 GB/s; "
                           "matmul 5,012 GFLOP/s bf16")
    assert "engine vllm 0.32.0+cpu" in line and "Loader CPU" not in line
    assert "model llama-3.1-8b (llama, 32 layers, hidden 4096, 32 heads / 8 KV heads, vocab 128,256), dtype " \
           "bfloat16 (served bfloat16)" in line and line.endswith("run 1 h 02 min")
    bare = context_line([{**node, "mem_bandwidth_gbps": None, "matmul_peak_gflops_bf16": None}], [], spec, None)
    assert "memory bandwidth not measured; matmul not measured" in bare and "version not recorded" in bare
    assert duration_text(35) == "35 s" and duration_text(250) == "4 min 10 s"
