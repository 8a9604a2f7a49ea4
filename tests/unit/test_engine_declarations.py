"""What an engine declares for the engine-neutral code: where its stream counts
tokens, the model it generates and which it cannot serve, whether its block has a git source for the
commit axis; every build recipe names a builder the build stage has; and the registry refuses an engine
class that breaks the contract (a method left abstract, a declaration missing, a column telemetry
does not have, a kind already taken)."""

from __future__ import annotations

import pytest

import servebench.engines
from servebench.builds.builders import BUILDERS, builder_for
from servebench.builds.recipe import CMakeRecipe, GitSource, TargetPlatform, VenvRecipe, WheelRecipe
from servebench.config.campaign import GeneratedModelSpec, GitSourceSpec
from servebench.engines import EngineRegistrationError, engine_kinds, get_engine, register_engine
from servebench.engines.base import Engine, EngineAPI, contract_problems
from servebench.load.sse import OPENAI_TOKEN_COUNT
from servebench.models.artifact import GENERATED_GGUF, GENERATED_HF
from tests.support.echo_engine import EchoEngine


def test_a_minimal_engine_inherits_the_openai_defaults():
    """The echo engine states none of the new members: it gets OpenAI's usage count, a Hugging Face
    model, no prefix-cache counters and no model it refuses."""
    echo = EchoEngine()
    assert Engine in type(echo).__mro__
    assert (echo.api.stream_token_counts, echo.default_model, echo.api.prefix_cache_metrics) == (
        OPENAI_TOKEN_COUNT, GENERATED_HF, None)
    assert echo.model_problem(GeneratedModelSpec(generate="tiny-llama", hidden=192, heads=4)) is None


def test_each_engine_declares_its_stream_count_and_its_model():
    vllm, llamacpp = get_engine("vllm"), get_engine("llamacpp")
    assert vllm.api.stream_token_counts == ("usage.completion_tokens",)
    assert llamacpp.api.stream_token_counts == ("usage.completion_tokens", "timings.predicted_n")
    assert (vllm.default_model, llamacpp.default_model) == (GENERATED_HF, GENERATED_GGUF)
    assert all(engine.default_model.format == engine.model_formats[0] for engine in (vllm, llamacpp))


def test_only_vllm_refuses_a_head_dim_its_cpu_kernels_do_not_take():
    odd = GeneratedModelSpec(generate="tiny-llama", hidden=192, heads=4)  # head_dim 48
    assert "CPU attention kernels" in get_engine("vllm").model_problem(odd)
    assert get_engine("llamacpp").model_problem(odd) is None
    assert get_engine("vllm").model_problem(GeneratedModelSpec(generate="tiny-llama")) is None


def test_the_commit_axis_comes_from_the_declared_git_source():
    llamacpp, vllm = get_engine("llamacpp").spec_model, get_engine("vllm").spec_model
    spec = llamacpp(kind="llamacpp", source=GitSourceSpec(git="/src/llama.cpp", commits=["a1", "b2"]))
    assert spec.git_source().axis == ["a1", "b2"]
    assert spec.at_commit("b2") == {"source": {"git": "/src/llama.cpp", "commit": "b2"}}
    assert llamacpp(kind="llamacpp").git_source() is None
    assert vllm(kind="vllm").git_source() is None  # its `source` is an sdist build: no commit axis
    with pytest.raises(ValueError, match="no git source"):
        vllm(kind="vllm").at_commit("b2")


@pytest.mark.parametrize("recipe, builder", [
    (VenvRecipe(engine="e"), "venv"),
    (VenvRecipe(engine="e", wheel=WheelRecipe(engine="e", sdist="x==1")), "wheel-venv"),
    (VenvRecipe(engine="e", platform=TargetPlatform(arch="aarch64", requirements_from="x==1")), "target-venv"),
    (CMakeRecipe(engine="e", git=GitSource(repo="/r", commit="c"), target="native", build_targets=["t"]), "cmake"),
])
def test_every_recipe_names_a_builder_the_stage_has(recipe, builder):
    assert recipe.builder == builder and builder_for(recipe) is BUILDERS[builder]


class NoGateEngine(EchoEngine):
    """An engine that forgot how its gate answers are read."""

    kind = "no-gate"
    gate_choice = Engine.gate_choice  # abstract again


class NoApiEngine(EchoEngine):
    kind = "no-api"
    api = None


class OddColumnEngine(EchoEngine):
    kind = "odd-column"
    api = EngineAPI(metrics={"odd_tokens_total": "tokens_out"}, kv_failure_pattern="no room (")


class SecondEchoEngine(EchoEngine):
    """Another class under the echo engine's kind."""


def test_every_registered_engine_keeps_the_contract():
    for kind in engine_kinds():
        assert contract_problems(type(get_engine(kind))) == [], kind
    assert contract_problems(EchoEngine) == []


def test_an_engine_with_a_method_left_abstract_is_refused_by_name():
    with pytest.raises(EngineRegistrationError, match=r"NoGateEngine: abstract methods not given: gate_choice"):
        register_engine(NoGateEngine)
    with pytest.raises(TypeError, match="abstract"):
        NoGateEngine()  # nor can it be made by hand


def test_an_engine_without_its_declarations_is_refused():
    missing = type("Bare", (Engine,), {name: getattr(EchoEngine, name) for name in Engine.__abstractmethods__})
    with pytest.raises(EngineRegistrationError, match=r"Bare: kind is not declared; spec_model is not declared; "
                                                      r"executors is not declared; api is not declared"):
        register_engine(missing)
    with pytest.raises(EngineRegistrationError, match=r"NoApiEngine: api is not declared"):
        register_engine(NoApiEngine)
    with pytest.raises(EngineRegistrationError, match="does not subclass"):
        register_engine(type("Duck", (), {"kind": "duck"}))


def test_an_api_with_a_column_telemetry_lacks_or_no_regex_is_refused():
    with pytest.raises(EngineRegistrationError, match=r"OddColumnEngine: metric 'odd_tokens_total' fills "
                                                      r"'tokens_out', not one of METRIC_COLUMNS.*is no regex"):
        register_engine(OddColumnEngine)


def test_a_second_class_for_a_kind_is_refused(monkeypatch):
    monkeypatch.setitem(servebench.engines._ENGINES, EchoEngine.kind, EchoEngine)
    assert register_engine(EchoEngine) is EchoEngine  # the same class again: nothing to refuse
    with pytest.raises(EngineRegistrationError, match=r"SecondEchoEngine: kind 'echo' is already "
                                                      r"tests.support.echo_engine.EchoEngine's"):
        register_engine(SecondEchoEngine)
    assert "no-gate" not in engine_kinds() and "odd-column" not in engine_kinds()


def test_an_engines_api_is_read_only():
    """One EngineAPI serves every instance for the whole process: a run cannot change the next one's."""
    with pytest.raises(TypeError):
        get_engine("vllm").api.request_extras["ignore_eos"] = False
    with pytest.raises(AttributeError):
        get_engine("vllm").api.state_sampler = "x:y"
