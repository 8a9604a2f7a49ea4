"""docs/your-cluster.md, followed as written: its campaign files (the YAML blocks whose first line is
`# your-cluster: FILE`) and its `servebench` commands.

Without a cluster: every campaign of the page loads, the Slurm fields it uses (qos, constraint) reach
salloc, the page says nothing of the project's history, and its nightly block, run in a copy of
prefect.yaml with a `timedatectl` that answers America/Chicago, declares a deployment that
`servebench serve` schedules in that zone.

On the testbed (root; 2 hosts with sshd and a Slurm controller): each campaign, pointed at the
testbed (partition `testbed`, its slurm.conf, its hosts, key and known hosts; account, QOS and
constraint left out: the testbed's Slurm has no accounting and no node features), goes through
`servebench plan`; then the page's `run`, `query` and `report` commands run in order on the smallest
campaign, a tiny llama.cpp model on one Slurm node, two cells.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from servebench.campaign.loading import load_campaign
from servebench.devtools.testbed import Layout
from servebench.providers.slurm.argv import salloc_argv
from tests.support.shared_testbed import shared_testbed
from tests.support.testbed import marked_processes_on, on_the_testbed

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "your-cluster.md"
MARK = re.compile(r"^# your-cluster: (\S+)\n")
SMALLEST = "tiny-slurm.yaml"   # the page's first campaign: one node, one mode, two cells
# an 8B Llama's config.json, for the page's model path (`plan` reads the shape from it)
LLAMA_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 14336, "vocab_size": 128256, "max_position_embeddings": 131072,
            "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "torch_dtype": "bfloat16"}


def fenced(language: str) -> list[str]:
    """The page's fenced blocks of a language, in order (indented ones too)."""
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```", PAGE.read_text(), re.M | re.S)
    return ["".join(line[len(indent):] + "\n" for line in body.splitlines()) for indent, body in found]


def page_campaigns() -> dict[str, str]:
    """File name -> YAML text of the page's marked campaign blocks."""
    return {match.group(1): text for text in fenced("yaml") if (match := MARK.match(text))}


def page_commands() -> list[list[str]]:
    """Every `servebench ...` line of the page's shell blocks, as argv (comments dropped)."""
    commands = []
    for block in fenced("bash"):
        for line in block.splitlines():
            if line.startswith("servebench "):
                commands.append(shlex.split(line, comments=True))
    return commands


def marked_block(mark: str) -> str:
    return next(text for text in fenced("bash") if MARK.match(text) and MARK.match(text).group(1) == mark)


# ---------------------------------------------------------------------------- without a cluster

def test_the_pages_campaigns_load_and_its_slurm_fields_reach_salloc(tmp_path):
    campaigns = page_campaigns()
    assert set(campaigns) == {"tiny-slurm.yaml", "model-slurm.yaml", "model-ssh.yaml"}, campaigns.keys()
    model = shared_model(tmp_path)
    for name, text in campaigns.items():
        data = yaml.safe_load(text)
        if "path" in data["model"]:
            data["model"]["path"] = str(model)
        (tmp_path / name).write_text(yaml.safe_dump(data, sort_keys=False))
        campaign = load_campaign(tmp_path / name)
        if campaign.provider.kind == "slurm":
            argv = salloc_argv(campaign.provider, "servebench-x")
            assert {"--partition=cpu", "--account=myproject", "--qos=normal",
                    "--constraint=sapphirerapids"} <= set(argv), argv
    assert ["servebench", "plan", SMALLEST] in page_commands() and ["servebench", "run", SMALLEST] in page_commands()


def test_the_page_speaks_of_the_users_cluster_not_the_projects_history():
    text = PAGE.read_text()
    assert not re.search(r"\b(issue|seed) \d+", text, re.I), re.search(r"\b(issue|seed) \d+", text, re.I)
    assert "198.18." not in text and "testbed" not in text


def test_the_nightly_block_schedules_the_campaign_in_the_users_time_zone(tmp_path):
    from servebench.flows.serve import nightly_deployments

    block = marked_block("nightly")
    script = "\n".join(line for line in block.splitlines() if not line.startswith("cd "))  # here: tmp_path
    shutil.copy(ROOT / "prefect.yaml", tmp_path / "prefect.yaml")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "timedatectl").write_text("#!/bin/sh\necho America/Chicago\n")
    (fake / "timedatectl").chmod(0o755)
    env = os.environ | {"PATH": f"{fake}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    done = subprocess.run(["bash", "-euc", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "America/Chicago" in done.stdout, done.stdout + done.stderr

    (deployment,) = nightly_deployments(tmp_path / "prefect.yaml", only=["llama-8b-nightly"])
    schedule = deployment.schedules[0].schedule
    assert (schedule.cron, schedule.timezone) == ("0 1 * * *", "America/Chicago")
    assert deployment.parameters["campaign_file"] == f"{tmp_path}/bench/model-slurm.yaml"
    assert len(nightly_deployments(tmp_path / "prefect.yaml")) == len(nightly_deployments()) + 1  # the shipped stay

    # with the wheel there is no prefect.yaml yet: the block makes one
    (tmp_path / "prefect.yaml").unlink()
    done = subprocess.run(["bash", "-euc", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [d.name for d in nightly_deployments(tmp_path / "prefect.yaml")] == ["llama-8b-nightly"]


# ---------------------------------------------------------------------------- on the testbed

def shared_model(directory: Path) -> Path:
    """The page's /shared/models/... directory, here: a config.json of the shape."""
    import json

    model = directory / "shared" / "models" / "Llama-3.1-8B-Instruct"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text(json.dumps(LLAMA_8B))
    return model


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
