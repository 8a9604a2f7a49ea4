"""The relay on a testbed of 6 real hosts over ssh (servebench/distribution/relay.py): a tree placed
by relay verifies on every host, most copies come from hosts rather than the orchestrator, and a
host that cannot take the tree is named while every other host still gets it. Then the same over
the testbed's Slurm by `sbcast` (servebench/providers/slurm/broadcast.py), a failing host named too.

Needs root and the testbed's Debian packages (docs/testbed.md); without them it is skipped with the reason."""

from __future__ import annotations

import contextlib
import math
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from servebench.devtools.testbed import enter_argv
from servebench.distribution.distribute import RELAY, SBCAST, NodeRefused, local_digest, place_on_nodes
from servebench.distribution.relay import relay_tree
from servebench.providers.slurm import SlurmProvider
from servebench.providers.slurm.spec import SlurmProviderSpec
from servebench.providers.ssh import SshProvider
from servebench.providers.ssh.spec import SshProviderSpec
from tests.support.testbed import allocated, on_the_testbed, own_testbed

HOSTS = 6


@pytest.fixture(scope="module")
def testbed():
    with own_testbed("rly", HOSTS) as layout:
        yield layout


@pytest.fixture(scope="module")
def provider(testbed):
    hosts = [{"name": h.name, "address": h.address, "key": str(testbed.ssh_key), "cpus": "0"} for h in testbed.hosts]
    spec = SshProviderSpec.model_validate({"kind": "ssh", "hosts": hosts, "known_hosts": str(testbed.known_hosts)})
    with allocated(SshProvider(spec)) as held:
        yield held


@contextlib.contextmanager
def read_only_on(testbed, host_name: str, directory: Path) -> Iterator[None]:
    """`directory` on one host a read-only file system: nothing can be put there."""
    host = testbed.host(host_name)
    script = 'mkdir -p "$1" && mount -t tmpfs -o ro tmpfs "$1"'
    mounted = subprocess.run([*enter_argv(testbed, host), "sh", "-c", script, "sh", str(directory)],
                             capture_output=True, text=True, timeout=30)
    assert mounted.returncode == 0, mounted.stderr
    try:
        yield
    finally:
        subprocess.run([*enter_argv(testbed, host), "umount", str(directory)], capture_output=True, timeout=30)


def a_tree(root: Path, megabytes: int = 4) -> Path:
    """Under /tmp, which every host has its own of: the hosts start without it."""
    tree = root / "build"
    (tree / "lib").mkdir(parents=True)
    for index in range(megabytes):
        (tree / "lib" / f"part{index}.bin").write_bytes(os.urandom(1 << 20))
    (tree / "bin").mkdir()
    (tree / "bin" / "python").symlink_to("/usr/bin/python3")
    return tree


@on_the_testbed
def test_a_relayed_tree_verifies_on_every_host(provider, tmp_path):
    tree = a_tree(tmp_path)
    nodes = provider.nodes()
    notes: list[str] = []
    placements = place_on_nodes(provider, nodes, {}, {n.name: {"model": tree} for n in nodes}, None,
                                "linux-x86_64", log=notes.append, way=RELAY)
    digest = local_digest(tree)
    assert {p.node for p in placements} == {n.name for n in nodes}
    assert all(p.how == "copied" and p.digest == digest and p.bytes and p.bytes >= 4 << 20 for p in placements)
    sources = [p.note.removeprefix("relayed from ") for p in placements if p.note]
    assert len(sources) == HOSTS and sum(source != "orchestrator" for source in sources) >= HOSTS // 2, sources
    for node in nodes:  # computed on each host, not taken from the relay's word
        assert provider.tree_digest(node, str(tree)) == digest, node.name
    rounds = {line.rsplit("(round ", 1)[1].rstrip(")") for line in notes if "(round " in line}
    assert len(rounds) == math.ceil(math.log2(HOSTS + 1)), notes


@on_the_testbed
def test_a_host_that_cannot_take_the_tree_is_named_and_the_others_get_it(testbed, provider, tmp_path):
    tree = a_tree(tmp_path, megabytes=2)
    with read_only_on(testbed, "h1", tmp_path):  # the first round's target: every later round is planned without it
        nodes = provider.nodes()
        digest = local_digest(tree)
        result = relay_tree(provider, nodes, tree, str(tree), digest, log=lambda text: None)
        assert list(result.failed) == ["h1"] and "Read-only file system" in result.failed["h1"], result.failed
        assert sorted(result.arrived) == sorted(n.name for n in nodes if n.name != "h1")
        assert all(hop.source != "h1" for hop in result.arrived.values())
        for node in nodes:
            assert provider.tree_digest(node, str(tree)) == (None if node.name == "h1" else digest), node.name
        with pytest.raises(NodeRefused, match=r"node h1: model .*Read-only file system.* other 5 node"):
            place_on_nodes(provider, nodes, {}, {n.name: {"model": tree} for n in nodes}, None, "linux-x86_64",
                           log=lambda text: None, way=RELAY)


@on_the_testbed
def test_sbcast_places_the_tree_on_every_slurm_node_and_names_one_that_fails(testbed, tmp_path):
    spec = SlurmProviderSpec.model_validate({"kind": "slurm", "nodes": 4, "cpus_per_node": 1, "time_limit": "10",
                                             "partition": testbed.partition, "slurm_conf": str(testbed.slurm_conf),
                                             "python": "/usr/bin/python3"})
    with allocated(SlurmProvider(spec)) as slurm:
        nodes = slurm.nodes()
        tree = a_tree(tmp_path / "first", megabytes=2)
        placements = place_on_nodes(slurm, nodes, {}, {n.name: {"model": tree} for n in nodes}, None,
                                    "linux-x86_64", log=lambda text: None, way=SBCAST)
        assert sorted(p.node for p in placements) == sorted(n.name for n in nodes)
        assert all(p.how == "copied" and p.note == "sbcast" for p in placements)
        for node in nodes:
            assert slurm.tree_digest(node, str(tree)) == local_digest(tree), node.name
        second = a_tree(tmp_path / "second", megabytes=1)
        broken = nodes[-1].name
        with read_only_on(testbed, broken, second.parent):
            with pytest.raises(NodeRefused, match=rf"node {broken}: model .*Read-only file system.* other 3 node"):
                place_on_nodes(slurm, nodes, {}, {n.name: {"model": second} for n in nodes}, None, "linux-x86_64",
                               log=lambda text: None, way=SBCAST)
        for node in nodes[:-1]:
            assert slurm.tree_digest(node, str(second)) == local_digest(second), node.name
        leftover = [slurm.run(n, ["sh", "-c", f"ls {spec.remote_dir}/servebench-{slurm.run_id}-*.tar"]).returncode
                    for n in nodes]
        assert leftover == [2] * len(nodes)  # ls found no tar file: removed from every node
