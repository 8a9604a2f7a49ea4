"""Target CPU profiles, the cmake recipe's key and commands, and the preflight that refuses a build on a CPU
lacking its features: the features of an emulated node are measured with real qemu-user and the real cross
compiler (Debian's qemu-user-static and gcc-aarch64-linux-gnu, README command 2).

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_build_targets.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servebench.builds.cmake import FetchedSource, cmake_inputs, cmake_key, cmake_steps, compiler_cache_env, file_sha256
from servebench.builds.recipe import CMakeRecipe
from servebench.engines import get_engine
from servebench.engines.llamacpp.spec import LlamaCppEngineSpec
from servebench.paths import cache_dir
from servebench.platform.cpu_features import emulated_features
from servebench.platform.targets import profile

CROSS_TOOLS = ("aarch64-linux-gnu-gcc", "qemu-aarch64-static")


MISSING = [tool for tool in CROSS_TOOLS if shutil.which(tool) is None]


needs_cross = pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} missing: apt-get install "
                                 "gcc-aarch64-linux-gnu qemu-user-static (README command 2 installs them)")


@pytest.mark.arm
@needs_cross
def test_an_emulated_cpu_models_features_are_measured_under_qemu():
    n1 = emulated_features(profile("graviton2"), cache_dir())
    assert {"asimddp", "fphp", "lrcpc"} <= n1 and not {"sve", "i8mm", "bf16"} & n1
    assert {"sve", "i8mm", "bf16"} <= emulated_features(profile("graviton3"), cache_dir())
    assert "asimddp" not in emulated_features(profile("armv8-a"), cache_dir())


def sdist_source(path: Path) -> FetchedSource:
    """A stand-in sdist as the builder's fetch step would give it (its sha256 read now)."""
    return FetchedSource(path, "source_sha256", file_sha256(path), "llama-cpp-python==0.3.36", "0.3.36")


@pytest.mark.arm
@needs_cross
def test_a_target_build_is_keyed_by_source_compiler_flags_and_options(tmp_path: Path):
    engine = get_engine("llamacpp")
    recipe = engine.build_recipe(LlamaCppEngineSpec(target="graviton2"))
    assert isinstance(recipe, CMakeRecipe) and recipe.source_subdir == "vendor/llama.cpp"
    sdist = tmp_path / "llama_cpp_python-0.3.36.tar.gz"
    sdist.write_bytes(b"a stand-in sdist: only its sha256 is read here")
    inputs = cmake_inputs(recipe, sdist_source(sdist))
    assert inputs["compiler"]["command"] == "aarch64-linux-gnu-g++" and inputs["compiler"]["id"] == "GNU"
    assert inputs["compiler"]["version"].count(".") == 2 and len(inputs["source_sha256"]) == 64
    assert inputs["arch"] == "aarch64" and inputs["compiler_flags"] == ["-march=armv8.2-a+dotprod+fp16+rcpc"]
    key = cmake_key(recipe, inputs)
    assert key.startswith("llamacpp-graviton2-")
    assert key == cmake_key(recipe, cmake_inputs(recipe, sdist_source(sdist)))
    flagged = engine.build_recipe(LlamaCppEngineSpec(target="graviton2", cmake_args=["-DGGML_OPENMP=OFF"]))
    assert cmake_key(flagged, cmake_inputs(flagged, sdist_source(sdist))) != key    # a changed flag: another build
    other = engine.build_recipe(LlamaCppEngineSpec(target="graviton3"))
    assert cmake_key(other, cmake_inputs(other, sdist_source(sdist))) != key
    sdist.write_bytes(b"another source")
    assert cmake_key(recipe, cmake_inputs(recipe, sdist_source(sdist))) != key     # another source digest
    steps = dict(cmake_steps(recipe, inputs, Path("/s"), Path("/b"), Path("/a"), 2))
    assert "-DCMAKE_SYSTEM_PROCESSOR=aarch64" in steps["configure"]
    assert "-DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++" in steps["configure"]
    assert "-DGGML_CPU_ARM_ARCH=armv8.2-a+dotprod+fp16+rcpc" in steps["configure"]
    assert steps["compile"][-2:] == ["llama-server", "ggml-rpc-server"]
    if shutil.which("ccache"):
        assert compiler_cache_env(tmp_path, "/s")["CCACHE_BASEDIR"] == "/s"
