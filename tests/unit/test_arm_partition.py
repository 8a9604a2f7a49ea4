"""An ARM partition driven from an x86 login node: the build's interpreter goes where
its venv goes, and a remote aarch64 host runs the build under emulation on that host.

CI's short remote check: a one-host testbed whose host is declared a Graviton3 (`emulate:`),
reached over SSH; vLLM's aarch64 venv is on a file system the host shares (`testbed up --share`,
as a cluster's NFS home: 5.9 GB are not copied in CI), its CPython is not: servebench places the
build's own interpreter (the Debian arm64 userland) and the node's root by digest, the python check
runs there under qemu, and `vllm._C` loads there with the venv's lazy binding. The same host with
`interpreter: node` has no aarch64 python3.11 of its own: refused before serving, naming node,
architecture and what is missing. The campaigns serving vLLM and llama.cpp on such hosts
(campaigns/arm-partition-*.yaml) run in the nightly deployment.
"""

from __future__ import annotations

import pytest

from servebench.campaign.loading import SpecError, load_campaign, parse_campaign
from servebench.cli import plan as plan_cli
from servebench.paths import CHECKOUT
from servebench.planning.plan import make_plan

SSH_CAMPAIGN = CHECKOUT / "campaigns" / "arm-partition-ssh.yaml"
SLURM_CAMPAIGN = CHECKOUT / "campaigns" / "arm-partition-slurm.yaml"
HOST_CPUS = {0, 1}


def test_the_partition_campaigns_pass_the_check_and_the_plan_says_which_nodes_are_emulated():
    for file in (SSH_CAMPAIGN, SLURM_CAMPAIGN):
        campaign = load_campaign(file, host_cpus=HOST_CPUS)
        assert {campaign.engine_spec_for(m).build_target() for m in campaign.modes if m.build} == {"armv8-a",
                                                                                                  "graviton3"}
    text = plan_cli.describe_plan(make_plan(load_campaign(SSH_CAMPAIGN, host_cpus=HOST_CPUS), HOST_CPUS), SSH_CAMPAIGN)
    assert ("arch     g1, g2 emulated graviton3 (qemu-user on each node's own host); x86 their own CPU, not "
            "emulated (the inventory tells the architecture)") in text


def test_a_remote_node_is_not_held_to_this_hosts_architecture_but_a_declared_emulated_one_is():
    """A remote host's architecture is its inventory's (checked at placement); one declared `emulate:`
    is aarch64 already at the campaign check."""
    text = SSH_CAMPAIGN.read_text()
    with pytest.raises(SpecError, match=r"modes\[0\]\.name: mode vllm-x86 runs on node g1 \(aarch64\) but its "
                       r"build is for x86_64"):
        parse_campaign(text.replace("nodes: [x86]\n    knobs", "nodes: [g1]\n    knobs", 1), host_cpus=HOST_CPUS)
    real = text.replace("      emulate: graviton3\n", "")
    assert "emulate:" not in real.split("provider:")[1].split("engine:")[0]
    parse_campaign(real, host_cpus=HOST_CPUS)   # g1, g2 as real ARM hosts: an aarch64 build may run there


def test_slurm_emulate_names_nodes_of_the_allocation():
    text = SLURM_CAMPAIGN.read_text().replace("node2: graviton3", "node7: graviton3")
    with pytest.raises(SpecError, match="emulate names node7, not node\\(s\\) of the allocation "
                       "\\(node1, node2, node3\\)"):
        parse_campaign(text, host_cpus=HOST_CPUS)


def test_a_mode_names_slurm_nodes_as_the_campaign_did_before_the_allocation_named_them():
    """`nodes: [node1]` in a Slurm campaign is the allocation's first node, whatever Slurm calls it."""
    from servebench.providers import Node
    from servebench.serving.deployment import mode_nodes

    campaign = load_campaign(SLURM_CAMPAIGN, host_cpus=HOST_CPUS)
    allocated = [Node(name=f"h{i}", address=f"10.0.0.{i}", cpus=[0], declared_as=f"node{i}",
                      emulate="graviton3" if i < 3 else None) for i in (1, 2, 3)]
    rpc = next(m for m in campaign.modes if m.name == "llamacpp-rpc-graviton3")
    assert [n.name for n in mode_nodes(allocated, rpc)] == ["h1", "h2"]
    reference = next(m for m in campaign.modes if m.name == "vllm-x86")
    assert [n.name for n in mode_nodes(allocated, reference)] == ["h3"]
