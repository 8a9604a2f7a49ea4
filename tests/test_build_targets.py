"""Target CPU profiles, the cmake recipe's key and commands, and the preflight that refuses a build
on a CPU lacking its features: the features of an emulated node are measured with real qemu-user
and the real cross compiler (Debian's qemu-user-static and gcc-aarch64-linux-gnu, README command 2)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from servebench.builds.cmake import FetchedSource, cmake_inputs, cmake_key, cmake_steps, compiler_cache_env, file_sha256
from servebench.builds.recipe import CMakeRecipe
from servebench.engines import get_engine
from servebench.engines.llamacpp.spec import LlamaCppEngineSpec
from servebench.paths import cache_dir
from servebench.platform.cpu_features import build_refusal, cpuinfo_features, decode_hwcaps, emulated_features
from servebench.platform.targets import PROFILES, emulator_argv, profile
from servebench.providers import Node
from servebench.serving.server import describe_exit, node_argv
from tests.support.waiting import wait_until

CROSS_TOOLS = ("aarch64-linux-gnu-gcc", "qemu-aarch64-static")
MISSING = [tool for tool in CROSS_TOOLS if shutil.which(tool) is None]
needs_cross = pytest.mark.skipif(bool(MISSING), reason=f"{', '.join(MISSING)} missing: apt-get install "
                                 "gcc-aarch64-linux-gnu qemu-user-static (README command 2 installs them)")


def test_profiles_cover_the_named_targets_and_say_what_they_need():
    assert set(PROFILES) >= {"graviton2", "graviton3", "graviton4", "ampere-altra", "armv8-a", "x86-64-v3",
                             "x86-64-v4", "native"}
    graviton3 = profile("graviton3")
    assert graviton3.arch == "aarch64" and {"sve", "i8mm", "bf16", "asimddp"} <= set(graviton3.features)
    assert "-DGGML_CPU_ARM_ARCH=armv8.4-a+sve+i8mm+bf16+dotprod+fp16+rcpc" in graviton3.cmake_args
    assert "sve" not in profile("graviton2").features and profile("graviton2").emulator_cpu == "neoverse-n1"
    assert "-DGGML_AVX512=ON" in profile("x86-64-v4").cmake_args and "avx512f" in profile("x86-64-v4").features
    assert emulator_argv(profile("graviton2")) == ["qemu-aarch64-static", "-cpu", "neoverse-n1", "-L",
                                                    "/usr/aarch64-linux-gnu"]
    with pytest.raises(ValueError, match="unknown target 'm1'; the profiles are: armv8-a"):
        profile("m1")


def test_hwcap_bits_and_cpuinfo_lines_give_linux_feature_names():
    assert decode_hwcaps(0b11 | 1 << 20 | 1 << 22, 1 << 13 | 1 << 14) == {"fp", "asimd", "asimddp", "sve", "i8mm",
                                                                          "bf16"}
    assert cpuinfo_features("processor : 0\nFeatures\t: fp asimd sve\n") == {"fp", "asimd", "sve"}


def test_refusal_names_the_missing_features_or_the_architecture():
    inputs = {"target": "graviton3", "arch": "aarch64", "features": list(profile("graviton3").features)}
    n1 = {"fp", "asimd", "atomics", "fphp", "asimdhp", "asimddp", "lrcpc"}
    assert build_refusal(inputs, "g2", "aarch64", n1, "qemu neoverse-n1") == (
        "refused before serving: the build for graviton3 needs CPU features sve, i8mm, bf16 that node g2 "
        "(qemu neoverse-n1) lacks")
    assert build_refusal(inputs, "g3", "aarch64", n1 | {"sve", "i8mm", "bf16"}, "max") is None
    assert "is for x86_64; node g2 is aarch64" in build_refusal({"platform": "linux-x86_64"}, "g2", "aarch64", n1, "x")


@pytest.mark.arm
@needs_cross
def test_an_emulated_cpu_models_features_are_measured_under_qemu():
    n1 = emulated_features(profile("graviton2"), cache_dir())
    assert {"asimddp", "fphp", "lrcpc"} <= n1 and not {"sve", "i8mm", "bf16"} & n1
    assert {"sve", "i8mm", "bf16"} <= emulated_features(profile("graviton3"), cache_dir())
    assert "asimddp" not in emulated_features(profile("armv8-a"), cache_dir())


def test_an_emulated_nodes_processes_run_under_qemu_with_its_cpu_model():
    assert node_argv(Node(name="g3", address="127.0.1.2", cpus=[0], emulate="graviton3"), ["/b/llama-server"]) == \
        ["qemu-aarch64-static", "-cpu", "max,sve-max-vq=2", "-L", "/usr/aarch64-linux-gnu", "/b/llama-server"]
    assert node_argv(Node(name="x", address="127.0.1.1", cpus=[0]), ["/b/llama-server"]) == ["/b/llama-server"]
    assert describe_exit(-4).startswith("-4 (SIGILL: an instruction this node's CPU lacks")
    assert describe_exit(132).startswith("132 (SIGILL") and describe_exit(-9) == "-9 (SIGKILL)"


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


def _tarball(path: Path, top: str, files: dict[str, str]) -> Path:
    import io
    import tarfile
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_an_sdist_and_a_git_commit_unpack_their_project_at_the_same_path(tmp_path: Path):
    """ccache finds a file compiled from the sdist again for a commit of the same files only when its
    path relative to the scratch directory is the same: `src/...` for both."""
    from servebench.builds.cmake import BuildError, unpack_project
    from servebench.builds.recipe import GitSource

    sdist = _tarball(tmp_path / "pkg-1.0.tar.gz", "pkg-1.0", {"vendor/proj/CMakeLists.txt": "project(p)",
                                                              "vendor/proj/a.c": "int a;", "setup.py": ""})
    recipe = CMakeRecipe(engine="e", source="pkg==1.0", source_subdir="vendor/proj", target="native",
                         build_targets=["p"])
    project = unpack_project(recipe, sdist, tmp_path / "one")
    assert project == tmp_path / "one" / "src" and (project / "a.c").read_text() == "int a;"
    commit = _tarball(tmp_path / "c.tar", "src", {"CMakeLists.txt": "project(p)", "a.c": "int a;"})
    from_git = CMakeRecipe(engine="e", git=GitSource(repo="/r", commit="abc"), target="native", build_targets=["p"])
    assert unpack_project(from_git, commit, tmp_path / "two") == tmp_path / "two" / "src"
    with pytest.raises(BuildError, match="pkg-1.0.tar.gz: no CMakeLists.txt in vendor/other"):
        unpack_project(recipe.model_copy(update={"source_subdir": "vendor/other"}), sdist, tmp_path / "three")


def test_cmake_builds_of_a_cache_share_one_scratch_path_one_at_a_time(tmp_path: Path):
    """The same path each time (ccache finds unity-build files, which hold absolute paths), emptied
    before and removed after; a second builder waits for the first and says so."""
    import subprocess
    import sys

    from servebench.builds.cmake import build_scratch

    with build_scratch(tmp_path, print) as first:
        (first / "left-over").write_text("x")
    assert not first.exists()
    waiter_code = ("import sys; from pathlib import Path; from servebench.builds.cmake import build_scratch\n"
                   "say = lambda line: print(line, flush=True)\n"
                   "with build_scratch(Path(sys.argv[1]), say) as s: say(f'got {s}')")
    said = tmp_path / "waiter.log"
    with build_scratch(tmp_path, print) as second:
        assert second == first and not any(second.iterdir())
        with open(said, "w") as out:
            waiter = subprocess.Popen([sys.executable, "-c", waiter_code, str(tmp_path)], stdout=out)

        def waiting() -> bool:
            assert waiter.poll() is None, said.read_text()   # still waiting for this build
            return "waiting for another cmake build" in said.read_text()
        wait_until(waiting, "the second builder to say it waits", timeout_s=60)
    assert waiter.wait(timeout=60) == 0
    assert f"got {first}" in said.read_text() and not first.exists()
