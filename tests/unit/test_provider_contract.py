"""The provider contract: what every provider does, proven once for all.

First the declared capabilities (pure: the registry and the campaign check ask them, never
`hasattr`), then one suite parametrised over the providers: local and the test-only `plain`
(nodes on this host), ssh and slurm on a testbed of 2 real hosts, and a third remote provider
that is only a channel plus an allocation (tests/support/netns_provider.py: the hosts entered by
`nsenter`), on the same testbed. Each provider runs a command with its arguments intact, picks
ports and takes the inventory on the node, starts a process tree and stops it by PID with its
children, copies trees to and from the node and digests them there, cleans /dev/shm but for what a
process holds, reads the node's clock, and at release leaves nothing: no process, no scratch dir.

What only one provider does stays with it: tests/unit/test_ssh_provider.py (multiplexing, a jump host,
the masters closed) and tests/unit/test_slurm_provider.py (the job, an allocation ended from outside,
the lease). The testbed cases need root and the testbed's Debian packages (docs/testbed.md);
without them they are skipped with the reason.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import ClassVar

import pytest

from servebench.campaign.loading import SpecError, parse_campaign
from servebench.providers import (
    capability_problem,
    get_provider,
    get_provider_class,
    provider_kinds,
    register_provider,
)
from servebench.providers.base import (
    ATTACH,
    BATCH_JOBS,
    CANCEL_ALLOCATION,
    CAPABILITIES,
    LINK_SHAPING,
    LinkShaper,
    Node,
    Provider,
)
from servebench.providers.remote import RemoteNodes
from tests.support.netns_provider import NamespaceProvider

# ---------------------------------------------------------------------------- declared capabilities

def test_every_registered_provider_declares_known_capabilities():
    declared = {kind: get_provider_class(kind).capabilities for kind in provider_kinds()}
    assert declared["local"] == frozenset()
    assert declared["ssh"] == frozenset({LINK_SHAPING})
    assert declared["slurm"] == frozenset({CANCEL_ALLOCATION, ATTACH, LINK_SHAPING, BATCH_JOBS})
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


def test_a_provider_with_a_method_missing_is_not_registered_and_the_error_names_them():
    """A provider is checked whole when it is registered, not when a run first calls what it lacks."""
    from servebench.providers.this_host import ThisHostProcesses

    class Forgetful(ThisHostProcesses):  # nodes on this host, its campaign-block classmethods forgotten
        kind: ClassVar[str] = "forgetful"

        def nodes(self) -> list[Node]:
            return []

        def allocate(self) -> list[Node]:
            return []

        def inventory(self, node: Node) -> dict:
            return {}

        def release(self) -> None:
            self.stop_leftovers()

    class Unfinished(Provider):
        kind: ClassVar[str] = "unfinished"
        capabilities: ClassVar[frozenset[str]] = frozenset()

        def nodes(self) -> list[Node]:
            return []

    class NotAProvider:
        kind: ClassVar[str] = "stray"
        capabilities: ClassVar[frozenset[str]] = frozenset()

    with pytest.raises(TypeError, match=r"provider Forgetful is abstract: it lacks host_cpus, spec_problems$"):
        register_provider(Forgetful)
    with pytest.raises(TypeError, match=r"provider Unfinished is abstract: it lacks .*allocate.*start.*tree_digest"):
        register_provider(Unfinished)
    assert "nodes" not in Unfinished.__abstractmethods__
    with pytest.raises(TypeError, match="provider NotAProvider is not a servebench.providers.base.Provider subclass"):
        register_provider(NotAProvider)
    assert not {"forgetful", "unfinished", "stray"} & set(provider_kinds())


def test_a_declared_capability_needs_its_own_methods():
    from servebench.providers.local import LocalProvider

    class Boasting(LocalProvider):
        kind: ClassVar[str] = "boasting"
        capabilities: ClassVar[frozenset[str]] = frozenset({ATTACH, CANCEL_ALLOCATION})

        def attach(self, record: dict) -> None:
            pass

    with pytest.raises(TypeError, match=r"provider Boasting declares capabilities without their methods: "
                                        r"cancel-allocation \(cancel_allocation\)"):
        register_provider(Boasting)
    assert "boasting" not in provider_kinds()


def test_a_capability_the_provider_lacks_says_so_when_called():
    from servebench.providers.local import LocalProvider
    from servebench.providers.local.spec import LocalProviderSpec

    local = LocalProvider(LocalProviderSpec(kind="local", nodes=[{"name": "n0", "cpus": "0"}]))
    local.use_link_shaper(RecordingLinks())
    with pytest.raises(NotImplementedError, match="provider local cannot cancel the run's allocation"):
        local.cancel_allocation()
    with pytest.raises(NotImplementedError, match="provider local cannot set a node's link delay"):
        local.shape_link("sbtb", local.nodes()[0], 5.0, None)


class RecordingLinks(LinkShaper):
    """A link shaper that only notes what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def shape_link(self, testbed: str, node: Node, delay_ms: float, rate_mbit: float | None) -> dict:
        self.calls.append(("shape", testbed, node.name, delay_ms, rate_mbit))
        return {"delay_ms": delay_ms, "rate_mbit": rate_mbit, "problems": []}

    def connect_node(self, testbed: str, node: Node, connected: bool) -> str:
        self.calls.append(("connect", testbed, node.name, connected))
        return "UP" if connected else "DOWN"


def test_link_shaping_is_handed_to_the_provider_and_done_by_the_shaper():
    """ssh declares LINK_SHAPING; the links are the handed shaper's (the testbed's in a run), and a
    provider built without one says which to hand it."""
    from servebench.campaign.loading import parse_campaign as parse

    campaign = parse(SSH_NETWORK, host_cpus={0, 1})
    shaper = RecordingLinks()
    provider = get_provider(campaign, links=shaper)
    h2 = provider.nodes()[1]
    assert provider.shape_link("sbtb", h2, 5.0, 100.0)["delay_ms"] == 5.0
    assert provider.connect_node("sbtb", h2, False) == "DOWN"
    assert shaper.calls == [("shape", "sbtb", "h2", 5.0, 100.0), ("connect", "sbtb", "h2", False)]
    with pytest.raises(RuntimeError, match="no link shaper was handed to it.*TestbedLinks"):
        get_provider(campaign).shape_link("sbtb", h2, 0.0, None)


def test_the_testbed_hands_its_links_unless_the_provider_has_some():
    from servebench.devtools.testbed.links import TestbedLinks, with_testbed_links

    campaign = parse_campaign(SSH_NETWORK, host_cpus={0, 1})
    assert isinstance(with_testbed_links(get_provider(campaign)).link_shaper, TestbedLinks)
    own = RecordingLinks()
    assert with_testbed_links(get_provider(campaign, links=own)).link_shaper is own


# ---------------------------------------------------------------------------- the layers of link shaping

SERVEBENCH = Path(__file__).resolve().parents[2] / "servebench"
TESTBED = "servebench.devtools.testbed"


def module_name(root: Path, path: Path) -> str:
    """servebench.x.y of a file under `root` (the servebench package folder)."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def names_bound_to_the_testbed(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """The names a module binds to servebench.devtools.testbed or anything in it (relative imports resolved)."""
    names = set()
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if base == TESTBED or base.startswith(TESTBED + ".") or full == TESTBED:
                    names.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == TESTBED or alias.name.startswith(TESTBED + "."):
                    names.add(alias.asname or alias.name)
    return names


def dotted(expression: ast.expr) -> str | None:
    """`a.b.C` of a base class expression (a subscript's value: `Base[T]`); None if it is not a name."""
    if isinstance(expression, ast.Subscript):
        return dotted(expression.value)
    if isinstance(expression, ast.Name):
        return expression.id
    if isinstance(expression, ast.Attribute):
        head = dotted(expression.value)
        return None if head is None else f"{head}.{expression.attr}"
    return None


def classes_based_on_the_testbed(root: Path) -> list[str]:
    """Every class of the package at `root`, outside its testbed, with a base that comes from
    servebench.devtools.testbed (imported by name, by module, or written out in full)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        if (root / "devtools" / "testbed") in path.parents:
            continue
        module = module_name(root, path)
        tree = ast.parse(path.read_text(), str(path))
        names = names_bound_to_the_testbed(tree, module, path.name == "__init__.py")
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            for base in node.bases:
                text = dotted(base) or ""
                if text.split(".")[0] in names or text in names or text.startswith(TESTBED + "."):
                    found.append(f"{module}.{node.name} inherits {text}")
    return found


def test_no_production_class_inherits_from_the_testbed():
    """The testbed sits above the providers: it hands its links to a provider (`LinkShaper`), no
    class of the product below it is a testbed class."""
    assert classes_based_on_the_testbed(SERVEBENCH) == []


def test_the_testbed_inheritance_check_sees_a_planted_class(tmp_path):
    package = tmp_path / "servebench"
    for folder in ("providers", "devtools", "devtools/testbed", "serving"):
        (package / folder).mkdir(parents=True)
        (package / folder / "__init__.py").write_text("")
    (package / "devtools" / "testbed" / "links.py").write_text("class TestbedLinks:\n    pass\n")
    (package / "devtools" / "testbed" / "own.py").write_text(  # inside: allowed
        "from servebench.devtools.testbed.links import TestbedLinks\nclass Mine(TestbedLinks):\n    pass\n")
    (package / "providers" / "remote.py").write_text(
        "from servebench.devtools.testbed.links import TestbedLinks as Links\nclass RemoteNodes(Links):\n    pass\n")
    (package / "providers" / "other.py").write_text(
        "import servebench.devtools.testbed.links\n"
        "class A(servebench.devtools.testbed.links.TestbedLinks):\n    pass\n")
    (package / "serving" / "shaped.py").write_text(
        "from ..devtools.testbed import links\nclass B(links.TestbedLinks):\n    pass\nclass C(object):\n    pass\n")
    assert classes_based_on_the_testbed(package) == [
        "servebench.providers.other.A inherits servebench.devtools.testbed.links.TestbedLinks",
        "servebench.providers.remote.RemoteNodes inherits Links",
        "servebench.serving.shaped.B inherits links.TestbedLinks",
    ]


def test_the_providers_do_not_import_the_testbed():
    """Not even lazily: the link shaping they need is handed to them."""
    for path in sorted((SERVEBENCH / "providers").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        assert not names_bound_to_the_testbed(tree, module_name(SERVEBENCH, path), path.name == "__init__.py"), path


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


# ---------------------------------------------------------------------------- the providers under test


# ---------------------------------------------------------------------------- the contract


def test_a_third_provider_is_a_channel_plus_an_allocation():
    """The netns provider passes the suite above with nothing of its own but its channel (`run`,
    `pipe_argv`) and its allocation: every node method is the shared base's."""
    from tests.support.netns_provider import NamespaceChannel

    allocation = {"__init__", "host_cpus", "spec_problems", "channel", "node_host", "nodes", "allocate", "claims",
                  "allocation_record", "release", "reclaim"}
    own = {name for name, value in vars(NamespaceProvider).items() if inspect.isfunction(value)
           or isinstance(value, (classmethod, staticmethod))}
    assert own <= allocation, own - allocation
    assert {name for name, value in vars(NamespaceChannel).items() if inspect.isfunction(value)} == {
        "__init__", "run", "pipe_argv"}
    assert issubclass(NamespaceProvider, RemoteNodes)
    interface = {name for name in dir(RemoteNodes) if not name.startswith("_")}
    assert {"run", "start", "stop", "free_port", "put_tree", "get_tree", "tree_digest", "shm_entries",
            "remove_shm_created_since", "clock_offset", "scratch_dir", "inventory", "command"} <= interface
