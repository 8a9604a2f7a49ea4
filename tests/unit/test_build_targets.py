"""Target CPU profiles, the cmake recipe's key and commands, and the preflight that refuses a build
on a CPU lacking its features: the features of an emulated node are measured with real qemu-user
and the real cross compiler (Debian's qemu-user-static and gcc-aarch64-linux-gnu, README command 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from servebench.builds.recipe import CMakeRecipe
from servebench.platform.cpu_features import build_refusal, cpuinfo_features, decode_hwcaps
from servebench.platform.targets import PROFILES, emulator_argv, profile
from servebench.providers import Node
from servebench.serving.server import describe_exit, node_argv
from tests.support.waiting import wait_until


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


def test_an_emulated_nodes_processes_run_under_qemu_with_its_cpu_model():
    assert node_argv(Node(name="g3", address="127.0.1.2", cpus=[0], emulate="graviton3"), ["/b/llama-server"]) == \
        ["qemu-aarch64-static", "-cpu", "max,sve-max-vq=2", "-L", "/usr/aarch64-linux-gnu", "/b/llama-server"]
    assert node_argv(Node(name="x", address="127.0.1.1", cpus=[0]), ["/b/llama-server"]) == ["/b/llama-server"]
    assert describe_exit(-4).startswith("-4 (SIGILL: an instruction this node's CPU lacks")
    assert describe_exit(132).startswith("132 (SIGILL") and describe_exit(-9) == "-9 (SIGKILL)"


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
