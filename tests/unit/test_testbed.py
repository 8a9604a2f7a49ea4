"""The testbed: names and files computed from the name alone, then 3 real hosts
brought up with `servebench testbed up`: reachability inside the testbed and no route out,
private /dev/shm and /tmp, sshd on each host, a Slurm cluster across them (sinfo, srun,
salloc + srun --overlap + scancel, sbatch), and `down` leaving nothing behind.

The real-hosts tests need root and the Debian packages slurm-wlm, munge, openssh-server,
openssh-client and iputils-ping; without them they are skipped with the reason.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from servebench.cli.testbed import add_testbed_parser
from servebench.devtools.testbed import configs
from servebench.devtools.testbed.layout import (
    BENCHMARK_RANGE,
    Layout,
    check_name,
    choose_slot,
    hidden_on_hosts,
    make_layout,
    preferred_slot,
    slot_of,
    slot_subnet,
)
from servebench.devtools.testbed.machine import (
    TestbedError,
    missing_binaries,
    preflight,
)

# ---------------------------------------------------------------------------- from the name alone

def test_names_fit_interface_names_and_are_checked():
    longest = make_layout("abcdefghij", 64, 2, 511)
    assert len(longest.machine_link) <= 15
    for bad in ("", "1ab", "Ab", "a-b", "abcdefghijk", "a b"):
        with pytest.raises(ValueError):
            check_name(bad)
    with pytest.raises(ValueError):
        make_layout("sb", 0, 2, 0)


def test_two_names_share_nothing():
    a, b = make_layout("ci1", 3, 2, preferred_slot("ci1")), make_layout("ci2", 3, 2, preferred_slot("ci2"))
    assert a.subnet != b.subnet and a.slurmctld_port != b.slurmctld_port
    assert not set(a.netns_names) & set(b.netns_names)
    assert a.machine_link != b.machine_link and a.state_dir != b.state_dir and a.run_dir != b.run_dir
    for layout in (a, b):
        assert layout.subnet.subnet_of(BENCHMARK_RANGE)
        assert [h.address for h in layout.hosts] == [str(layout.subnet.network_address + i) for i in (1, 2, 3)]
        assert slot_of(layout.machine_address) == layout.slot


def test_the_state_must_be_visible_on_the_hosts():
    assert all(hidden_on_hosts(Path(p)) for p in ("/tmp/x", "/run/servebench", "/root", "/dev/shm"))
    assert not hidden_on_hosts(Path("/var/tmp/servebench-testbed-sb")) and not hidden_on_hosts(Path("/tmpx"))


def test_a_taken_slot_moves_to_the_next_free_one():
    slot = preferred_slot("sb")
    assert choose_slot("sb", set()) == slot
    assert choose_slot("sb", {slot}) == (slot + 1) % 512
    assert slot_subnet(511).broadcast_address == BENCHMARK_RANGE.broadcast_address
    assert slot_of("10.0.0.1") is None


def test_slurm_conf_has_one_node_per_host_and_no_cgroup_plugin():
    layout = make_layout("sb", 3, 4, 7)
    text = configs.slurm_conf(layout)
    assert f"SlurmctldHost=h1({layout.hosts[0].address})" in text
    for line in ("ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SlurmdParameters=config_overrides",
                 "ClusterName=sb", f"SlurmctldPort={layout.slurmctld_port}",
                 f"AuthInfo=socket={layout.munge_socket}"):
        assert line in text.splitlines()
    nodes = [line for line in text.splitlines() if line.startswith("NodeName=")]
    assert nodes == [f"NodeName=h{i} NodeAddr={layout.hosts[i - 1].address} NodeHostname=h{i} CPUs=4 State=UNKNOWN"
                     for i in (1, 2, 3)]
    assert "cgroup" not in text


def test_host_files_and_commands():
    layout = make_layout("sb", 2, 2, 7)
    h2 = layout.hosts[1]
    assert f"ListenAddress {h2.address}:22" in configs.sshd_config(layout, h2)
    script = configs.host_setup_script(layout, h2)
    for mount in ("/dev/shm", "/tmp", "/run"):
        assert f"tmpfs {mount}\n" in script
    assert "hostname h2" in script and f"ip addr add {h2.address}/24 dev eth0" in script
    assert "default" not in script  # no route out
    assert configs.enter_argv(layout, h2)[:2] == ["nsenter", "--net=/run/netns/sb-h2"]
    assert f"{h2.address}\th2" in configs.hosts_file(layout)


def test_a_shared_directory_is_shown_read_only_on_every_host_and_kept_in_the_state(tmp_path):
    """`testbed up --share DIR`: a cluster's NFS home, read-only at the same path on each host."""
    outside = tmp_path / "builds"
    outside.mkdir()
    layout = make_layout("sb", 2, 2, 7, shared=(str(outside),))
    script = configs.host_setup_script(layout, layout.hosts[0])
    assert f"mount --bind {outside} {outside}\nmount -o remount,bind,ro {outside}\n" in script
    assert Layout.from_json(layout.to_json()).shared == (str(outside),)
    home = layout.home_dir(layout.hosts[0])
    assert configs.software_binds(home, ("/root/.cache/x",))[-3:] == [
        f"mkdir -p {home}/.cache/x", f"mount --bind /root/.cache/x {home}/.cache/x",
        f"mount -o remount,bind,ro {home}/.cache/x"]
    with pytest.raises(ValueError, match="--share relative: give an existing directory by its absolute path"):
        make_layout("sb", 2, 2, 7, shared=("relative",))
    parser = argparse.ArgumentParser()
    add_testbed_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["testbed", "up", "--hosts", "1", "--share", "/a", "--share", "/b"])
    assert args.share == ["/a", "/b"]


def test_a_missing_binary_names_its_package(monkeypatch):
    monkeypatch.setitem(configs.REQUIRED_BINARIES, "no-such-daemon-xyz", "xyz-daemon")
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert missing_binaries()["no-such-daemon-xyz"] == "xyz-daemon"
    with pytest.raises(TestbedError, match="apt-get install .*xyz-daemon"):
        preflight()


def test_cli_parses():
    parser = argparse.ArgumentParser()
    add_testbed_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["testbed", "up", "--hosts", "3", "--name", "ci7"])
    assert (args.action, args.hosts, args.name) == ("up", 3, "ci7")
    args = parser.parse_args(["testbed", "exec", "h2", "--", "sinfo", "-N"])
    assert (args.host, [a for a in args.argv if a != "--"]) == ("h2", ["sinfo", "-N"])


# ---------------------------------------------------------------------------- three real hosts


def test_a_shipped_testbed_campaign_is_pointed_at_another_testbed():
    import yaml

    from servebench.devtools.testbed import point_campaign
    from servebench.devtools.testbed.layout import make_layout

    layout = make_layout("pt1", hosts=2, cpus=2, slot=7)
    root = Path(__file__).parents[2] / "campaigns"
    network = point_campaign(yaml.safe_load((root / "network-testbed.yaml").read_text()), layout)
    hosts = network["provider"]["hosts"]
    assert [h["address"] for h in hosts] == [h.address for h in layout.hosts]
    assert {h["key"] for h in hosts} == {str(layout.ssh_key)}
    assert network["provider"]["known_hosts"] == str(layout.known_hosts) and network["network"]["testbed"] == "pt1"
    slurm = point_campaign(yaml.safe_load((root / "slurm-testbed.yaml").read_text()), layout)
    assert slurm["provider"]["slurm_conf"] == str(layout.slurm_conf)
    assert slurm["provider"]["partition"] == layout.partition
