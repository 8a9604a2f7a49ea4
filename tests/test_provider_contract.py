"""The provider contract (issue 33, items 2 and 4): what every provider does, proven once for all.

First the declared capabilities (pure: the registry and the campaign check ask them, never
`hasattr`), then one suite parametrised over the providers.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from servebench.campaign.loading import SpecError, parse_campaign
from servebench.providers import capability_problem, get_provider_class, provider_kinds, register_provider
from servebench.providers.base import ATTACH, CANCEL_ALLOCATION, CAPABILITIES, LINK_SHAPING


# ---------------------------------------------------------------------------- declared capabilities

def test_every_registered_provider_declares_known_capabilities():
    declared = {kind: get_provider_class(kind).capabilities for kind in provider_kinds()}
    assert declared["local"] == frozenset()
    assert declared["ssh"] == frozenset({LINK_SHAPING})
    assert declared["slurm"] == frozenset({CANCEL_ALLOCATION, ATTACH, LINK_SHAPING})
    for kind, capabilities in declared.items():
        assert capabilities <= set(CAPABILITIES), kind
        for capability, method in ((CANCEL_ALLOCATION, "cancel_allocation"), (ATTACH, "attach"),
                                   (LINK_SHAPING, "shape_link"), (LINK_SHAPING, "connect_node")):
            if capability in capabilities:
                assert callable(getattr(get_provider_class(kind), method)), f"{kind} declares {capability}"


def test_a_provider_without_a_declaration_or_with_an_unknown_capability_is_not_registered():
    class Undeclared:
        kind: ClassVar[str] = "undeclared"

    class Misspelt:
        kind: ClassVar[str] = "misspelt"
        capabilities: ClassVar[frozenset[str]] = frozenset({"link-shapping"})

    with pytest.raises(TypeError, match="declares no `capabilities"):
        register_provider(Undeclared)
    with pytest.raises(TypeError, match=r"unknown capabilities \['link-shapping'\]"):
        register_provider(Misspelt)
    assert "undeclared" not in provider_kinds() and "misspelt" not in provider_kinds()


def test_capability_problems_name_the_need_and_the_providers_that_have_it():
    assert capability_problem("slurm", CANCEL_ALLOCATION, "a cancel-allocation fault") is None
    assert capability_problem("ssh", LINK_SHAPING, "the network axis") is None
    assert capability_problem("ssh", CANCEL_ALLOCATION, "a cancel-allocation fault") == (
        "a cancel-allocation fault needs a provider that can cancel the run's allocation (a scheduler's job); "
        "provider 'ssh' cannot (providers that can: slurm)")


SSH_NETWORK = """
name: t
provider: {kind: ssh, hosts: [{name: h1, address: 198.18.0.1, cpus: "0"}, {name: h2, address: 198.18.0.2, cpus: "0"}]}
model: {generate: tiny-llama}
modes: [{name: tp1}]
load: {clients: [1], requests: 4}
network: {testbed: sbtb, links: [{delay_ms: 0}, {delay_ms: 5}]}
faults:
  - {cell: tp1.plain.c1.r0, action: cut-host, node: h2, testbed: sbtb}
"""


def test_the_campaign_check_asks_the_providers_capabilities():
    """ssh hosts can have their links shaped and cut (a testbed's); no allocation to cancel there."""
    assert parse_campaign(SSH_NETWORK, host_cpus={0, 1}).network.testbed == "sbtb"
    cancel = SSH_NETWORK + "  - {cell: tp1.d5ms.c1.r0, action: cancel-allocation}\n"
    with pytest.raises(SpecError, match=r"<string>:10: faults\[1\].action: a cancel-allocation fault needs a "
                                        r"provider that can cancel the run's allocation .*provider 'ssh' cannot"):
        parse_campaign(cancel, host_cpus={0, 1})
