"""vLLM for ARM: a vLLM mode on an emulated aarch64 node.

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_arm_vllm.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servebench.builds import venv
from servebench.builds.recipe import TargetPlatform
from servebench.engines.vllm import VllmEngine
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.paths import cache_dir
from servebench.platform.emulation import guest_argv, node_root
from servebench.platform.targets import profile
from servebench.providers.local import LocalProvider
from servebench.providers.local.spec import LocalProviderSpec
from servebench.serving.preflight import ServerRefused, check_build_fits
from tests.support.arm import needs_arm64_packages, needs_cross


@pytest.mark.arm
@needs_cross
def test_the_preflight_refuses_the_x86_vllm_build_on_an_emulated_aarch64_node_before_serving():
    """Past the campaign check (a build whose record says x86): nothing is started, the
    architectures are named."""
    x86_build = venv.build_inputs(VllmEngine().build_recipe(VllmEngineSpec()))
    provider = LocalProvider(LocalProviderSpec(nodes=[{"name": "graviton2", "cpus": "0", "emulate": "graviton2"}]))
    node = provider.nodes()[0]
    with pytest.raises(ServerRefused) as refused:
        check_build_fits(x86_build, [node], provider, cache_dir())
    assert str(refused.value).startswith("refused before serving: the build")
    assert "is for x86_64; node graviton2 is aarch64 (emulated graviton2, qemu -cpu neoverse-n1)" in str(refused.value)


@pytest.mark.arm
@needs_cross
def test_an_emulated_nodes_root_gives_its_cpu_ids_and_a_wrapper_for_its_children(tmp_path: Path):
    """The MIDR a process of the qemu model reads (measured by the probe) is what the node's
    /proc/cpuinfo and sysfs say; the wrapper starts a child with the same CPU and root."""
    userland = tmp_path / "sysroots" / "debian-arm64-abc"
    (userland / "usr" / "bin").mkdir(parents=True)
    (userland / "usr" / "bin" / "python3.11").write_text("")
    for name, part in (("graviton2", "0xd0c"), ("a64fx", "0x001")):
        root = node_root(profile(name), userland, tmp_path)
        assert (root / "usr").resolve() == userland / "usr"
        assert f"CPU part\t: {part}\n" in (root / "proc" / "cpuinfo").read_text()
        midr = (root / "sys/devices/system/cpu/cpu0/regs/identification/midr_el1").read_text()
        assert midr == ("0x00000000414fd0c1\n" if name == "graviton2" else "0x00000000461f0010\n")
        wrapper = (root / ".servebench" / "emulated-python").read_text()
        assert f"-cpu {profile(name).emulator_cpu} -L {root} " in wrapper and os.access(
            root / ".servebench" / "emulated-python", os.X_OK)
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(userland / "usr" / "bin" / "python3.11")
    argv = guest_argv(profile("a64fx"), [str(tmp_path / "venv" / "bin" / "python"), "-V"], tmp_path)
    root = node_root(profile("a64fx"), userland, tmp_path)
    assert argv == ["qemu-aarch64-static", "-cpu", "a64fx", "-L", str(root),
                    "-E", f"SERVEBENCH_EMULATED_PYTHON={root / '.servebench' / 'emulated-python'}",
                    "-E", "TORCHDYNAMO_DISABLE=1", str(tmp_path / "venv" / "bin" / "python"), "-V"]


def write_wheel(directory: Path, name: str, version: str, requires: list[str], code: str) -> Path:
    """A pure-Python wheel (py3-none-any: it fits every platform tag) with its METADATA and one module."""
    import zipfile

    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {requirement}\n" for requirement in requires)
    files = {f"{name}.py": code, f"{info}/METADATA": metadata,
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{path},,\n" for path in [*files, f"{info}/RECORD"])
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


@pytest.mark.arm
@needs_cross
@needs_arm64_packages
def test_a_target_venv_is_resolved_for_aarch64_and_runs_under_qemu(tmp_path: Path, monkeypatch):
    """The target venv's whole build on a project of three small wheels from a local index: the
    main wheel's requirements with markers for aarch64 (an x86-only one left out, a pin replaced,
    a companion dropped), the target's CPython runs the post-install step, a second ensure finds it."""
    from servebench.builds.builders import ensure
    from servebench.builds.recipe import VenvRecipe

    index = tmp_path / "index"
    index.mkdir()
    write_wheel(index, "mainpkg", "1.0", ['dep==2.0+cpu; platform_machine == "aarch64"',
                                          'x86only; platform_machine == "x86_64"', "broken"],
                "import dep\nANSWER = dep.VALUE * 7\n")
    write_wheel(index, "dep", "2.0", [], "VALUE = 6\n")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    check = ["-c", "import mainpkg, platform, sys; assert platform.machine() == 'aarch64'; "
                   "open(sys.prefix + '/answer', 'w').write(str(mainpkg.ANSWER))"]
    recipe = VenvRecipe(engine="tiny", packages=["mainpkg==1.0"], remove=["broken"], post_install=[check],
                        version_distribution="mainpkg", engine_package=False,
                        platform=TargetPlatform(arch="aarch64", requirements_from="mainpkg==1.0",
                                                pins={"dep": "dep==2.0"}, lazy_binding=True))
    cache = tmp_path / "cache"
    build = ensure(recipe, cache)
    assert build.platform == "linux-aarch64" and build.engine_version == "1.0" and build.build_seconds is not None
    assert build.inputs["target"] == "any" and build.inputs["arch"] == "aarch64"
    assert (Path(build.venv_path) / "answer").read_text() == "42"          # ran as aarch64, dep installed
    assert "dep==2.0" in build.pip_freeze and "x86only" not in build.pip_freeze
    assert ensure(recipe, cache).build_seconds is None                       # found by key
