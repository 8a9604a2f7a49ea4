"""vLLM for ARM: a vLLM mode on an emulated aarch64 node.

Here the nightly lane's (skipped by the test command, each with its reason); the test command's are in
tests/unit/test_arm_vllm.py."""

from __future__ import annotations

import pytest

from servebench.paths import CHECKOUT
from servebench.platform.targets import profile
from tests.support.arm import needs_arm64_packages, needs_cross

CAMPAIGN = CHECKOUT / "campaigns" / "arm-emulated-vllm.yaml"


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
