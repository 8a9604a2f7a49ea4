"""`model_axes`: the model's dtype and GGUF quantization as sweep axes (validation, feasibility, plan,
the deployment a mode's variant is started from)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servebench.campaign.loading import SpecError, load_campaign, parse_campaign
from servebench.cli import plan as plan_cli
from servebench.config.sweep import configurations
from servebench.orchestration.context import EngineRun, variant_key
from servebench.planning.plan import make_plan
from servebench.serving.deployment import Deployment

ROOT = Path(__file__).parents[2]
HOST_CPUS = {0, 1}


def campaign_text(engine: str, model: str, axes: str, modes: str = "[{name: tp1}]") -> str:
    return f"""
name: axes
provider: {{kind: local, nodes: [{{name: n0, cpus: "0"}}]}}
engine: {{kind: {engine}}}
model: {model}
model_axes: {axes}
modes: {modes}
load: {{clients: [1], input_len: 16, output_len: 16, requests: 2, client: {{cpus: "1"}}}}
"""


def problems(text: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse_campaign(text, host_cpus=HOST_CPUS)
    return str(caught.value)


def test_a_quantization_axis_needs_an_engine_that_serves_gguf():
    assert "serves the generated model as hf, not gguf" in problems(
        campaign_text("vllm", "{generate: tiny-llama}", "{quantization: [f32, q4_0]}"))
    parse_campaign(campaign_text("llamacpp", "{generate: tiny-llama}", "{quantization: [f32, q4_0]}"),
                   host_cpus=HOST_CPUS)


def test_a_dtype_llama_cpp_has_no_gguf_type_for_is_refused_and_vllm_takes_both():
    assert "none of them bfloat16" in problems(
        campaign_text("llamacpp", "{generate: tiny-llama}", "{dtype: [float32, bfloat16]}"))
    campaign = parse_campaign(campaign_text("vllm", "{generate: tiny-llama}", "{dtype: [float32, bfloat16]}"),
                              host_cpus=HOST_CPUS)
    assert [m.name for m in configurations(campaign)] == ["tp1-fp32", "tp1-bf16"]


@pytest.mark.parametrize("model, axes, message", [
    ("{generate: tiny-llama, quantization: q8_0}", "{quantization: [f32]}", "set and swept"),
    ("{generate: tiny-llama}", "{quantization: [f32, f32]}", "values repeat"),
    ("{generate: tiny-llama}", "{}", "give 'dtype' or 'quantization'"),
    ("{path: /no/model.gguf}", "{quantization: [f32]}", "a GGUF type of a generated model"),
])
def test_model_axes_are_validated(model, axes, message):
    assert message in problems(campaign_text("llamacpp", model, axes))


def test_plan_shows_each_configurations_variant_and_its_own_model(tmp_path):
    text = (ROOT / "campaigns" / "gguf-quantizations.yaml").read_text()
    (tmp_path / "c.yaml").write_text(text)
    campaign = load_campaign(tmp_path / "c.yaml", host_cpus=HOST_CPUS)
    shown = plan_cli.describe_plan(make_plan(campaign, HOST_CPUS), tmp_path / "c.yaml")
    assert "(model variants: f32, f16, q8_0, q4_0)" in shown
    assert "mode local-q4_0 (tp=1 pp=1 executor=local model q4_0 (GGUF q4_0))" in shown
    models = {line.split(" -m ")[1].split()[0] for line in shown.splitlines() if " -m " in line}
    assert len(models) == 4  # one file per variant
    weights = [line.split("weights ")[1].split()[0] for line in shown.splitlines() if "node0 (server): weights" in line]
    assert weights == ["0.71", "0.36", "0.19", "0.10"]  # each variant's own file: f32, f16, q8_0, q4_0


def test_a_mode_is_started_from_its_variants_deployment_and_gated_per_variant():
    campaign = parse_campaign(campaign_text("llamacpp", "{generate: tiny-llama}", "{quantization: [f32, q4_0]}"),
                              host_cpus=HOST_CPUS)
    f32, q4 = configurations(campaign)
    base = Deployment(campaign=campaign, engine=None, spec=campaign.engine, provider=None, nodes=[],  # type: ignore[arg-type]
                      build=None, model_dir="/m/f32.gguf", served_name="tiny-llama", run_dir="/r",  # type: ignore[arg-type]
                      variant=f32.model)
    other = Deployment(**{**base.__dict__, "model_dir": "/m/q4_0.gguf", "variant": q4.model})
    run = EngineRun(engine=None, spec=campaign.engine, reference_name="reference-tp1",  # type: ignore[arg-type]
                    deployment=base, variants=[other])
    assert run.deployment_for(f32) is base and run.deployment_for(q4) is other
    assert variant_key(f32) != variant_key(q4) and variant_key(campaign.modes[0]) == ""


def test_the_reference_server_runs_once_per_model_variant_when_no_mode_of_it_gives_one(monkeypatch):
    from servebench.engines import get_engine
    from servebench.orchestration import run as run_module
    from servebench.orchestration.context import RunContext

    text = campaign_text("llamacpp", "{generate: tiny-llama}", "{quantization: [f32, q4_0]}",
                         "[{name: rpc2, executor: rpc, pp: 2, oversubscribe: true}]")
    campaign = parse_campaign(text, host_cpus=HOST_CPUS)
    plan = make_plan(campaign, HOST_CPUS)
    engines = {"llamacpp": EngineRun(engine=get_engine("llamacpp"), spec=campaign.engine,
                                     reference_name="reference-tp1")}
    ctx = RunContext(plan=plan, engines=engines, provider=None, warehouse="", run_id="r",  # type: ignore[arg-type]
                     run_dir=ROOT, campaign_dir=ROOT)
    references, served = [], []
    monkeypatch.setattr(run_module, "reference_answers",
                        lambda ctx, run, modes: references.append([m.name for m in modes]))
    monkeypatch.setattr(run_module, "run_mode", lambda ctx, mode, cells: served.append(mode.name))
    run_module.measure(ctx, plan.cells)
    assert references == [["rpc2-f32"], ["rpc2-q4_0"]]
    assert served == ["rpc2-f32", "rpc2-q4_0"]
