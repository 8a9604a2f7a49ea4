"""The ssh provider: its command lines, quoting and shell scripts without a
host, its node tools on the host's own processes, then what only ssh does against a testbed
of 2 real hosts with real sshd (multiplexing, a jump host, the masters closed at release). What
every provider does (run, ports, inventory, processes started, watched and stopped on the node,
files, /dev/shm, the clock, release) is the provider contract: tests/unit/test_provider_contract.py.

The testbed half needs root and the testbed's Debian packages (docs/testbed.md); without them
it is skipped with the reason.
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from servebench.providers import node_tools
from servebench.providers.base import Node
from servebench.providers.ssh import SshProvider
from servebench.providers.ssh.argv import (
    STATUS_SCRIPT,
    check_run_id,
    env_argv,
    parse_started,
    parse_status,
    pinned_argv,
    remote_files,
    remote_run_dir,
    sh_command,
    ssh_argv,
    ssh_config_text,
    start_script,
)
from servebench.providers.ssh.transport import SshError, control_dir_for
from tests.support.ssh_provider import TIMEOUT_S, spec_of
from tests.support.waiting import wait_until

# ---------------------------------------------------------------------------- the campaign's block

def test_spec_reads_hosts_and_gives_node_specs():
    spec = spec_of({"name": "a", "address": "10.0.0.1", "cpus": "0-3"},
                   {"name": "b", "address": "b.example.org", "user": "bench", "port": 2222, "cpus": [4, 5],
                    "key": "~/.ssh/k", "jump": {"address": "gw.example.org"}})
    assert [(n.name, n.cpus) for n in spec.node_specs()] == [("a", [0, 1, 2, 3]), ("b", [4, 5])]
    assert spec.hosts[0].user == "root" and spec.hosts[0].port == 22 and spec.hosts[0].key is None
    assert spec.hosts[1].jump.user == "root" and spec.total_cpus == 6
    for bad in ({"name": "a", "address": "-oProxyCommand=x", "cpus": [0]},
                {"name": "a", "address": "h", "cpus": [0], "user": "-l"},
                {"name": "a", "address": "h", "cpus": []},
                {"name": "a", "address": "h", "cpus": [0], "port": 0},
                {"name": "a", "address": "h", "cpus": [0], "typo": 1}):
        with pytest.raises(ValidationError):
            spec_of(bad)


def test_spec_problems_repeated_names_and_shared_cpus_on_one_host():
    spec = spec_of({"name": "a", "address": "h", "cpus": [0, 1]}, {"name": "a", "address": "i", "cpus": [0]},
                   {"name": "c", "address": "h", "cpus": [1, 2]}, {"name": "d", "address": "h", "cpus": [3]})
    problems = SshProvider.spec_problems(spec, {0})  # CPUs of this host are not the nodes' business
    assert [path for path, _ in problems] == [("provider", "hosts", 1, "name"), ("provider", "hosts", 2, "address")]
    assert "share CPUs [1]" in problems[1][1]


def test_nodes_without_connecting():
    provider = SshProvider(spec_of({"name": "a", "address": "198.18.0.9", "cpus": "0-1"}), reserved_cpus=[0])
    assert provider.nodes() == [Node(name="a", address="198.18.0.9", cpus=[0, 1])]
    assert not provider.transport.control_dir.exists()  # nothing made until a command runs
    assert provider.command(provider.nodes()[0], ["echo", "x y"])[:5] == ["ssh", "-F", str(provider.transport.config),
                                                                          "--", "a"]


# ---------------------------------------------------------------------------- command lines (pure)

def test_ssh_config_hosts_first_then_the_run_then_a_users_file(tmp_path):
    spec = spec_of({"name": "a", "address": "10.0.0.1", "cpus": [0], "key": str(tmp_path / "k")},
                   {"name": "b", "address": "10.0.0.2", "cpus": [0], "port": 2222,
                    "jump": {"address": "gw", "user": "u", "port": 23}},
                   ssh_config=str(tmp_path / "user_config"))
    text = ssh_config_text(spec, Path("/tmp/sb-ssh-x"), Path("/tmp/sb-ssh-x/known_hosts"))
    lines = [line.strip() for line in text.splitlines()]
    assert lines[lines.index("Host a") + 1:lines.index("Host a") + 6] == [
        "HostName 10.0.0.1", "User root", "Port 22", f"IdentityFile {tmp_path / 'k'}", "IdentitiesOnly yes"]
    assert "ProxyJump b--jump" in lines and "Port 2222" in lines
    jump = lines.index("Host b--jump")
    assert lines[jump + 1:jump + 6] == ["HostName gw", "User u", "Port 23", "ControlMaster no", "ControlPath none"]
    assert lines.index("Host *") > jump and lines[-1] == f"Include {tmp_path / 'user_config'}"
    for option in ("BatchMode yes", "StrictHostKeyChecking yes", "UserKnownHostsFile /tmp/sb-ssh-x/known_hosts",
                   "ControlMaster auto", "ControlPath /tmp/sb-ssh-x/%C", "ControlPersist 300", "ConnectTimeout 10"):
        assert option in lines
    strict = ssh_config_text(spec_of({"name": "a", "address": "h", "cpus": [0]}, known_hosts="/k"), Path("/d"),
                             Path("/k"))
    assert "StrictHostKeyChecking yes" in strict and "Include" not in strict
    trusting = ssh_config_text(spec_of({"name": "a", "address": "h", "cpus": [0]}, host_keys="accept-new"),
                               Path("/d"), Path("/d/known_hosts"))
    assert "StrictHostKeyChecking accept-new" in trusting


def test_host_keys_are_the_users_own_unless_the_campaign_names_a_file_or_trusts_new_hosts(tmp_path):
    from servebench.providers.ssh.transport import known_hosts_file

    host = {"name": "a", "address": "h", "cpus": [0]}
    assert known_hosts_file(spec_of(host), tmp_path) == Path("~/.ssh/known_hosts").expanduser()
    assert known_hosts_file(spec_of(host, known_hosts=str(tmp_path / "k")), tmp_path) == tmp_path / "k"
    assert known_hosts_file(spec_of(host, host_keys="accept-new"), tmp_path) == tmp_path / "known_hosts"


def test_argv_and_quoting():
    assert ssh_argv(Path("/c"), "h1", "true") == ["ssh", "-F", "/c", "--", "h1", "true"]
    assert env_argv({"A": "1 2", "B": "$HOME"}, ["C", "D"]) == ["env", "-u", "C", "-u", "D", "A=1 2", "B=$HOME"]
    for bad in ({"A=B": "x"}, {"": "x"}):
        with pytest.raises(ValueError):
            env_argv(bad)
    assert pinned_argv([0, 1, 2, 5], ["x"]) == ["taskset", "-c", "0-2,5", "x"]
    tricky = ["printf", "%s|", "a b", "'q'", '"d"', "$HOME", "`id`", "x;y", ""]
    local = subprocess.run(["sh", "-c", shlex.join(tricky)], capture_output=True, text=True).stdout
    assert local == "a b|'q'|\"d\"|$HOME|`id`|x;y||"
    assert subprocess.run(["sh", "-c", sh_command('printf "%s|" "$@"', *tricky[2:])], capture_output=True,
                          text=True).stdout == local


def test_run_ids_and_remote_paths():
    assert remote_run_dir("/tmp/", "ab12cd34") == "/tmp/servebench-ab12cd34"
    for bad in ("AB12", "a/b..", "x", "ab 12", "../../x"):
        with pytest.raises(ValueError):
            check_run_id(bad)
    files = remote_files("/tmp/servebench-ab12", 3, "tp2.worker 1;rm.log")
    assert files.log == "/tmp/servebench-ab12/003-tp2.worker_1_rm.log"
    assert files.exit == "/tmp/servebench-ab12/003-tp2.worker_1_rm.exit"
    assert control_dir_for("ab12cd34").name == "sb-ssh-ab12cd34" and len(str(control_dir_for("ab12cd34"))) < 60


def test_parse_outputs():
    assert parse_started("123 456\n") == (123, 456)
    assert parse_status("alive\n") == (True, None)
    assert parse_status("exit 7\n") == (False, 7) and parse_status("gone") == (False, None)
    for bad in ("", "123", "x y"):
        with pytest.raises(ValueError):
            parse_started(bad)


def test_start_and_status_scripts_here(tmp_path):
    """The scripts are plain sh: run here, they start, record and report the way they do on a node."""
    run_dir = str(tmp_path / "run")
    files = remote_files(run_dir, 1, "p.log")
    out = subprocess.run(["sh", "-c", start_script(run_dir, files, ["sh", "-c", "echo out $0; exit 3", "x y"])],
                         capture_output=True, text=True, timeout=TIMEOUT_S)
    pid, ticks = parse_started(out.stdout)
    stat = node_tools._stat(pid)
    # the session leader: its PID is the group id (if it is still there: a PID already reused by another
    # process has other start ticks)
    assert stat is None or stat[3] != ticks or stat[2] == pid

    def status() -> tuple[bool, int | None]:
        return parse_status(subprocess.run(["sh", "-c", STATUS_SCRIPT, "sh", str(pid), str(ticks), files.exit],
                                           capture_output=True, text=True).stdout)
    wait_until(lambda: not status()[0], "the short process to end")
    assert status() == (False, 3) and Path(files.log).read_text() == "out x y\n"
    assert oct(Path(run_dir).stat().st_mode)[-3:] == "700"
    assert parse_status(subprocess.run(["sh", "-c", STATUS_SCRIPT, "sh", str(os.getpid()), "1", files.exit + "x"],
                                       capture_output=True, text=True).stdout) == (False, None)  # reused PID


def test_a_process_that_ends_at_once_is_started_and_its_exit_read(tmp_path):
    """A command that exits before the start script reads its /proc entry (the shell may have reaped
    it already) still gives a PID and start ticks, and its status is the exit file's."""
    for attempt in range(20):
        files = remote_files(str(tmp_path / str(attempt)), 1, "p.log")
        out = subprocess.run(["sh", "-c", start_script(str(tmp_path / str(attempt)), files, ["sh", "-c", "exit 3"])],
                             capture_output=True, text=True, timeout=TIMEOUT_S)
        pid, ticks = parse_started(out.stdout)
        wait_until(lambda: Path(files.exit).exists(), "the exit file")
        assert parse_status(subprocess.run(["sh", "-c", STATUS_SCRIPT, "sh", str(pid), str(ticks), files.exit],
                                           capture_output=True, text=True).stdout) == (False, 3)


def test_node_tools_stop_a_tree_here():
    """stop_tree on the host: the group is terminated, a child that left it is killed by PID."""
    script = ("import os, time, sys\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\n    sys.exit()\n"
              "time.sleep(60)\n")
    leader = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        start = node_tools._stat(leader.pid)[3]
        wait_until(lambda: node_tools.descendants(leader.pid, start), "the child to fork")
        known = node_tools.descendants(leader.pid, start)
        child = int(next(iter(known)))
        assert node_tools._stat(child)[2] == child  # it left the group
        assert node_tools.descendants(leader.pid, start + 1) == {}  # another process with that PID: nothing
        result = node_tools.stop_tree(leader.pid, start, known, grace_s=0.5)
        assert result["killed"] == [child] and result["left"] == []
        assert leader.wait(timeout=5) == -signal.SIGTERM and not node_tools._live(child, known[str(child)])
    finally:
        leader.kill()
        leader.wait()


def test_node_tools_find_marked_processes_here():
    """A process carrying a run's mark in its environment is stopped by the run's prefix alone."""
    prefix = f"t{secrets.token_hex(4)}."
    env = os.environ | {node_tools.MARK_VARIABLE: prefix + "3"}
    marked = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        wait_until(lambda: marked.pid in node_tools._marked(node_tools._table(), prefix, prefix=True),
                   "the marked process to appear")
        assert node_tools._marked(node_tools._table(), prefix + "30") == {}
        assert node_tools.stop_marked(prefix, grace_s=2.0) == [marked.pid]
        assert marked.wait(timeout=5) == -signal.SIGTERM
    finally:
        marked.kill()
        marked.wait()


def test_the_warden_stops_the_run_once_its_lease_runs_out_and_leaves_when_the_run_is_released(tmp_path):
    """Called as the provider calls it (its source over stdin): the call returns at once (ssh
    would wait for the pipes of a child that kept them), the run's process lives while the lease
    is renewed, and is stopped with the run's directory once it is not; a released run (its
    directory gone) ends the warden and touches nothing."""
    import json

    from servebench.providers.remote import BOOTSTRAP

    def warden(run_dir: Path, prefix: str) -> int:
        request = json.dumps({"file": "node_tools.py", "call": "start_warden",
                              "kwargs": {"run_dir": str(run_dir), "prefix": prefix, "lease_s": 1, "grace_s": 1}})
        done = subprocess.run([sys.executable, "-c", BOOTSTRAP], input=request + "\n" + Path(node_tools.__file__)
                              .read_text(), capture_output=True, text=True, timeout=10)
        assert done.returncode == 0, done.stderr
        return int(done.stdout)

    def marked(prefix: str) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                env=os.environ | {node_tools.MARK_VARIABLE: prefix + "1"})

    prefix, run_dir = f"t{secrets.token_hex(4)}.", tmp_path / "run"
    process = marked(prefix)
    try:
        warden_pid = warden(run_dir, prefix)
        renewed_until = time.monotonic() + 2.5
        while time.monotonic() < renewed_until:  # more than twice the lease, renewed: nothing happens
            (run_dir / node_tools.LEASE_NAME).touch()
            time.sleep(0.25)
        assert process.poll() is None
        assert process.wait(timeout=15) == -signal.SIGTERM  # not renewed: stopped
        wait_until(lambda: not run_dir.exists() and not _alive(warden_pid), "the warden to clean up and end")
    finally:
        process.kill()
        process.wait()

    prefix, run_dir = f"t{secrets.token_hex(4)}.", tmp_path / "released"
    process = marked(prefix)
    try:
        warden_pid = warden(run_dir, prefix)
        import shutil
        shutil.rmtree(run_dir)  # what release does once it has stopped the run's processes
        wait_until(lambda: not _alive(warden_pid), "the warden to end")
        assert process.poll() is None  # the warden ended without touching anything (and cannot now)
    finally:
        process.kill()
        process.wait()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"
    except (OSError, IndexError):
        return False


# ---------------------------------------------------------------------------- two real hosts


def test_unreachable_host_is_named():
    provider = SshProvider(spec_of({"name": "nowhere", "address": "127.0.0.1", "port": 9, "cpus": [0]},
                                   connect_timeout_s=2))
    try:
        with pytest.raises(SshError, match=r"nowhere \(root@127.0.0.1:9\).*(refused|timed out)"):
            provider.allocate()
    finally:
        provider.release()


SSH_CAMPAIGN = """
name: over-ssh
provider:
  kind: ssh
  hosts:
    - {name: h1, address: 198.18.0.1, cpus: "0-7"}
    - {name: h2, address: 198.18.0.2, cpus: "0-7"}
model: {generate: tiny-llama}
modes: [{name: tp2, tp: 2, executor: ray}]
load: {clients: [1], requests: 4}
"""


def test_an_ssh_campaign_leaves_the_orchestrators_cpus_to_the_load_generator():
    """The nodes are other machines: their CPUs are not this host's, none is taken for the
    generator, and `auto` gives the generator every CPU of the orchestrator."""
    from servebench.campaign.loading import parse_campaign
    from servebench.planning.plan import make_plan

    campaign = parse_campaign(SSH_CAMPAIGN, host_cpus={0, 1})
    assert make_plan(campaign, {0, 1}).client.cpus == [0, 1]
    assert [n.cpus for n in campaign.provider.node_specs()] == [list(range(8))] * 2


def test_the_host_key_is_read_from_known_hosts_as_ssh_keygen_lists_it(tmp_path):
    from servebench.providers.ssh.argv import host_key_argv, host_key_fingerprints

    assert host_key_argv(tmp_path / "kh", "198.18.0.5", 2222)[3] == "[198.18.0.5]:2222"
    assert host_key_argv(tmp_path / "kh", "198.18.0.5", 22)[3] == "198.18.0.5"
    listed = ("# Host 198.18.0.6 found: line 2 \n198.18.0.6 ED25519 SHA256:hjS/blXfpp\n"
              "# Host 198.18.0.6 found: line 3 \n198.18.0.6 ECDSA SHA256:Zm9vYmFy\n")
    assert host_key_fingerprints(listed) == "ECDSA SHA256:Zm9vYmFy, ED25519 SHA256:hjS/blXfpp"
    assert host_key_fingerprints("") is None
