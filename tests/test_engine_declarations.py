"""What an engine declares for the engine-neutral code (issue 33, item 2): where its stream counts
tokens, the model it generates and which it cannot serve, whether its block has a git source for the
commit axis; and every build recipe names a builder the build stage has."""

from __future__ import annotations

import pytest

from servebench.builds.builders import BUILDERS, builder_for
from servebench.builds.model import TINY_LLAMA_GGUF, TINY_LLAMA_HF
from servebench.builds.recipe import CMakeRecipe, GitSource, TargetPlatform, VenvRecipe, WheelRecipe
from servebench.spec.campaign import GeneratedModelSpec, GitSourceSpec
from servebench.engines import get_engine
from servebench.engines.base import Engine
from servebench.load.sse import OPENAI_TOKEN_COUNT
from tests.support.echo_engine import EchoEngine


def test_a_minimal_engine_inherits_the_openai_defaults():
    """The echo engine states none of the new members: it gets OpenAI's usage count, a Hugging Face
    model, no prefix-cache counters and no model it refuses."""
    echo = EchoEngine()
    assert Engine in type(echo).__mro__
    assert (echo.stream_token_counts, echo.default_model, echo.prefix_cache_metrics) == (
        OPENAI_TOKEN_COUNT, TINY_LLAMA_HF, None)
    assert echo.model_problem(GeneratedModelSpec(generate="tiny-llama", hidden=192, heads=4)) is None


def test_each_engine_declares_its_stream_count_and_its_model():
    vllm, llamacpp = get_engine("vllm"), get_engine("llamacpp")
    assert vllm.stream_token_counts == ("usage.completion_tokens",)
    assert llamacpp.stream_token_counts == ("usage.completion_tokens", "timings.predicted_n")
    assert (vllm.default_model, llamacpp.default_model) == (TINY_LLAMA_HF, TINY_LLAMA_GGUF)
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
