"""Quantized Hugging Face models for vLLM's CPU kernels (servebench/models/hf_quantized.py): the packing, the
quantizers, every tensor's name, dtype and shape in each format, the values read back from the files within
half a quantization step of the unquantized model, and the generated model's cache key.

Here the nightly lane's (skipped by the test command, each with its reason); the test command's are in
tests/unit/test_hf_quantized.py."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from servebench.config.campaign import GeneratedModelSpec
from servebench.models.artifact import GENERATED_HF

SMOKE = Path(__file__).parents[2] / "campaigns" / "smoke.yaml"


# the kernel vLLM 0.32's CPU backend names in its log for each format (x86 without AMX)
KERNELS = {"w8a8": "CPUInt8ScaledMMLinearKernel", "w4a16": "CPUWNA16LinearKernel"}


@pytest.mark.vllm
@pytest.mark.nightly(reason=(
    "vLLM serving a w8a8 checkpoint; the test command keeps the quantized checkpoints as vLLM's loader "
    "reads them and their memory plans (this file)"))
@pytest.mark.parametrize("fmt", ["w8a8"])  # the format that pays on CPU; the int4 ones served by hand (quantization.md)
def test_vllm_serves_the_quantized_tiny_llama_through_its_cpu_kernel(tmp_path, fmt):
    """The smoke campaign's engine and tiny Llama, quantized: served, answered in full, and through the
    format's CPU kernel (its name in vLLM's log), every process and /dev/shm segment gone after."""
    from servebench.builds.builders import ensure
    from servebench.campaign.loading import load_campaign
    from servebench.engines import LaunchRequest, get_engine
    from servebench.paths import cache_dir
    from servebench.processes import shm_entries
    from servebench.providers import get_provider
    from servebench.serving.server import start_server, stop_server, wait_ready
    from tests.support.processes import engine_processes

    campaign = load_campaign(SMOKE)
    engine = get_engine(campaign.engine.kind)
    recipe = engine.build_recipe(campaign.engine)
    build = ensure(recipe, cache_dir(), log=lambda _: None)
    assert isinstance(campaign.model, GeneratedModelSpec)
    model = GENERATED_HF.ensure(campaign.model.model_copy(update={"quantization": fmt}), build.python, cache_dir())
    provider = get_provider(campaign)
    nodes = provider.allocate()[:1]
    launch = engine.launch(LaunchRequest(
        python=build.python, build_dir=build.venv_path, spec=campaign.engine, mode=campaign.modes[0],
        model_dir=str(model), served_name="tiny", dtype="bfloat16", nodes=nodes, ports=provider))
    shm_before = shm_entries()
    server = start_server(provider, nodes, launch, campaign.modes[0].name, tmp_path, 300)
    try:
        wait_ready(server, 300)
        body = {"model": "tiny", "prompt": "the cluster", "max_tokens": 16, "temperature": 0, "ignore_eos": True}
        request = urllib.request.Request(f"{server.url}/v1/completions", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as response:
            answer = json.load(response)
    finally:
        stop_server(provider, server)
        provider.release()
    assert answer["usage"]["completion_tokens"] == 16 and answer["choices"][0]["text"]
    logs = "".join(path.read_text(errors="replace") for path in tmp_path.rglob("*") if path.is_file())
    assert f"Using {KERNELS[fmt]}" in logs or KERNELS[fmt] in logs, logs[-3000:]
    assert engine_processes() == []
    assert shm_entries() - shm_before == set()
