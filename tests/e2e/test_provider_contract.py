"""The provider contract: what every provider does, proven once for all.

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_provider_contract.py."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
from dataclasses import dataclass
from typing import Callable

import pytest

from servebench.providers import (
    node_tools,
)
from servebench.providers.base import Node
from tests.support.netns_provider import NamespaceProvider
from tests.support.shared_testbed import shared_testbed
from tests.support.testbed import on_host, own_leftovers
from tests.support.waiting import wait_until


@dataclass
class Subject:
    """One provider kind as the suite drives it."""

    make: Callable[[], object]              # a new provider of the kind, not yet allocated
    look: Callable[[Node, str], str]        # stdout of a sh script on the node, not through the provider
    remote: bool                            # its nodes are other machines (their own clock, their own files)


def this_host_script(node: Node, script: str) -> str:
    return subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=60).stdout


def local_subject(kind: str) -> Subject:
    from servebench.providers.local import LocalProvider
    from servebench.providers.local.spec import LocalProviderSpec
    from tests.support.plain_provider import PlainProvider, PlainProviderSpec

    cpu = str(min(os.sched_getaffinity(0)))
    nodes = [{"name": "n0", "cpus": cpu}, {"name": "n1", "cpus": cpu}]
    if kind == "local":
        return Subject(lambda: LocalProvider(LocalProviderSpec(kind="local", nodes=nodes)), this_host_script, False)
    return Subject(lambda: PlainProvider(PlainProviderSpec(kind="plain", nodes=nodes)), this_host_script, False)


def remote_subject(kind: str, layout) -> Subject:
    from servebench.providers.slurm import SlurmProvider
    from servebench.providers.slurm.spec import SlurmProviderSpec
    from servebench.providers.ssh import SshProvider
    from servebench.providers.ssh.spec import SshProviderSpec
    from tests.support.netns_provider import NamespaceProviderSpec

    def look(node: Node, script: str) -> str:
        return on_host(layout, layout.host(node.name), script)

    hosts = [{"name": h.name, "address": h.address, "cpus": "0"} for h in layout.hosts]
    makers = {
        "ssh": lambda: SshProvider(SshProviderSpec.model_validate(
            {"kind": "ssh", "hosts": [h | {"key": str(layout.ssh_key)} for h in hosts],
             "known_hosts": str(layout.known_hosts)})),
        "slurm": lambda: SlurmProvider(SlurmProviderSpec.model_validate(
            {"kind": "slurm", "nodes": 2, "cpus_per_node": 1, "time_limit": "10", "partition": layout.partition,
             "slurm_conf": str(layout.slurm_conf), "python": "/usr/bin/python3"})),
        "netns": lambda: NamespaceProvider(NamespaceProviderSpec.model_validate(
            {"kind": "netns", "testbed": layout.name, "nodes": [{"name": h["name"], "cpus": "0"} for h in hosts]})),
    }
    return Subject(makers[kind], look, True)


ON_THIS_HOST = ["local", "plain"]


ON_THE_TESTBED = ["ssh", "slurm", "netns"]


TESTBED_MARKS = [pytest.mark.testbed, pytest.mark.root]  # real hosts: sshd, Slurm, namespaces


@pytest.fixture(scope="module")
def testbed(request):
    """The session's testbed of 2 hosts, shared with the other provider tests (tests/support/shared_testbed.py)."""
    return shared_testbed(request)


KINDS = [pytest.param(kind, id=kind) for kind in ON_THIS_HOST] + \
    [pytest.param(kind, id=kind, marks=TESTBED_MARKS) for kind in ON_THE_TESTBED]


REMOTE_KINDS = [pytest.param(kind, id=kind, marks=TESTBED_MARKS) for kind in ON_THE_TESTBED]


@pytest.fixture(scope="module")
def subject(request) -> Subject:
    kind = request.param
    if kind in ON_THIS_HOST:
        return local_subject(kind)
    return remote_subject(kind, request.getfixturevalue("testbed"))


@pytest.fixture(scope="module")
def provider(subject):
    """The kind's provider holding its nodes for the module, released afterwards whatever happens."""
    held = subject.make()
    try:
        for node in held.allocate():
            held.scratch_dir(node)  # made when first asked (on this host): the module's, not a test's
        yield held
    finally:
        held.release()


def running_on(subject: Subject, node: Node, pid: int) -> bool:
    """Alive on the node (and not a zombie), looked at without the provider."""
    script = f'kill -0 {pid} 2>/dev/null && ! grep -q "^State:.*Z" /proc/{pid}/status && echo runs'
    return subject.look(node, script).strip() == "runs"


def died_of(code: int | None, sig: int) -> bool:
    """The exit status of a process a signal ended: Popen's -N on this host, the shell's 128+N on a node."""
    return code in (-sig, 128 + sig)


def with_kinds(kinds):
    return pytest.mark.parametrize("subject", kinds, indirect=True)


@with_kinds(KINDS)
def test_run_gives_the_exit_code_and_output_with_every_argument_as_given(subject, provider):
    node = provider.nodes()[0]
    script = 'printf "%s|" "$@"; echo oops >&2; exit 3'
    result = provider.run(node, ["sh", "-c", script, "sh", "a b", "$HOME", "'q'", "x;hostname", "-w", ""])
    assert (result.returncode, result.stdout) == (3, "a b|$HOME|'q'|x;hostname|-w||")
    assert result.stderr == "oops\n"


@with_kinds(KINDS)
def test_inventory_and_ports_are_the_nodes(subject, provider):
    node = provider.nodes()[-1]
    facts = provider.inventory(node)
    assert facts["cpus"] == node.cpus and facts["logical_cores"] >= 1
    if subject.remote:
        assert facts["hostname"] == node.name
    port, first = provider.free_port(node), provider.free_port_range(node, 3)
    bind = ("import socket, sys\nfor port in map(int, sys.argv[2:]):\n    s = socket.socket()\n"
            "    s.bind((sys.argv[1], port))\nprint('bound')")
    ports = [str(p) for p in sorted({port, first, first + 1, first + 2})]  # nothing bound between the two picks
    result = provider.run(node, [provider.node_python(node), "-c", bind, node.address, *ports])
    assert (result.returncode, result.stdout.strip()) == (0, "bound"), result.stderr


TREE = ("import os, sys, time\nprint('env', os.environ.get('SB_X'), os.environ.get('HOME'), os.environ['TMPDIR'], "
        "flush=True)\nchild = os.fork()\nif child == 0:\n    os.setsid()\n    time.sleep(60)\n    sys.exit()\n"
        "print('pids', os.getpid(), child, flush=True)\ntime.sleep(60)\n")


@with_kinds(KINDS)
def test_a_process_tree_is_started_watched_and_stopped_by_pid_with_its_children(subject, provider, tmp_path):
    """A child that left the process group (its own session) is stopped too, as one its parent recorded."""
    node = provider.nodes()[-1]
    log = tmp_path / "tree.log"
    process = provider.start(node, [provider.node_python(node), "-c", TREE], {"SB_X": "a,b c"}, log, unset=["HOME"])
    assert process.alive()

    def pids() -> list[str]:
        process.fetch_log()
        return [line.split()[1:] for line in log.read_text().splitlines() if line.startswith("pids")]
    python_pid, child_pid = map(int, wait_until(pids, "the process to print its pids")[0])
    process.remember_descendants()
    assert running_on(subject, node, child_pid)
    code = provider.stop(process, grace_s=0.2)
    assert died_of(code, signal.SIGTERM), code  # python died of the SIGTERM to its group
    for pid in {process.pid, python_pid, child_pid}:
        assert not running_on(subject, node, pid), f"pid {pid} still runs on {node.name}"
    assert not process.alive() and process.exit_code() == code
    assert f"env a,b c None {provider.scratch_dir(node)}" in log.read_text()  # env added, HOME unset, TMPDIR


@with_kinds(KINDS)
def test_a_process_that_ends_reports_its_exit_code_and_log(subject, provider, tmp_path):
    node = provider.nodes()[0]
    log = tmp_path / "short.log"
    process = provider.start(node, ["sh", "-c", "echo bye; exit 7"], {}, log)
    wait_until(lambda: not process.alive(), "the process to end")
    assert process.exit_code() == 7
    process.fetch_log()
    assert log.read_text() == "bye\n"
    assert provider.stop(process, grace_s=0.2) == 7


@with_kinds(REMOTE_KINDS)
def test_stop_finds_a_daemon_nobody_recorded(subject, provider, tmp_path):
    """The leader exits at once, leaving a grandchild in a session of its own that no
    remember_descendants saw: the run's mark in its environment still finds it on the node."""
    node = provider.nodes()[0]
    script = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
              "        print('daemon', os.getpid(), flush=True)\n        time.sleep(60)\n    os._exit(0)\n"
              "os.wait()\n")
    process = provider.start(node, [provider.node_python(node), "-c", script], {}, tmp_path / "daemon.log")
    wait_until(lambda: not process.alive(), "the leader to exit")
    daemon = int(process.log_path.read_text().split()[1])
    assert process.exit_code() == 0 and running_on(subject, node, daemon)
    assert provider.stop(process, grace_s=0.2) == 0
    assert not running_on(subject, node, daemon)


@with_kinds(KINDS)
def test_trees_go_to_and_come_from_the_node_and_are_digested_there(subject, provider, tmp_path):
    node = provider.nodes()[-1]
    source = tmp_path / "source"
    (source / "sub").mkdir(parents=True)
    (source / "a.txt").write_text("a\n")
    (source / "sub" / "b.bin").write_bytes(bytes(range(256)) * 64)
    (source / "link").symlink_to("a.txt")
    remote = f"{provider.scratch_dir(node)}/tree-{secrets.token_hex(3)}"
    provider.put_tree(node, source, remote)
    assert provider.tree_digest(node, remote) == node_tools.tree_digest(str(source))
    back = tmp_path / "back"
    assert provider.get_tree(node, remote, back)
    assert node_tools.tree_digest(str(back)) == node_tools.tree_digest(str(source))
    assert os.readlink(back / "link") == "a.txt"
    assert not provider.get_tree(node, remote + "-missing", tmp_path / "none")
    assert provider.tree_digest(node, remote + "-missing") is None


@with_kinds(KINDS)
def test_shm_cleanup_removes_what_appeared_but_what_a_process_holds(subject, provider, tmp_path):
    node = provider.nodes()[-1]
    before = provider.shm_entries(node)
    stray, held = f"sb-stray-{secrets.token_hex(3)}", f"sb-held-{secrets.token_hex(3)}"
    holder = provider.start(node, [provider.node_python(node), "-c", f"import time; f = open('/dev/shm/{held}', 'w'); "
                                   "time.sleep(60)"], {}, tmp_path / "holder.log")
    try:
        assert provider.run(node, ["touch", f"/dev/shm/{stray}"]).returncode == 0
        wait_until(lambda: held in provider.shm_entries(node), "the holder to open its file")
        removed = provider.remove_shm_created_since(node, before)
        assert stray in removed and held not in removed
        assert stray not in provider.shm_entries(node) and held in provider.shm_entries(node)
    finally:
        provider.stop(holder, grace_s=0.2)
    assert held in provider.remove_shm_created_since(node, before)
    if subject.remote:
        assert stray not in os.listdir("/dev/shm")  # the node's own /dev/shm, not this host's


@with_kinds(KINDS)
def test_the_clock_offset_is_none_on_this_host_and_measured_on_a_node(subject, provider):
    offset = provider.clock_offset(provider.nodes()[0])
    if not subject.remote:
        assert offset is None  # one clock: monotonic readings compare directly
    else:
        assert abs(offset) < 0.5, offset  # the testbed's hosts share the orchestrator's clock


@with_kinds(KINDS)
def test_release_stops_what_is_left_and_removes_the_scratch_dir(subject, provider, tmp_path):
    """A provider of its own (the module's stays allocated): a process left running, a file left in
    the scratch dir; after release, looked at without the provider, neither is there, and nothing
    the provider started here (an ssh master, an srun client) still runs."""
    before = set(own_leftovers())  # the module's provider holds its own (an ssh master, a lease's srun client)
    fresh = subject.make()
    try:
        node = fresh.allocate()[-1]
        left = fresh.start(node, ["sleep", "60"], {}, tmp_path / "left.log")
        scratch = fresh.scratch_dir(node)
        assert fresh.run(node, ["sh", "-c", 'echo x > "$1/left.txt"', "sh", scratch]).returncode == 0
        assert running_on(subject, node, left.pid)
    finally:
        fresh.release()
    assert not running_on(subject, node, left.pid)
    assert subject.look(node, f"test -e {scratch} && echo there").strip() == ""
    assert set(own_leftovers()) - before == set()
    fresh.release()  # twice: nothing more to do
