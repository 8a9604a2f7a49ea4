"""Engine knobs as sweep axes, and the tuner (a capacity search per configuration, the
best against the default). Pure parts on plain data; the flow with the test-only echo engine,
whose `prefill_ms` knob sets a server's capacity (1000 / prefill_ms requests per second)."""

from __future__ import annotations

import pytest

from servebench.analysis.tuning import ConfigurationCapacity, pareto_front, tune_verdict
from servebench.campaign.loading import SpecError, parse_campaign
from servebench.config.sweep import configurations, expand, knob_label
from tests.support.tuning import TUNE


def _capacity(mode: str, capacity: float | None, upper: float | None, tpot: float | None = 10.0, probes: int = 6):
    return ConfigurationCapacity(mode=mode, capacity=capacity, upper=upper, probes=probes, tpot_p50_ms=tpot)


def test_the_best_is_set_against_the_default_with_the_range_its_brackets_allow():
    found = [_capacity("tp1", 4.0, 4.2), _capacity("tp1-mns8", 6.0, 6.3, tpot=12.0),
             _capacity("tp1-cpoff", 6.0, 6.2, tpot=9.0)]
    verdict = tune_verdict(found, "tp1")
    assert verdict.best_mode == "tp1-cpoff"  # the tie on capacity goes to the lower TPOT
    assert verdict.ratio == pytest.approx(1.5)
    assert verdict.ratio_low == pytest.approx(6.0 / 4.2) and verdict.ratio_high == pytest.approx(6.2 / 4.0)
    assert verdict.probes == 18 and verdict.pareto == ["tp1-cpoff"]


def test_the_default_measured_again_is_the_baseline_when_higher_and_its_drift_is_said():
    found = [_capacity("tp1", 4.0, 4.2), _capacity("tp1-mns8", 6.0, 6.3), _capacity("tp1-again", 5.0, 6.1)]
    verdict = tune_verdict(found, "tp1")
    assert (verdict.default_capacity, verdict.default_first, verdict.default_again) == (5.0, 4.0, 5.0)
    assert verdict.ratio == pytest.approx(1.2) and verdict.drift == pytest.approx(0.25)
    assert verdict.best_mode == "tp1-mns8" and "tp1-again" not in verdict.pareto
    assert "within what the probes' brackets cannot tell apart" in verdict.why and "+25%" in verdict.why


def test_a_default_that_met_nothing_or_a_winner_that_never_missed_are_said():
    assert tune_verdict([_capacity("a", None, 1.0), _capacity("b", 2.0, 2.1)], "a").ratio is None
    assert "no probed point" in tune_verdict([_capacity("a", None, 1.0), _capacity("b", 2.0, 2.1)], "a").why
    unbounded = tune_verdict([_capacity("a", 1.0, 1.1), _capacity("b", 8.0, None)], "a")
    assert unbounded.ratio == 8.0 and unbounded.ratio_high is None
    assert tune_verdict([_capacity("a", None, 1.0)], "a").best_mode is None


def test_the_pareto_front_keeps_what_no_other_beats_on_both_axes():
    found = [_capacity("fast", 2.0, 2.1, tpot=5.0), _capacity("big", 6.0, 6.2, tpot=20.0),
             _capacity("worse", 1.5, 1.6, tpot=8.0), _capacity("none", None, 1.0)]
    assert pareto_front(found) == ["big", "fast"]


def test_optuna_proposes_the_default_first_never_twice_and_finds_a_near_best_in_a_fraction():
    """A space of 72 configurations with a known capacity each: 16 trials proposed by Optuna's TPE
    (stateless, rebuilt from the trials so far) reach within 10 % of the best for every seed."""
    import itertools

    from servebench.analysis.tuning import propose_configuration

    axes = {"mode": ["tp1", "pp2"], "a": [None, 4, 8, 16], "b": [None, True, False], "c": [None, 1, 2]}
    space = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]

    def capacity(p):
        return (10 + (5 if p["mode"] == "pp2" else 0) + {None: 0, 4: 1, 8: 3, 16: 2}[p["a"]]
                + {None: 0, True: 4, False: -2}[p["b"]] + {None: 0, 1: 1, 2: -1}[p["c"]])

    best = max(capacity(p) for p in space)
    for seed in range(3):
        tried = []
        while len(tried) < 16:
            point = propose_configuration(space, tried, seed)
            assert point not in [p for p, _ in tried] and (tried or point == space[0])
            assert propose_configuration(space, tried, seed) == point  # the same trials, the same proposal
            tried.append((point, capacity(point)))
        assert max(value for _, value in tried) >= 0.9 * best, (seed, sorted(v for _, v in tried))
    assert propose_configuration(space[:2], [(space[0], 1.0), (space[1], 2.0)], 0) is None


def test_the_best_known_configuration_is_chosen_per_cluster_model_and_slo():
    from servebench.analysis.best import best_per_cluster

    def row(fp, mode, capacity, slo='{"ttft_p99_ms": 500}', run="r1", at="2026-11-01"):
        return dict(hardware_fingerprint=fp, model_path="/m/tiny", search_over="rate", slo=slo, mode=mode,
                    capacity=capacity, run_id=run, started_at=at)

    best = best_per_cluster([row("a", "tp1", 4.0), row("a", "tp1-mns8", 6.0, run="r2"),
                             row("a", "tp1-mns8", 6.0, run="r3", at="2026-11-02"), row("b", "tp1", 9.0),
                             row("a", "tp1", 2.0, slo='{"ttft_p99_ms": 100}')])
    assert [(r["hardware_fingerprint"], r["mode"], r["run_id"], r["candidates"]) for r in best] == [
        ("a", "tp1", "r1", 1), ("a", "tp1-mns8", "r3", 3), ("b", "tp1", "r1", 1)]


def test_the_server_command_is_printed_as_it_can_be_pasted():
    from servebench.analysis.capacity_report import server_command

    row = {"command": ["python", "-m", "vllm", "--max-num-seqs", "8"], "env": '{"B": "x y", "A": "1"}'}
    assert server_command(row) == "A=1 B='x y' python -m vllm --max-num-seqs 8"
    assert server_command({"command": None}) == "-"


CAMPAIGN = """
name: knobs
provider: {kind: local, nodes: [{name: n0, cpus: "0"}]}
engine: {kind: vllm}
model: {generate: tiny-llama}
modes: [{name: tp1}, {name: tp2, tp: 2, oversubscribe: true, knobs: {kv_cache_gib: 2}}]
knobs:
  max_num_seqs: [null, 8]
  chunked_prefill: [true, false]
load: {clients: [1], requests: 4, client: {cpus: "1"}}
"""


def test_knob_axes_multiply_the_modes_and_name_each_configuration_by_its_values():
    campaign = parse_campaign(CAMPAIGN, host_cpus={0, 1})
    names = [mode.name for mode in configurations(campaign)]
    assert names == ["tp1-cpon", "tp1-cpoff", "tp1-mns8-cpon", "tp1-mns8-cpoff",
                     "tp2-cpon", "tp2-cpoff", "tp2-mns8-cpon", "tp2-mns8-cpoff"]
    last = configurations(campaign)[-1]
    assert last.knobs == {"kv_cache_gib": 2, "max_num_seqs": 8, "chunked_prefill": False}
    assert [cell.key for cell in expand(campaign)][:2] == ["tp1-cpon.c1.r0", "tp1-cpoff.c1.r0"]
    assert (knob_label("spill_ratio", 0.5), knob_label("omp_threads", 2)) == ("sr0p5", "ot2")


def test_the_knobs_reach_the_server_command_and_environment():
    from servebench.engines.vllm.knobs import cut_binding, knob_args, knob_env

    assert knob_args({"max_num_seqs": 8, "chunked_prefill": False, "max_num_batched_tokens": None,
                      "enforce_eager": True}) == [
        "--max-num-seqs", "8", "--no-enable-chunked-prefill", "--enforce-eager"]
    assert knob_env({"kv_cache_gib": 2}) == {"VLLM_CPU_KVCACHE_SPACE": "2"} and knob_env({}) == {}
    assert cut_binding("0-3|4-7", 2) == "0-1|4-5" and cut_binding("0-3", None) == "0-3"
    assert cut_binding("0-3|4-7", 2, "nobind") == "nobind" and cut_binding("0-3", None, "explicit") == "0-3"


def test_the_reference_is_served_with_the_arithmetic_knobs_every_judged_mode_shares():
    """Eager PyTorch and compiled graphs round differently: modes that all run eager are judged
    against an eager TP=1 reference; a knob that only changes speed never reaches it."""
    from servebench.config.campaign import ModeSpec
    from servebench.config.sweep import reference_knobs
    from servebench.engines.vllm.knobs import KNOBS

    numerics = {name for name, knob in KNOBS.items() if knob.numerics}
    assert numerics == {"enforce_eager"}
    eager_tp2 = ModeSpec(name="tp2", tp=2, executor="mp", knobs={"enforce_eager": True, "max_num_seqs": 8})
    eager_pp2 = ModeSpec(name="pp2", pp=2, executor="mp", knobs={"enforce_eager": True})
    assert reference_knobs(numerics, [eager_tp2, eager_pp2]) == {"enforce_eager": True}
    assert reference_knobs(numerics, [eager_tp2, ModeSpec(name="pp2", pp=2, executor="mp")]) == {}
    assert reference_knobs(numerics, [ModeSpec(name="tp2", tp=2, executor="mp", knobs={"max_num_seqs": 8})]) == {}
    assert reference_knobs(numerics, []) == {}


@pytest.mark.parametrize("change, field, message", [
    ("  chunked_prefill: [true, false]\n  bogus: [1]", "knobs.bogus", "has no knob 'bogus'"),
    ("  chunked_prefill: [true, 3]", "knobs.chunked_prefill[1]", "takes a bool"),
    ("  chunked_prefill: [true, true]", "knobs", "knob 'chunked_prefill': values repeat"),
    ("  chunked_prefill: [true, false]\n  kv_cache_gib: [1, 2]", "modes[1].knobs.kv_cache_gib", "give it in one place"),
])
def test_a_knob_the_engine_does_not_take_is_named_with_its_line(change, field, message):
    with pytest.raises(SpecError) as caught:
        parse_campaign(CAMPAIGN.replace("  chunked_prefill: [true, false]", change), source="k.yaml", host_cpus={0, 1})
    text = str(caught.value)
    assert "k.yaml:" in text and field in text and message in text, text


def test_a_tune_search_needs_two_configurations_and_leaves_old_campaigns_hashes_alone():
    one = CAMPAIGN.replace("knobs:\n  max_num_seqs: [null, 8]\n  chunked_prefill: [true, false]\n", "").replace(
        "{name: tp1}, {name: tp2, tp: 2, oversubscribe: true, knobs: {kv_cache_gib: 2}}", "{name: tp1}")
    with pytest.raises(SpecError, match="compares configurations"):
        parse_campaign(one + "slo: {ttft_p99_ms: 500}\nsearch: {kind: tune}\n", host_cpus={0, 1})
    with pytest.raises(SpecError, match="needs 'trials'"):
        parse_campaign(CAMPAIGN + "slo: {ttft_p99_ms: 500}\nsearch: {kind: tune, strategy: optuna}\n", host_cpus={0, 1})
    normalized = parse_campaign(one, host_cpus={0, 1}).normalized()
    assert "knobs" not in normalized and "knobs" not in normalized["modes"][0]


def test_capacity_is_a_nightly_series_whose_drop_the_detector_confirms(tmp_path):
    """Fourteen nights of a tuning campaign's capacity (one value a night): ten at ~10 req/s, then
    four at ~7. The capacities get a series of their own (probes get none), and the fourth low
    night confirms a regression of metric 'capacity' starting at the first low one."""
    import random

    from servebench import warehouse
    from servebench.analysis.regression.history import analyze_run
    from servebench.config.detection import DetectionSettings
    from servebench.config.sweep import search_cell
    from servebench.warehouse import landing
    from tests.support.synthetic_runs import NODE

    text = TUNE.replace("kind: echo, token_delay_ms: 1", "kind: vllm").replace(
        "{kind: plain, nodes: [{name: a, cpus: \"0\"}]}", "{kind: local, nodes: [{name: a, cpus: \"0\"}]}")
    campaign = parse_campaign(text.replace("model: {path: model}", "model: {generate: tiny-llama}").replace(
        "knobs: {prefill_ms: [100, 50, 400]}", "knobs: {max_num_seqs: [null, 8]}"), host_cpus={0, 1})
    mode = configurations(campaign)[0]
    rng = random.Random(0)
    con = warehouse.connect(tmp_path / "w.duckdb")
    for night in range(14):
        run_id = f"n{night:02d}"
        landing.insert_run(con, run_id, landing.RunRecord(
            campaign="tune", spec_hash=campaign.spec_hash(), spec_text=text, spec_normalized=campaign.normalized(),
            campaign_file="tune.yaml", run_dir=tmp_path))
        con.execute("update runs set started_at = started_at + ?::INTERVAL where run_id = ?", [f"{night} days", run_id])
        landing.land_node(con, run_id, "a", "127.0.0.1", NODE)
        capacity = (10.0 if night < 10 else 7.0) * rng.uniform(0.97, 1.03)
        probe = search_cell(campaign, mode, capacity)
        summary = {"completed": 20, "failed": 0, "output_throughput": 50.0, "tpot_ms": {"p50": 12.0}, "valid": True}
        for cell, search in ((expand(campaign)[0], False), (probe, True)):
            landing.land_cell(con, run_id, landing.CellRecord(cell=cell, input_len=4, output_len=4, status="completed",
                              search_probe=search, measured=landing.CellMeasurement(result={"summary": summary})))
        con.execute("insert into capacity (run_id, mode, search_over, slo, capacity, upper, probes, converged, knobs) "
                    "values (?, ?, 'rate', '{\"ttft_p99_ms\": 400.0}', ?, ?, 6, true, NULL)",
                    [run_id, mode.name, capacity, capacity * 1.1])
        analyze_run(con, run_id, DetectionSettings())
    series = con.execute("select count(distinct series_id), count(*) from capacity").fetchone()
    probes = con.execute("select count(*) from cells where search_probe and series_id is not null").fetchone()[0]
    found = con.execute("select run_id, kind, status, first_bad_run from regressions where metric = 'capacity' "
                        "and kind <> 'noisy' order by run_id").fetchall()
    con.close()
    assert series == (1, 14) and probes == 0
    assert found[-1] == ("n13", "regression", "confirmed", "n10"), found
