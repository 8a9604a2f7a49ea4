"""The testbed: names and files computed from the name alone, then 3 real hosts brought up with `servebench
testbed up`: reachability inside the testbed and no route out, private /dev/shm and /tmp, sshd on each host, a
Slurm cluster across them (sinfo, srun, salloc + srun --overlap + scancel, sbatch), and `down` leaving nothing
behind.

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_testbed.py."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from servebench.devtools.testbed import configs
from servebench.devtools.testbed.layout import (
    state_dir_for,
)
from servebench.devtools.testbed.machine import (
    Daemon,
    mounts_under,
    namespace_ids,
    read_state,
)
from tests.support.testbed import no_testbed_reason, on_the_testbed, run_testbed_cli
from tests.support.waiting import wait_until

UP_LIMIT_S = 30.0  # "well under a minute"


TIMEOUT_S = 60


@pytest.fixture(scope="module")
def testbed():
    reason = no_testbed_reason()
    if reason:
        print(f"skipped: {reason}")
        pytest.skip(reason)
    name = "t" + secrets.token_hex(3)  # its own name: another run's testbed can be up at the same time
    started = time.monotonic()
    result = run_testbed_cli("up", "--hosts", "3", "--name", name)
    seconds = time.monotonic() - started
    print(f"testbed {name} up in {seconds:.2f} s\n{result.stdout}{result.stderr}")
    try:
        assert result.returncode == 0, result.stdout + result.stderr
        assert seconds < UP_LIMIT_S
        layout, daemons, _ = read_state(state_dir_for(name))
        assert layout is not None
        yield layout, daemons
    finally:
        run_testbed_cli("down", "--name", name)  # again after test_down_leaves_nothing: finds nothing, removes nothing


def on(layout, host, *command: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """A command on a host, in its namespaces."""
    return subprocess.run(configs.enter_argv(layout, layout.host(host)) + list(command), capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL, env=slurm_env(layout))


def slurm_env(layout) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    return env | configs.slurm_client_env(layout)


def machine(layout, *command: str, timeout: float = TIMEOUT_S) -> subprocess.CompletedProcess:
    """A command on the machine itself, with the testbed's SLURM_CONF."""
    return subprocess.run(list(command), capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, env=slurm_env(layout))


@on_the_testbed
def test_hosts_reach_each_other_and_no_route_out(testbed):
    layout, _ = testbed
    for host in layout.hosts:
        for other in layout.hosts:
            if other is not host:
                ping = on(layout, host.name, "ping", "-c", "1", "-W", "1", other.address)
                assert ping.returncode == 0, f"{host.name} -> {other.name}: {ping.stdout}{ping.stderr}"
        routes = on(layout, host.name, "ip", "-4", "route", "show").stdout
        assert "default" not in routes and routes.split()[0] == str(layout.subnet)
        out = on(layout, host.name, "ip", "route", "get", "192.0.2.1")  # decided locally: nothing is sent
        assert out.returncode != 0 and "unreachable" in out.stderr.lower()
    assert machine(layout, "ping", "-c", "1", "-W", "1", layout.hosts[2].address).returncode == 0


@on_the_testbed
def test_private_shm_tmp_and_hostname(testbed):
    layout, _ = testbed
    marker = f"servebench-testbed-{secrets.token_hex(4)}"
    try:
        assert on(layout, "h1", "touch", f"/dev/shm/{marker}", f"/tmp/{marker}").returncode == 0
        assert marker in on(layout, "h1", "ls", "/dev/shm", "/tmp").stdout
        assert marker not in on(layout, "h2", "ls", "/dev/shm", "/tmp").stdout
        assert not Path("/dev/shm", marker).exists() and not Path("/tmp", marker).exists()
    finally:
        on(layout, "h1", "rm", "-f", f"/dev/shm/{marker}", f"/tmp/{marker}")
    for host in layout.hosts:
        assert on(layout, host.name, "hostname").stdout.strip() == host.name
        assert on(layout, host.name, "test", "-d", "/root/.cache/servebench").returncode == 0
    assert run_testbed_cli("exec", "--name", layout.name, "h3", "--", "hostname").stdout.strip() == "h3"


@on_the_testbed
def test_ssh_to_each_host(testbed):
    layout, _ = testbed
    for host in layout.hosts:
        result = machine(layout, "ssh", "-i", str(layout.ssh_key), "-o", "StrictHostKeyChecking=no",
                         "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "LogLevel=ERROR",
                         f"root@{host.address}", "hostname")
        assert (result.returncode, result.stdout.strip()) == (0, host.name), result.stderr
    # the testbed's client config: names, its known host keys, multiplexing; Slurm inside the host
    result = machine(layout, *configs.ssh_argv(layout, layout.host("h2"), ["sh", "-c", "hostname; sinfo -h -o %D"]))
    assert result.stdout.split() == ["h2", "3"], result.stderr


@on_the_testbed
def test_slurm_nodes_idle_from_the_machine_and_a_host(testbed):
    layout, _ = testbed
    states = machine(layout, "sinfo", "-h", "-N", "-o", "%N %T").stdout.split("\n")
    assert sorted(line for line in states if line) == ["h1 idle", "h2 idle", "h3 idle"]
    inside = on(layout, "h3", "sinfo", "-h", "-o", "%D %T")
    assert inside.stdout.split() == ["3", "idle"], inside.stderr


@on_the_testbed
def test_srun_on_every_host(testbed):
    layout, _ = testbed
    result = machine(layout, "srun", "-N3", "hostname")
    assert sorted(result.stdout.split()) == ["h1", "h2", "h3"], result.stderr
    result = on(layout, "h2", "srun", "-N3", "hostname")
    assert sorted(result.stdout.split()) == ["h1", "h2", "h3"], result.stderr


@on_the_testbed
def test_allocation_overlap_step_and_cancel(testbed):
    layout, _ = testbed
    granted = machine(layout, "salloc", "--no-shell", "-N2", "-J", "overlap-test")
    match = re.search(r"Granted job allocation (\d+)", granted.stderr)
    assert granted.returncode == 0 and match, granted.stderr
    job = match.group(1)
    try:
        step = machine(layout, "srun", "--overlap", "--jobid", job, "-N2", "hostname")
        assert sorted(step.stdout.split()) == ["h1", "h2"], step.stderr
    finally:
        assert machine(layout, "scancel", job).returncode == 0
    wait_until(lambda: machine(layout, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() in ("", "CANCELLED"),
               "the cancelled job to go", timeout_s=20, poll_s=0.2)


@on_the_testbed
def test_batch_job(testbed):
    layout, _ = testbed
    out = layout.state_dir / "batch.out"
    # the job runs in a directory every host sees (this checkout may sit under the machine's /tmp, which the
    # hosts do not share)
    submitted = machine(layout, "sbatch", "--parsable", "-N3", "--chdir", str(layout.state_dir), "-o", str(out),
                        "--wrap", "srun hostname")
    assert submitted.returncode == 0, submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    wait_until(lambda: machine(layout, "squeue", "-h", "-j", job, "-o", "%T").stdout.strip() in ("", "COMPLETED"),
               "the batch job to finish", timeout_s=30, poll_s=0.2)
    assert sorted(out.read_text().split()) == ["h1", "h2", "h3"]


@on_the_testbed
def test_up_refuses_a_testbed_that_exists(testbed):
    layout, _ = testbed
    result = run_testbed_cli("up", "--hosts", "2", "--name", layout.name)
    assert result.returncode == 1 and "already exists" in result.stderr
    status = run_testbed_cli("status", "--name", layout.name)
    assert status.returncode == 0 and "DEAD" not in status.stdout
    assert all(h.address in status.stdout for h in layout.hosts)


@on_the_testbed
def test_down_leaves_nothing(testbed):
    """Last: takes the module's testbed down."""
    layout, daemons = testbed
    ids = namespace_ids(layout)
    assert len(ids) == 4 * len(layout.hosts) + 1  # net, mnt, uts, ipc per host; the switch's net
    started = time.monotonic()
    result = run_testbed_cli("down", "--name", layout.name)
    seconds = time.monotonic() - started
    print(f"testbed {layout.name} down in {seconds:.2f} s: {result.stdout}{result.stderr}")
    assert result.returncode == 0 and "nothing left" in result.stdout, result.stderr
    netns = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    assert [ns for ns in netns if ns.startswith(layout.name + "-")] == []
    assert not [link for link in os.listdir("/sys/class/net") if link.startswith(layout.name + "-")]
    assert [d for d in daemons if Daemon(**d.__dict__).alive()] == []
    assert not_inside(ids) == []
    assert mounts_under(layout.state_dir) == []
    assert not layout.state_dir.exists() and not layout.run_dir.exists()
    assert [p.pid for p in psutil.process_iter(["cmdline", "status"]) if p.info["status"] != psutil.STATUS_ZOMBIE
            and str(layout.state_dir) in " ".join(p.info["cmdline"] or [])] == []


def not_inside(ids: set[str]) -> list[int]:
    """PIDs of live processes still in one of these namespaces."""
    found = []
    for proc in psutil.process_iter(["status"]):
        if proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        for kind in ("net", "mnt", "uts", "ipc"):
            try:
                if os.readlink(f"/proc/{proc.pid}/ns/{kind}") in ids:
                    found.append(proc.pid)
                    break
            except OSError:
                break
    return found
