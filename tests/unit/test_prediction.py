"""The performance model's parts, each against numbers worked out by hand: the declared chips' peaks, a step's
time and its bound, the batching simulation's timeline, the calibration's fit and the flags of a cell far below
its prediction (servebench/prediction/, docs/performance-model.md)."""

import pytest

from servebench.config.campaign import LinkSetting
from servebench.load.config import LoadConfig
from servebench.prediction.calibrate import CalibrationCell, fit_efficiency
from servebench.prediction.campaign import schedule_seed, with_setting
from servebench.prediction.flags import Expected, Measured, PlacementFacts, RankPlacement, flag_cell
from servebench.prediction.hardware import DECLARED, NodeFigures, declared, figures_from_roofline
from servebench.prediction.simulate import Arrivals, BatchLimits, simulate
from servebench.prediction.startup import predict_startup
from servebench.prediction.step import (
    Efficiency,
    Link,
    RankWork,
    StepBatch,
    StepTime,
    collective_s,
    handoff_s,
    network_time_s,
    step_time,
)

PLAIN = Efficiency(bandwidth=1.0, compute=1.0, step_overhead_s=0.0, request_overhead_s=0.0)
LOCAL = Link(0.0, 1e12)


def work(**fields) -> RankWork:
    base = dict(weight_bytes=1e9, kv_bytes_per_token=0.0, parameters=1e9, attention_flops_per_pair=0.0, layers=4,
                hidden=128, activation_bytes=2, dtype="bfloat16")
    return RankWork(**{**base, **fields})


# --- declared hardware -------------------------------------------------------------------------------------------

def test_declared_peaks_are_cores_times_clock_times_vector_lanes():
    assert declared("a64fx").matmul_gflops["float32"] == 48 * 2.0 * 2 * 16 * 2 == 6144.0
    assert declared("a64fx").matmul_gflops["float16"] == 12288.0
    assert declared("a64fx").mem_bandwidth_gbps == 4 * 256 and declared("a64fx").numa_nodes == 4
    assert declared("graviton3").matmul_gflops["float32"] == pytest.approx(5324.8)   # 64 x 2.6 x 2 x 8 x 2
    assert declared("graviton3").mem_bandwidth_gbps == pytest.approx(8 * 4.8 * 8)    # DDR5-4800, 8 channels
    assert declared("grace").matmul_gflops["float32"] == pytest.approx(7142.4)       # 72 x 3.1 x 4 x 4 x 2
    assert all(chip.declared and chip.source.startswith("declared: ") for chip in DECLARED.values())
    with pytest.raises(ValueError, match="a64fx, graviton3, grace"):
        declared("m1")


def test_a_dtype_far_below_the_fastest_is_named_with_the_one_that_has_kernels():
    avx2 = NodeFigures("node0", 20.0, {"bfloat16": 8.0, "float32": 77.0})
    warning = avx2.slow_dtype_warning("bfloat16")
    assert warning is not None and "8 GFLOP/s against float32's 77 (10x slower); serve float32" in warning
    assert avx2.slow_dtype_warning("float32") is None
    # bf16 kernels of their own (AVX-512 BF16): neither dtype is slow, float32 at 0.42 of bf16 has kernels too
    assert NodeFigures("n", 29.0, {"bfloat16": 214.0, "float32": 92.0}).slow_dtype_warning("float32") is None
    # A64FX has no bf16 instructions: its fast dtypes are float32 and float16, the fastest float16
    a64fx = declared("a64fx").slow_dtype_warning("bfloat16")
    assert a64fx is not None and "serve float16" in a64fx


def test_figures_from_a_cached_roofline():
    cached = {"mem_bandwidth_gbps": 15.18, "matmul_peak_gflops_bf16": 205.99, "matmul_peak_gflops_fp32": 85.95,
              "cpus": [0, 1], "method": "torch"}
    figures = figures_from_roofline("node0", cached)
    assert figures is not None
    assert figures.matmul_gflops == {"bfloat16": 205.99, "float32": 85.95} and figures.cores == 2
    assert figures.peak_gflops("float16") == (85.95, "float32")   # not measured: borrows fp32's
    assert figures_from_roofline("node0", {"mem_bandwidth_gbps": None}) is None


# --- the step model ----------------------------------------------------------------------------------------------

def test_a_decode_step_of_one_sequence_reads_the_weights_at_the_bandwidth():
    # 1 GB of weights at 10 GB/s, half of it reached: 0.2 s, plus a 4 ms step overhead
    timing = step_time(work(), StepBatch(1, 0, 0, 0), 10.0, 1000.0, (LOCAL, LOCAL),
                       Efficiency(bandwidth=0.5, compute=1.0, step_overhead_s=0.004))
    assert timing.memory_s == pytest.approx(0.2)
    assert timing.compute_s == pytest.approx(2e9 / 1e12)               # 2 FLOPs a parameter, one token
    assert timing.total_s == pytest.approx(0.204)
    assert timing.bound == "bandwidth"


def test_a_prefill_of_a_hundred_tokens_is_compute_bound():
    # 2 x 1e9 parameters x 100 tokens = 2e11 FLOPs at 100 GFLOP/s x 0.5 = 4 s; the weights' 0.1 s at 10 GB/s
    timing = step_time(work(), StepBatch(0, 100, 0, 0), 10.0, 100.0, (LOCAL, LOCAL),
                       Efficiency(bandwidth=1.0, compute=0.5, step_overhead_s=0.0))
    assert timing.compute_s == pytest.approx(4.0) and timing.memory_s == pytest.approx(0.1)
    assert timing.total_s == pytest.approx(4.0) and timing.bound == "compute"


def test_kv_reads_and_attention_add_to_the_step():
    # 1000 context tokens of 1 kB KV each, plus the new token's: 1e9 + 1001e3 bytes at 1 GB/s
    timing = step_time(work(kv_bytes_per_token=1000.0, attention_flops_per_pair=1000.0), StepBatch(1, 0, 1000, 1000),
                       1.0, 1e6, (LOCAL, LOCAL), PLAIN)
    assert timing.memory_s == pytest.approx((1e9 + 1001 * 1000) / 1e9)
    assert timing.compute_s == pytest.approx((2e9 + 1000 * 1000) / 1e15)


def test_ranks_sharing_a_node_share_its_bandwidth_and_a_numa_node_caps_it():
    # two ranks on a node: each reads its 1 GB at half of 10 GB/s; on one of four NUMA nodes at a quarter
    assert step_time(work(node_share=0.5), StepBatch(1, 0, 0, 0), 10.0, 0.0, (LOCAL, LOCAL),
                     PLAIN).memory_s == pytest.approx(0.2)
    assert step_time(work(node_share=0.5, numa_share=0.25), StepBatch(1, 0, 0, 0), 10.0, 0.0, (LOCAL, LOCAL),
                     PLAIN).memory_s == pytest.approx(0.4)


def test_tensor_parallel_all_reduces_twice_a_layer_and_pipeline_sends_once_a_boundary():
    link = Link(latency_s=1e-3, bandwidth_bytes_s=1e9)
    # one token of hidden 128 in bf16: 256 bytes; a ring of 2: 2 hops of 1 ms and 256 bytes through each link
    assert collective_s(link, 256, 2) == pytest.approx(2e-3 + 256 / 1e9)
    # 4 layers: 2 x 4 + 2 (the embedding, the logits) all-reduces a step
    assert network_time_s(work(tp=2), StepBatch(1, 0, 0, 0), link, LOCAL) == pytest.approx(10 * (2e-3 + 256e-9))
    # PP=2: one send of the hidden state and the residual (512 bytes), no all-reduce
    assert network_time_s(work(pp=2), StepBatch(1, 0, 0, 0), LOCAL, link) == pytest.approx(1e-3 + 512e-9)
    assert network_time_s(work(), StepBatch(1, 0, 0, 0), link, link) == 0.0


def test_ranks_on_one_core_hand_it_over_at_each_collective():
    # EEVDF's base slice 0.75 ms x (1 + log2 CPUs) and half a 4 ms tick: 3.5 ms on 2 CPUs, 5 ms from 8 CPUs on
    assert handoff_s(2) == pytest.approx(0.75e-3 * 2 + 2e-3)
    assert handoff_s(1) == pytest.approx(0.75e-3 + 2e-3)
    assert handoff_s(64) == pytest.approx(0.75e-3 * 4 + 2e-3)
    shared = Link(latency_s=5e-6, bandwidth_bytes_s=1e10, handoff_s=3.5e-3)
    assert collective_s(shared, 256, 2) == pytest.approx(3.5e-3 + 256 / 1e10)    # one turn of the other rank


def test_a_link_setting_adds_its_delay_for_each_host_it_is_set_on_and_caps_the_rate():
    wire = Link(1e-4, 1.25e9, label="network")
    one = with_setting(wire, LinkSetting(delay_ms=5, hosts=["h2"]), ("h1", "h2"))
    assert one.latency_s == pytest.approx(1e-4 + 5e-3)
    both = with_setting(wire, LinkSetting(delay_ms=1), ("h1", "h2"))
    assert both.latency_s == pytest.approx(1e-4 + 2e-3)
    capped = with_setting(wire, LinkSetting(rate_mbit=100, hosts=["h2"]), ("h1", "h2"))
    assert capped.bandwidth_bytes_s == pytest.approx(100e6 / 8) and capped.latency_s == pytest.approx(1e-4)
    assert with_setting(Link(5e-6, 1e10), LinkSetting(delay_ms=5), ("h1", "h2")).latency_s == 5e-6  # shared memory


# --- the simulation ----------------------------------------------------------------------------------------------

def ten_ms(batch: StepBatch) -> StepTime:
    return StepTime(0.0, 0.0, 0.0, 0.01, 0.01)


def test_one_client_waits_one_step_for_its_first_token_and_one_a_token_after():
    # prompt 4, answer 5: a prefill step (first token at 10 ms), 4 decode steps (done at 50 ms); 3 requests in turn
    cell = simulate(Arrivals(3, 4, 5, clients=1), BatchLimits(8, 64), ten_ms)
    assert cell.ttft_p50_s == pytest.approx(0.01) and cell.tpot_p50_s == pytest.approx(0.01)
    assert cell.output_throughput == pytest.approx(15 / 0.15)
    assert cell.duration_s == pytest.approx(0.15) and cell.bound == "engine"


def test_the_request_overhead_delays_the_first_token_and_the_next_send():
    # each request reaches the scheduler 5 ms after it is sent: first token at 15 ms, done at 55 ms
    cell = simulate(Arrivals(3, 4, 5, clients=1), BatchLimits(8, 64), ten_ms, request_overhead_s=0.005)
    assert cell.ttft_p50_s == pytest.approx(0.015)
    assert cell.output_throughput == pytest.approx(15 / 0.165)


def test_a_prompt_longer_than_the_token_budget_is_prefilled_in_chunks():
    cell = simulate(Arrivals(1, 4, 3, clients=1), BatchLimits(8, 2), ten_ms)   # 2 tokens a step: 2 steps
    assert cell.ttft_p50_s == pytest.approx(0.02)


def test_a_full_batch_keeps_the_second_client_waiting():
    # one sequence at a time: B waits for A's 5 steps, then its own prefill step: 60 ms; with two seats both 10 ms
    one_seat = simulate(Arrivals(2, 4, 5, clients=2), BatchLimits(1, 64), ten_ms)
    assert one_seat.ttft_p99_s == pytest.approx(0.01 + (0.06 - 0.01) * 0.99)
    two_seats = simulate(Arrivals(2, 4, 5, clients=2), BatchLimits(2, 64), ten_ms)
    assert two_seats.ttft_p99_s == pytest.approx(0.01) and two_seats.mean_batch == pytest.approx((8 + 4 * 2) / 5)


def test_open_loop_arrivals_apart_find_the_engine_idle_and_warmup_is_left_out():
    cell = simulate(Arrivals(3, 4, 5, offsets=(0.0, 1.0, 2.0), warmup=1), BatchLimits(8, 64), ten_ms)
    assert cell.ttft_p50_s == pytest.approx(0.01)
    assert cell.output_throughput == pytest.approx(10 / (2.05 - 1.0))   # the counted window: 1.0 s to 2.05 s


def test_the_schedule_seed_is_the_load_generators():
    config = LoadConfig(base_url="http://127.0.0.1:1", model="m", rate=2.0, requests=4, seed=917748354)
    assert schedule_seed(917748354) == config.effective_schedule_seed


# --- calibration -------------------------------------------------------------------------------------------------

def test_a_decode_the_hardware_explains_little_of_fits_the_step_overhead():
    # the hardware: 0.1 ms of a 4.1 ms TPOT at the default bandwidth share 0.8 (0.125 ms): overhead 3.975 ms;
    # TTFT 9.6 ms = 1 step of it + 0.02 ms prefill at compute 0.5 + the request overhead
    cells = [CalibrationCell(0.0096, 0.0041, 0.00001, 0.0001), CalibrationCell(0.0096, 0.0041, 0.00001, 0.0001)]
    fitted = fit_efficiency(cells)
    assert fitted.bandwidth == 0.8 and fitted.step_overhead_s == pytest.approx(0.0041 - 0.000125)
    assert fitted.compute == 0.5
    assert fitted.request_overhead_s == pytest.approx(0.0096 - (0.0041 - 0.000125) - 0.00002)
    assert fitted.source == "fitted on 2 TP=1 cells"


def test_a_decode_the_hardware_explains_fits_the_bandwidth_share():
    # 0.3 s of weights at full bandwidth against a measured 0.604 s (0.375 s of it at the default 0.8: over
    # half), the 4 ms overhead kept: share 0.3 / 0.6; prefill: 0.75 s of FLOPs at full peak against a 2.007 s
    # TTFT, less a step's 4 ms and the 3 ms request: 0.75 / 2.0
    fitted = fit_efficiency([CalibrationCell(2.007, 0.604, 0.75, 0.3)])
    assert fitted.bandwidth == pytest.approx(0.5) and fitted.step_overhead_s == 0.004
    assert fitted.compute == pytest.approx(0.375) and fitted.request_overhead_s == 0.003


def test_no_cell_keeps_the_defaults():
    assert fit_efficiency([]) == Efficiency()


# --- start-up ----------------------------------------------------------------------------------------------------

def test_a_profile_run_without_bf16_kernels_takes_minutes():
    # 1.31e9 parameters x 2 FLOPs x 2048 tokens at 8 GFLOP/s x 0.5: 1341.6 s; the weights 3.1 GB at 15 GB/s x 0.8
    rank = work(weight_bytes=3.1e9, parameters=1.31e9)
    startup = predict_startup(rank, NodeFigures("n", 15.0, {"bfloat16": 8.0, "float32": 77.0}), 2048, Efficiency(),
                              profile_run=True, compiles=True)
    assert startup.profile_s == pytest.approx(2 * 1.31e9 * 2048 / 4e9)
    assert startup.load_s == pytest.approx(3.1e9 / 12e9)
    assert startup.total_s == pytest.approx(45 + 35 + startup.profile_s + startup.load_s)
    quick = predict_startup(rank, NodeFigures("n", 15.0, {"bfloat16": 200.0}), 2048, Efficiency(), False, False)
    assert quick.profile_s == 0.0 and quick.compile_s == 0.0


# --- flags -------------------------------------------------------------------------------------------------------

EXPECTED = Expected(tpot_p50_s=0.010, output_throughput=100.0, bound="bandwidth")


def test_a_rank_given_half_its_cores_is_flagged_on_a_cell_far_below_its_prediction():
    # the binding gave the node's one rank 2 of its 4 cores; it runs 2 threads there
    facts = PlacementFacts((RankPlacement("rank0", "node0", cores=2, threads=2),), {"node0": 4})
    flags = flag_cell(EXPECTED, Measured(tpot_p50_s=0.021, output_throughput=48.0), facts)
    assert flags == ["measured at 0.48 of its prediction: rank0 on node0 is bound to 2 of the 4 cores its share of "
                     "the node is: the rest stay idle"]
    # the same placement near its prediction: nothing to say
    assert flag_cell(EXPECTED, Measured(0.011, 92.0), facts) == []
    # 4 threads on the 2 cores it was given: they take turns
    crowded = PlacementFacts((RankPlacement("rank0", "node0", cores=2, threads=4),), {"node0": 2})
    assert flag_cell(EXPECTED, Measured(0.021, 48.0), crowded) == [
        "measured at 0.48 of its prediction: rank0 on node0 runs 4 threads on 2 cores: its threads take turns",
        "measured at 0.48 of its prediction: node node0 is oversubscribed: 4 threads on 2 cores"]


def test_numa_oversubscription_others_and_the_network_are_named():
    facts = PlacementFacts((RankPlacement("rank0", "a", 12, 12, numa_nodes=2), RankPlacement("rank1", "a", 12, 12)),
                           {"a": 16}, foreign_cpu=0.3, link_delay_ms=5.0)
    flags = flag_cell(EXPECTED, Measured(0.05, 20.0), facts)
    assert [f.split(": ", 1)[1] for f in flags] == [
        "rank0 on a spans 2 NUMA nodes: part of its weights are read from another node's memory",
        "node a is oversubscribed: 24 threads on 16 cores",
        "other processes took 30% of the server cores",
        "the network: 5 ms added delay on its links"]


def test_a_cell_far_below_with_no_cause_says_so():
    facts = PlacementFacts((RankPlacement("rank0", "a", 4, 4),), {"a": 4})
    flags = flag_cell(EXPECTED, Measured(0.04, 25.0), facts)
    assert len(flags) == 1 and "none of the causes the model names" in flags[0] and "0.25" in flags[0]
