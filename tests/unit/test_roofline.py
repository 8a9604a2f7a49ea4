"""The roofline (docs/roofline.md): the node-side micro-benchmark's output parsed and cached, its figures
landed on `nodes`, and `cell_roofline`'s arithmetic on a hand-built warehouse; the report's chart or note."""

import json
import subprocess
import sys

import pytest

from servebench import warehouse
from servebench.analysis.report import roofline_chart, roofline_note
from servebench.builds.venv import EngineBuild
from servebench.engines.base import RankShare
from servebench.models.shapes import preset
from servebench.planning.memory import (
    ModelWeights,
    share_step_bytes,
    share_token_parameters,
    share_weight_bytes,
)
from servebench.providers import Node
from servebench.roofline import benchmark as roofline
from servebench.roofline import nodes as node_roofline
from servebench.roofline.figures import rank_roofline_figures
from servebench.warehouse import landing, reads


@pytest.fixture
def con(tmp_path):
    con = warehouse.connect(tmp_path / "wh.duckdb")
    yield con
    con.close()


# the micro-benchmark


def test_the_result_line_is_parsed_among_other_output():
    out = ("a warning\nROOFLINE " + json.dumps({
        "cpus": [0, 1], "threads": 2, "library": "torch 2.5", "bandwidth_kernel": "sum", "notes": [],
        "mem_bandwidth_gbps": 15.512, "matmul_peak_gflops_fp32": 88.249, "matmul_peak_gflops_bf16": 205.0}) + "\n")
    found = roofline.parse(out)
    assert found["mem_bandwidth_gbps"] == 15.51 and found["matmul_peak_gflops_fp32"] == 88.25
    assert found["matmul_peak_gflops_bf16"] == 205.0 and found["cpus"] == [0, 1]
    assert roofline.method(found) == "torch 2.5; sum"


def test_a_peak_not_measured_is_none_and_said():
    out = "ROOFLINE " + json.dumps({"cpus": [0], "library": "numpy 2.0", "mem_bandwidth_gbps": 20,
                                    "matmul_peak_gflops_fp32": 90, "notes": ["numpy has no bf16"]})
    found = roofline.parse(out)
    assert found["matmul_peak_gflops_bf16"] is None and "numpy has no bf16" in roofline.method(found)


def test_output_without_a_result_line_is_an_error():
    with pytest.raises(ValueError, match="no ROOFLINE line"):
        roofline.parse("Traceback ...\nImportError: boom\n")


def test_the_program_runs_with_a_small_buffer_and_reports_a_bandwidth():
    args = json.dumps({"cpus": [0], "buffer_mib": 8, "matmul_shapes": [[64, 64, 64]], "budget_s": 0.5})
    result = subprocess.run([sys.executable, "-c", roofline.PROGRAM, args], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    found = roofline.parse(result.stdout)
    assert found["mem_bandwidth_gbps"] > 0 and found["cpus"] == [0]


def test_the_peak_is_the_best_of_several_shapes_and_names_the_kernel_that_gave_it():
    args = json.dumps({"cpus": [0], "buffer_mib": 8, "matmul_shapes": [[64, 64, 64], [32, 64, 128]], "budget_s": 0.5})
    result = subprocess.run([sys.executable, "-c", roofline.PROGRAM, args], capture_output=True, text=True,
                            timeout=60)
    found = roofline.parse(result.stdout)
    assert found["matmul_peak_gflops_fp32"] > 0, result.stdout + result.stderr
    [kernel] = found["matmul_kernels"].values()
    assert kernel.endswith(("64x64x64", "32x64x128")) and f"peak: {kernel}" in roofline.method(found)


def test_emulated_nodes_get_smaller_sizes():
    native, emulated = json.loads(roofline.program_args([1, 0], False)), json.loads(roofline.program_args([0], True))
    assert native["cpus"] == [0, 1] and native["buffer_mib"] == 256
    assert [2048, 2048, 2048] in native["matmul_shapes"] and len(native["matmul_shapes"]) > 1
    assert emulated["buffer_mib"] < native["buffer_mib"]
    products = [[m * k * n for m, k, n in sizes["matmul_shapes"]] for sizes in (emulated, native)]
    assert max(products[0]) < min(products[1])


def build(key="k1", python_version="3.11"):
    return EngineBuild(key=key, engine="vllm", engine_version="0", packages=[], python_version=python_version,
                       platform="linux-x86_64", venv_path="/venv", pip_freeze="", build_seconds=None,
                       created_at="2026-01-01T00:00:00", inputs={}, tool_version="0")


class CountingProvider:
    def __init__(self):
        self.argvs = []

    def run(self, node, argv, timeout=None):
        self.argvs.append(argv)
        out = "ROOFLINE " + json.dumps({"cpus": json.loads(argv[-1])["cpus"], "library": "torch",
                                        "mem_bandwidth_gbps": 10.0, "matmul_peak_gflops_fp32": 50.0,
                                        "matmul_peak_gflops_bf16": 100.0})
        return subprocess.CompletedProcess(argv, 0, out, "")

    def node_python(self, node):
        return "/usr/bin/python3"


def test_a_node_is_measured_once_per_build_and_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path))
    provider, node = CountingProvider(), Node(name="n0", address="127.0.0.1", cpus=[0])
    facts = {"n0": {"hostname": "h", "cpu_model": "cpu", "arch": "x86_64"}}
    first = node_roofline.measure_nodes(provider, [node], facts, build(), log=lambda _: None)
    again = node_roofline.measure_nodes(provider, [node], facts, build(), log=lambda _: None)
    assert len(provider.argvs) == 1 and provider.argvs[0][0] == "/venv/bin/python"
    assert first["n0"]["mem_bandwidth_gbps"] == again["n0"]["mem_bandwidth_gbps"] == 10.0
    assert not first["n0"]["cached"] and again["n0"]["cached"] and first["n0"]["emulated"] is False
    node_roofline.measure_nodes(provider, [node], facts, build("k2", python_version=""), log=lambda _: None)
    assert len(provider.argvs) == 2 and provider.argvs[1][0] == "/usr/bin/python3"  # binaries only: python3


def test_a_node_that_cannot_be_measured_is_said_and_left_out(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path))

    class Failing(CountingProvider):
        def run(self, node, argv, timeout=None):
            return subprocess.CompletedProcess(argv, 1, "", "ModuleNotFoundError: x")

    said = []
    found = node_roofline.measure_nodes(Failing(), [Node(name="n0", address="a", cpus=[0])],
                                        {"n0": {"arch": "x86_64"}}, build(), log=said.append)
    assert found == {} and "roofline not measured" in said[0]


# what a cell is put against: the bytes a decode step reads, the parameters a prompt token goes through


def rank(layers=28, tp=1, embedding=True, head=True):
    return RankShare(node="n0", label="rank0", layers=layers, tp=tp, embedding=embedding, head=head)


def test_a_decode_step_reads_all_but_an_untied_embedding_and_a_prompt_token_goes_through_the_layers_only():
    qwen = ModelWeights(preset("qwen2-1.5b"), "bfloat16")   # untied: embedding and head 151,936 x 1,536 each
    vocab = 151_936 * 1_536
    figures = rank_roofline_figures(qwen, [rank()])
    assert figures["rank_weight_bytes"] == share_weight_bytes(qwen, rank()) - 2 * vocab
    # 1,777,088,000 parameters less the embedding, the head and the final norm: the 28 layers'
    assert figures["rank_parameters"] == 1_777_088_000 - 2 * vocab - 1_536 - 28 * (2 * 1_536 + 2_048)
    assert figures["rank_parameters"] == pytest.approx(1.31e9, rel=0.001)
    assert figures["rank_kv_bytes_per_token"] == 28 * 2 * 2 * 128 * 2 and figures["ranks_per_node"] == 1
    tp2 = rank_roofline_figures(qwen, [rank(tp=2), RankShare(node="n0", label="rank1", layers=28, tp=2,
                                                             embedding=True, head=True)])
    assert tp2["ranks_per_node"] == 2 and tp2["rank_parameters"] == pytest.approx(figures["rank_parameters"] / 2,
                                                                                   rel=0.001)
    tied = ModelWeights(preset("qwen2-1.5b").with_overrides(tie_embeddings=True), "bfloat16")
    assert share_step_bytes(tied, rank()) == share_weight_bytes(tied, rank())  # the one matrix is the head too
    first_stage = rank(layers=14, head=False)                                  # PP: the embedding alone
    assert share_step_bytes(qwen, first_stage) == share_weight_bytes(qwen, first_stage) - 2 * vocab


def test_a_moe_prompt_token_goes_through_its_active_experts_only():
    shape = preset("qwen3-30b-a3b")
    weights = ModelWeights(shape, "bfloat16")
    active_layers = shape.active_parameters() - shape.embedding_parameters()
    norms_and_small = shape.layers * shape.layer_breakdown(True).small
    assert share_token_parameters(weights, rank(layers=shape.layers)) == active_layers - norms_and_small


# the warehouse


def node_row(con, run_id, node="n0", role="server"):
    landing.insert_row(con, "nodes", dict(run_id=run_id, node=node, hostname="h", address="a", cpus=[0], role=role))


def server_row(con, run_id, mode, **figures):
    landing.land_server(con, run_id, landing.ServerRecord(
        mode=mode, layout=landing.ServerLayout(), pid=1, port=1, command=["x"], ready_seconds=1.0, status="ready",
        rank_figures=landing.RankFigures(**{"served_dtype": "bfloat16", "rank_weight_bytes": 1_000_000,
                                            "rank_kv_bytes_per_token": 1000, "rank_parameters": 500_000,
                                            "ranks_per_node": 1, **figures})))


def cell_row(con, run_id, key, mode, *, load_kind="closed", clients=2, rate=None, tpot=10.0, ttft=64.0,
             duration=1.0, requests=((64, 32, 0.5), (64, 32, 0.5))):
    cid = f"{run_id}/{key}"
    landing.insert_row(con, "cells", dict(
        run_id=run_id, cell_id=cid, cell_key=key, mode=mode, tp=1, pp=1, executor="mp", load_kind=load_kind,
        clients=clients, offered_rate=rate, repeat=0, input_len=64, output_len=32, seed=0, status="completed",
        tpot_p50_ms=tpot, ttft_p50_ms=ttft, duration_s=duration))
    for index, (prompt, output, e2e) in enumerate(requests):
        landing.insert_row(con, "requests", dict(
            run_id=run_id, cell_id=cid, request_index=index, warmup=False, sent_s=0.0, first_token_s=0.01,
            last_token_s=e2e, input_tokens=prompt, output_tokens=output))


def roof(con, key):
    return reads.rows(con, "select * from cell_roofline where cell_key = ?", [key])[0]


def test_land_roofline_keeps_what_an_earlier_build_measured(con):
    node_row(con, "r")
    landing.land_roofline(con, "r", {"n0": {"mem_bandwidth_gbps": 12.0, "matmul_peak_gflops_bf16": None,
                                            "matmul_peak_gflops_fp32": 40.0, "cpus": [0], "emulated": False,
                                            "method": "numpy"}})
    landing.land_roofline(con, "r", {"n0": {"mem_bandwidth_gbps": 15.0, "matmul_peak_gflops_bf16": 200.0,
                                            "matmul_peak_gflops_fp32": 80.0, "cpus": [0], "emulated": False,
                                            "method": "torch"}})
    row = reads.rows(con, "select * from nodes")[0]
    assert (row["mem_bandwidth_gbps"], row["matmul_peak_gflops_bf16"], row["matmul_peak_gflops_fp32"]) == (12, 200, 40)
    assert row["roofline_cpus"] == [0] and row["roofline_emulated"] is False and row["roofline_method"] == "numpy"


def measured(con, run_id, *, emulated=False, bandwidth=10.0, bf16=100.0, fp32=50.0):
    node_row(con, run_id)
    node_row(con, run_id, node="client", role="client")  # a client node is never the roofline
    landing.land_roofline(con, run_id, {"n0": {"mem_bandwidth_gbps": bandwidth, "matmul_peak_gflops_bf16": bf16,
                                               "matmul_peak_gflops_fp32": fp32, "cpus": [0],
                                               "emulated": emulated}})


def test_decode_and_prefill_fractions_of_a_closed_loop_cell(con):
    measured(con, "r")
    server_row(con, "r", "tp1")
    cell_row(con, "r", "tp1.c2.r0", "tp1")
    row = roof(con, "tp1.c2.r0")
    # decode: 1e6 weights + 2 in flight x (64 + 32/2) tokens x 1000 B = 1.16e6 B per 10 ms step
    assert row["in_flight"] == 2 and row["mean_context_tokens"] == 80
    assert row["decode_bytes_per_step"] == pytest.approx(1.16e6)
    assert row["decode_gbps"] == pytest.approx(0.116) and row["decode_fraction"] == pytest.approx(0.0116)
    # prefill: 2 x 5e5 FLOPs per token, 64 ms / 64 tokens = 1 ms a token: 1 GFLOP/s of the bf16 peak 100
    assert row["prefill_flops_per_token"] == 1e6 and row["prefill_gflops"] == pytest.approx(1.0)
    assert row["matmul_peak_gflops"] == 100 and row["prefill_fraction"] == pytest.approx(0.01)
    assert row["judged"] and not row["emulated"] and row["note"] is None


def test_an_open_loop_cell_has_littles_law_in_flight_and_fp32_is_judged_against_the_fp32_peak(con):
    measured(con, "r")
    server_row(con, "r", "tp2", served_dtype="float32", ranks_per_node=2)
    cell_row(con, "r", "tp2.rate4.r0", "tp2", load_kind="open", clients=None, rate=4.0, duration=2.0,
             requests=((64, 32, 1.0), (64, 32, 1.0), (64, 32, 1.0)))
    row = roof(con, "tp2.rate4.r0")
    assert row["in_flight"] == pytest.approx(1.5)  # 3 s of requests over a 2 s cell
    assert row["decode_bytes_per_step"] == pytest.approx(2 * (1e6 + 1.5 * 80 * 1000))  # two ranks on the node
    assert row["matmul_peak_gflops"] == 50 and row["prefill_fraction"] == pytest.approx(2 * 1.0 / 50)


def test_emulated_cells_are_not_judged_and_unknowns_are_null(con):
    measured(con, "emu", emulated=True)
    server_row(con, "emu", "tp1")
    cell_row(con, "emu", "tp1.c2.r0", "tp1")
    node_row(con, "bare")  # measured nothing
    server_row(con, "bare", "tp1")
    cell_row(con, "bare", "tp1.c4.r0", "tp1")
    emulated, bare = roof(con, "tp1.c2.r0"), roof(con, "tp1.c4.r0")
    assert emulated["decode_fraction"] is None and emulated["prefill_fraction"] is None
    assert emulated["emulated"] and not emulated["judged"] and emulated["note"].startswith("emulated")
    assert emulated["decode_gbps"] == pytest.approx(0.116)  # the figures are there, only not judged
    assert bare["decode_fraction"] is None and not bare["judged"] and bare["note"] == "node not measured"


def test_a_rate_above_its_roof_is_clipped_to_one_and_flagged_never_reported_above_one(con):
    measured(con, "r", bf16=100.0)
    server_row(con, "r", "tp1", rank_parameters=60_000_000)  # 2 x 6e7 FLOPs a token at 1 ms a token: 120 GFLOP/s
    cell_row(con, "r", "tp1.c2.r0", "tp1")
    row = roof(con, "tp1.c2.r0")
    assert row["prefill_gflops"] == pytest.approx(120.0) and row["prefill_fraction"] == 1.0
    assert row["above_roofline"] and row["judged"]
    assert row["note"].startswith("prefill at 1.20 of the measured roof: clipped to 1")
    assert row["decode_fraction"] == pytest.approx(0.0116)  # decode is within its roof: not clipped
    measured(con, "ok")
    server_row(con, "ok", "tp1")
    cell_row(con, "ok", "tp1.c4.r0", "tp1")
    within = roof(con, "tp1.c4.r0")
    assert within["above_roofline"] is False and within["note"] is None


def test_a_shape_not_known_leaves_the_fractions_null(con):
    measured(con, "r")
    landing.land_server(con, "r", landing.ServerRecord(mode="tp1", layout=landing.ServerLayout(), pid=1, port=1,
                                                       command=["x"], ready_seconds=1.0, status="ready"))
    cell_row(con, "r", "tp1.c2.r0", "tp1")
    row = roof(con, "tp1.c2.r0")
    assert row["decode_fraction"] is None and row["note"].startswith("bytes per rank unknown")


# the report


def test_the_report_charts_judged_cells_and_says_a_line_when_nothing_is_known(con):
    measured(con, "r")
    server_row(con, "r", "tp1")
    cell_row(con, "r", "tp1.c2.r0", "tp1")
    cells = reads.roofline_cells(con, "r")
    assert roofline_chart(cells) is not None and roofline_note(cells) == ""
    measured(con, "emu", emulated=True)
    server_row(con, "emu", "tp1")
    cell_row(con, "emu", "tp1.c2.r0", "tp1")
    emulated = reads.roofline_cells(con, "emu")
    assert roofline_chart(emulated) is None and "emulated node" in roofline_note(emulated)
    assert "no completed cell" in roofline_note([])


def test_the_log_line_names_the_figures_a_node_has_and_why_the_others_are_missing():
    from servebench.roofline.nodes import roofline_summary

    full = {"mem_bandwidth_gbps": 8.3, "matmul_peak_gflops_bf16": 40.1, "matmul_peak_gflops_fp32": 50.3, "notes": []}
    assert roofline_summary(full) == "8.3 GB/s, bf16 40.1 GFLOP/s, fp32 50.3 GFLOP/s"
    avx2 = {**full, "matmul_peak_gflops_bf16": 0.8, "matmul_peak_gflops_fp32": 58.4}  # an AVX2-only EPYC's
    assert roofline_summary(avx2) == ("8.3 GB/s, bf16 0.8 GFLOP/s, fp32 58.4 GFLOP/s, no bf16 kernels on this CPU "
                                      "(bf16 73x slower than fp32: a bf16 model measures that)")
    assert roofline_summary({**avx2, "emulated": True}).endswith("fp32 58.4 GFLOP/s")  # qemu's figures are not judged
    bare = {"mem_bandwidth_gbps": 9.42, "matmul_peak_gflops_bf16": None, "matmul_peak_gflops_fp32": None,
            "notes": ["neither torch nor numpy: no matmul peak"]}
    assert roofline_summary(bare) == "9.42 GB/s, neither torch nor numpy: no matmul peak"
    assert "None" not in roofline_summary(bare)


def test_bf16_has_kernels_where_its_products_run_at_a_useful_fraction_of_fp32s():
    peaks = [(("amx", 190.0, 95.0), True), (("avx512 without bf16", 30.0, 60.0), True),
             (("avx2 only", 0.8, 58.4), False), (("a quarter exactly", 25.0, 100.0), True)]
    for (name, bf16, fp32), expected in peaks:
        figures = {"matmul_peak_gflops_bf16": bf16, "matmul_peak_gflops_fp32": fp32}
        assert roofline.bf16_has_kernels(figures) is expected, name
    assert roofline.bf16_has_kernels({"matmul_peak_gflops_bf16": None, "matmul_peak_gflops_fp32": 50.0}) is None
    assert roofline.bf16_has_kernels({"matmul_peak_gflops_fp32": 50.0}) is None   # numpy's node: no bf16 measured
