"""Tests that need real hosts bring up a testbed of their own (servebench/testbed), under a
name of their own, and skip with the reason printed when the host cannot have one."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import subprocess
import sys
from typing import Iterator

import pytest

from servebench.devtools.testbed import Layout, load
from servebench.devtools.testbed.machine import missing_binaries, missing_text

TESTBED_TIMEOUT_S = 60


def no_testbed_reason() -> str | None:
    """Why no testbed can come up here, or None."""
    if os.geteuid() != 0:
        return "the testbed needs root (network and mount namespaces)"
    missing = missing_binaries()
    if shutil.which("ping") is None:
        missing["ping"] = "iputils-ping"
    return missing_text(missing) if missing else None


def run_testbed_cli(*args: str, timeout: float = TESTBED_TIMEOUT_S) -> subprocess.CompletedProcess:
    """`servebench testbed ARGS` as a separate process (as a person would type it)."""
    return subprocess.run([sys.executable, "-m", "servebench.cli.testbed", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def on_the_testbed(test):
    """Marks a test that uses its module's testbed: `testbed`, `root` (which the testbed needs) and
    `e2e` (namespaces, sshd and Slurm are a real component stack: the fast run leaves it out)."""
    return pytest.mark.root(pytest.mark.testbed(test))


@contextlib.contextmanager
def own_testbed(prefix: str, hosts: int, share: tuple[str, ...] = ()) -> Iterator[Layout]:
    """A testbed under a name of its own (another can be up at the same time), taken down
    afterwards whatever happens; skips, saying why, where none can come up. `share`: directories
    every host sees read-only (`testbed up --share`)."""
    reason = no_testbed_reason()
    if reason:
        print(f"skipped: {reason}")
        pytest.skip(reason)
    name = prefix + secrets.token_hex(3)
    try:
        result = run_testbed_cli("up", "--hosts", str(hosts), "--name", name,
                                 *(word for path in share for word in ("--share", path)))
        assert result.returncode == 0, result.stdout + result.stderr
        yield load(name)
    finally:
        down = run_testbed_cli("down", "--name", name)
        print(f"testbed {name} down: {down.stdout}{down.stderr}")


@contextlib.contextmanager
def allocated(provider) -> Iterator:
    """A provider holding its nodes for the test module, released afterwards whatever happens."""
    try:
        provider.allocate()
        yield provider
    finally:
        provider.release()


def node_named(provider, name: str):
    """The provider's node of that name."""
    return next(n for n in provider.nodes() if n.name == name)


def running_on(provider, host: str, pid: int) -> bool:
    """`kill -0` on the node, and not a zombie (the host's PID 1 may not reap orphans)."""
    script = 'kill -0 "$1" 2>/dev/null && ! grep -q "^State:.*Z" "/proc/$1/status"'
    return provider.run(node_named(provider, host), ["sh", "-c", script, "sh", str(pid)]).returncode == 0


def campaign_on(layout: Layout, source, out, **overrides):
    """A shipped testbed campaign pointed at this testbed (`point_campaign`), top-level keys
    replaced by overrides, written to `out`; the provider's `shared_paths` are the directories the
    testbed shares (`own_testbed(share=...)`), when it shares any."""
    import yaml

    from servebench.devtools.testbed import point_campaign

    data = point_campaign(yaml.safe_load(open(source)), layout)
    if layout.shared:
        data["provider"]["shared_paths"] = list(layout.shared)
    data.update(overrides)
    with open(out, "w") as file:
        yaml.safe_dump(data, file, sort_keys=False)
    return out


MARKED_ON_HOST = r"""me=$(readlink /proc/self/ns/net)
for f in $(grep -l SERVEBENCH_PROCESS= /proc/[0-9]*/environ 2>/dev/null); do
  d=${f%/environ}
  [ "$(readlink $d/ns/net 2>/dev/null)" = "$me" ] || continue
  echo "${d#/proc/} $(tr '\0' ' ' < $d/cmdline | cut -c1-120)"
done"""


def marked_processes_on(layout: Layout, host) -> str:
    """Processes a provider started (they carry SERVEBENCH_PROCESS) still running on the host:
    inside its network namespace (there is no PID namespace: /proc shows the whole machine)."""
    from servebench.devtools.testbed import enter_argv

    return subprocess.run([*enter_argv(layout, host), "sh", "-c", MARKED_ON_HOST], capture_output=True, text=True,
                          timeout=60).stdout.strip()


def ssh_provider_yaml(layout: Layout, cpus: tuple[str, ...] = ("0", "0")) -> str:
    """A campaign's `provider:` block for the testbed's first hosts over ssh, one for each of `cpus` (its CPUs)."""
    hosts = "".join(f'    - {{name: {h.name}, address: {h.address}, cpus: "{c}", key: {layout.ssh_key}}}\n'
                    for h, c in zip(layout.hosts, cpus))
    return f"provider:\n  kind: ssh\n  hosts:\n{hosts}  known_hosts: {layout.known_hosts}\n"


def echo_model(directory) -> str:
    """A model directory the test-only echo engine serves (its shape is all it reads)."""
    import json
    from pathlib import Path

    Path(directory).mkdir(parents=True, exist_ok=True)
    (Path(directory) / "config.json").write_text(json.dumps(
        {"vocab_size": 500, "num_attention_heads": 4, "num_hidden_layers": 2}))
    return str(directory)


def on_host(layout: Layout, host, script: str, cpus: str | None = None) -> str:
    """stdout of a shell script run inside the host (its namespaces), not through the provider; on `cpus`
    (taskset's list) when given."""
    from servebench.devtools.testbed import enter_argv

    pinned = ["taskset", "-c", cpus] if cpus else []
    done = subprocess.run([*enter_argv(layout, host), *pinned, "sh", "-c", script], capture_output=True, text=True,
                          timeout=60)
    return done.stdout


IN_HOST_NETNS = r"""me=$(readlink /proc/self/ns/net)
for d in /proc/[0-9]*; do
  [ "$(readlink $d/ns/net 2>/dev/null)" = "$me" ] || continue
  [ "$(cat $d/comm 2>/dev/null)" = "$1" ] && echo "${d#/proc/}"
done"""


def kill_on_host(layout: Layout, host, command_name: str) -> list[int]:
    """SIGKILL every process named `command_name` (its comm) inside the host's network namespace
    (e.g. its sshd: listener and sessions); return their PIDs."""
    from servebench.devtools.testbed import enter_argv

    found = subprocess.run([*enter_argv(layout, host), "sh", "-c", IN_HOST_NETNS, "sh", command_name],
                           capture_output=True, text=True, timeout=60).stdout.split()
    for pid in found:
        subprocess.run(["kill", "-9", pid], check=False)
    return [int(pid) for pid in found]


def own_leftovers() -> list[str]:
    """Processes this test process started that still run: its descendants (a scraper, a load
    generator, an srun; not the session's Prefect server) and ssh masters of a run (`sb-ssh-*`
    control directories)."""
    import psutil

    from tests.support.leaks import running_descendants

    found = [f"{pid} {command[:120]}" for pid, command in running_descendants().items()]
    for process in psutil.process_iter(["cmdline"]):
        command = " ".join(process.info["cmdline"] or [])
        if command.startswith("ssh") and "/sb-ssh-" in command:  # a master titles itself "ssh: <path> [mux]"
            found.append(f"{process.pid} {command[:120]}")
    return found

