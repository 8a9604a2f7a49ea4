"""The ssh provider: its command lines, quoting and shell scripts without a host, its node tools on the host's
own processes, then what only ssh does against a testbed of 2 real hosts with real sshd (multiplexing, a jump
host, the masters closed at release). What every provider does (run, ports, inventory, processes started,
watched and stopped on the node, files, /dev/shm, the clock, release) is the provider contract:
tests/unit/test_provider_contract.py.

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_ssh_provider.py."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from servebench.providers.base import Node
from servebench.providers.ssh import SshProvider
from servebench.providers.ssh.transport import SshError
from tests.support.shared_testbed import shared_testbed
from tests.support.ssh_provider import TIMEOUT_S, spec_of
from tests.support.testbed import allocated, node_named, on_the_testbed


@pytest.fixture(scope="module")
def testbed(request):
    """The session's testbed of 2 hosts, shared with the other provider tests (tests/support/shared_testbed.py)."""
    return shared_testbed(request)


def provider_for(layout, **fields) -> SshProvider:
    hosts = [{"name": h.name, "address": h.address, "key": str(layout.ssh_key), "cpus": "0"} for h in layout.hosts]
    return SshProvider(spec_of(*hosts, **{"known_hosts": str(layout.known_hosts), **fields}))


@pytest.fixture(scope="module")
def provider(testbed):
    with allocated(provider_for(testbed)) as held:
        yield held


def node(provider: SshProvider, name: str) -> Node:
    return node_named(provider, name)


@on_the_testbed
def test_a_new_connection_costs_more_than_a_multiplexed_one(provider):
    """The measurement behind multiplexing (docs/ssh-provider.md)."""
    config = str(provider.transport.config)

    def seconds(*options: str) -> float:
        started = time.perf_counter()
        result = subprocess.run(["ssh", "-F", config, *options, "h1", "true"], capture_output=True,
                                stdin=subprocess.DEVNULL, timeout=TIMEOUT_S)
        assert result.returncode == 0, result.stderr
        return time.perf_counter() - started
    new = statistics.median(seconds("-o", "ControlMaster=no", "-o", "ControlPath=none") for _ in range(3))
    mux = statistics.median(seconds() for _ in range(5))
    print(f"ssh h1 true: new connection {new * 1000:.0f} ms, multiplexed {mux * 1000:.1f} ms")
    assert mux < new


@on_the_testbed
def test_a_host_through_a_jump_host(testbed):
    h1, h2 = testbed.hosts
    spec = spec_of({"name": "far", "address": h2.address, "key": str(testbed.ssh_key), "cpus": [0],
                    "jump": {"address": h1.address, "key": str(testbed.ssh_key)}}, known_hosts=str(testbed.known_hosts))
    provider = SshProvider(spec)
    try:
        far = provider.allocate()[0]
        assert provider.run(far, ["hostname"]).stdout.strip() == "h2"
        who = provider.run(far, ["sh", "-c", "echo $SSH_CLIENT"]).stdout.split()[0]
        assert who == h1.address  # the connection came from the jump host
    finally:
        provider.release()
    assert provider.transport.master_pids() == []


@on_the_testbed
def test_a_host_whose_key_changed_is_refused_naming_it_and_the_key_it_sent(testbed, tmp_path):
    """A known_hosts that holds another key for h1 (h2's, as if another machine took h1's address): nothing
    runs, and the error names the host and the fingerprint it sent; a host never seen is refused as well."""
    h1, h2 = testbed.hosts
    lines = testbed.known_hosts.read_text().splitlines()
    key_of = {line.split()[0]: line.split(None, 1)[1] for line in lines if line and not line.startswith("#")}
    h1_names = next(names for names in key_of if h1.address in names.split(","))
    h2_names = next(names for names in key_of if h2.address in names.split(","))
    swapped = tmp_path / "known_hosts"
    swapped.write_text(f"{h1_names} {key_of[h2_names]}\n")
    provider = provider_for(testbed, known_hosts=str(swapped))
    try:
        with pytest.raises(SshError, match=rf"h1 \(root@{re.escape(h1.address)}:22\): its host key changed: it "
                                           r"sent \S+ SHA256:\S+, not the key"):
            provider.allocate()
    finally:
        provider.release()
    unknown = tmp_path / "empty_known_hosts"
    unknown.write_text("")
    provider = provider_for(testbed, known_hosts=str(unknown))
    try:
        with pytest.raises(SshError, match=r"no \S+ host key is known for .*`host_keys: accept-new`"):
            provider.allocate()
    finally:
        provider.release()


@on_the_testbed
def test_release_closes_the_masters(testbed, tmp_path):
    """What release does for ssh alone (the processes and the run's directory: the provider contract,
    tests/unit/test_provider_contract.py): every master connection of the run closed, its directory gone."""
    provider = provider_for(testbed)
    provider.allocate()
    control_dir = provider.transport.control_dir
    assert len(provider.transport.master_pids()) == 2  # one master per host
    provider.start(node(provider, "h1"), ["sleep", "60"], {}, tmp_path / "left.log")
    provider.release()
    assert provider.transport.master_pids() == [] and not control_dir.exists()
    assert not [p for p in os.listdir("/proc") if p.isdigit() and str(control_dir) in _cmdline(p)]


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@on_the_testbed
def test_the_inventory_names_the_host_key_the_node_was_reached_by(provider, testbed):
    """The fingerprint lands with the node (`nodes.host_key`): the key known_hosts holds for the host,
    which the connection was checked against."""
    facts = provider.inventory(node(provider, "h1"))
    listed = subprocess.run(["ssh-keygen", "-l", "-f", str(testbed.known_hosts)], capture_output=True, text=True,
                            check=True).stdout
    assert facts["host_key"] and re.fullmatch(r"\S+ SHA256:\S+(, \S+ SHA256:\S+)*", facts["host_key"]), facts
    assert all(fingerprint.split()[1] in listed for fingerprint in facts["host_key"].split(", "))
