"""docs/your-cluster.md, followed as written: its campaign files (the YAML blocks whose first line is `# your-
cluster: FILE`) and its `servebench` commands.

Here the tests that start real components (servers, the testbed, qemu, a browser); the logic's own are in
tests/unit/test_your_cluster_doc.py."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from servebench.devtools.testbed import Layout
from tests.support.shared_testbed import shared_testbed
from tests.support.testbed import marked_processes_on, on_the_testbed
from tests.support.your_cluster_doc import (
    SMALLEST,
    page_campaigns,
    page_commands,
    shared_model,
)


def on_testbed(text: str, layout: Layout, directory: Path) -> dict:
    """A campaign of the page pointed at the testbed."""
    data = yaml.safe_load(text)
    provider = data["provider"]
    if provider.get("shared_paths"):
        provider["shared_paths"] = [str(directory / "shared")]
    if "path" in data["model"]:
        data["model"]["path"] = str(shared_model(directory))
    if provider["kind"] == "slurm":
        for field in ("account", "qos", "constraint"):   # no accounting, QOS or node features on the testbed
            provider.pop(field, None)
        provider |= {"partition": layout.partition, "slurm_conf": str(layout.slurm_conf), "cpus_per_node": 1}
    else:
        assert len(provider["hosts"]) <= len(layout.hosts)
        for host, testbed_host in zip(provider["hosts"], layout.hosts):
            host |= {"address": testbed_host.address, "user": "root", "key": str(layout.ssh_key), "cpus": "0"}
        provider["known_hosts"] = str(layout.known_hosts)
    return data


@pytest.fixture(scope="module")
def testbed(request) -> Layout:
    """The session's testbed of 2 hosts, shared with the provider tests (tests/support/shared_testbed.py)."""
    return shared_testbed(request, hosts=2)


@on_the_testbed
@pytest.mark.llamacpp
def test_the_pages_commands_on_the_testbed(testbed, tmp_path):
    from tests.support.prefect_session import session_api_url

    layout = testbed
    for name, text in page_campaigns().items():
        data = on_testbed(text, layout, tmp_path)
        if name == SMALLEST:
            # the testbed's hosts share one machine's two cores: the server has CPU 0 (its node's first), the
            # generator CPU 1; timing verdicts depend on the machine, this test is about the page's path
            data["load"]["client"] = {"cpus": "1"}
            data["validity"] = {"on_invalid": "warn"}
        (tmp_path / name).write_text(yaml.safe_dump(data, sort_keys=False))
    env = os.environ | {"SERVEBENCH_RUNS": str(tmp_path / "runs"),
                        "SERVEBENCH_WAREHOUSE": str(tmp_path / "runs" / "servebench.duckdb"),
                        "PREFECT_API_URL": session_api_url()}   # not a temporary Prefect server of its own

    def servebench(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "servebench", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
        print(f"servebench {shlex.join(args)}: exit {done.returncode}, {time.monotonic() - started:.1f} s")
        return done

    # `servebench plan` on every campaign of the page (it asks no cluster; the files must pass)
    for name in page_campaigns():
        done = servebench("plan", name)
        assert done.returncode == 0, (name, done.stdout[-2000:], done.stderr[-2000:])
        assert "cells" in done.stdout and ("srun --overlap" in done.stdout or "ssh -F" in done.stdout), name

    # the page's run, query and report commands, in its order, on the smallest campaign
    ran = []
    for argv in page_commands():
        command, rest = argv[1], argv[2:]
        if command == "run" and rest == [SMALLEST]:
            done = servebench(command, *rest, timeout=600)
            assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
        elif command in ("query", "report"):
            done = servebench(command, *rest)
            assert done.returncode == 0, (argv, done.stdout[-2000:], done.stderr[-2000:])
        else:
            continue
        ran.append((command, done.stdout))
    assert [command for command, _ in ran] == ["run", "query", "query", "report"], ran

    cells = ran[1][1]
    assert "single.c1.r0" in cells and "single.c2.r0" in cells and cells.count("completed") == 2, cells
    assert "tiny-slurm" in ran[2][1], ran[2][1]
    assert list((tmp_path / "runs").glob("*/report.html")), "report.html in the run's directory"
    for host in layout.hosts:   # the run released its node: nothing of it left
        assert marked_processes_on(layout, host) == "", host.name
