"""docs/your-cluster.md, followed as written: its campaign files (the YAML blocks whose first line is
`# your-cluster: FILE`) and its `servebench` commands.

Without a cluster: every campaign of the page loads, the Slurm fields it uses (qos, constraint) reach
salloc, the page says nothing of the project's history, and its nightly block, run in a copy of
prefect.yaml with a `timedatectl` that answers America/Chicago, declares a deployment that
`servebench deployments serve` schedules in that zone.

On the testbed (root; 2 hosts with sshd and a Slurm controller): each campaign, pointed at the
testbed (partition `testbed`, its slurm.conf, its hosts, key and known hosts; account, QOS and
constraint left out: the testbed's Slurm has no accounting and no node features), goes through
`servebench plan`; then the page's `run`, `query` and `report` commands run in order on the smallest
campaign, a tiny llama.cpp model on one Slurm node, two cells.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import yaml

from servebench.campaign.loading import load_campaign
from servebench.providers.slurm.argv import salloc_argv
from tests.support.your_cluster_doc import (
    MARK,
    PAGE,
    ROOT,
    SMALLEST,
    fenced,
    page_campaigns,
    page_commands,
    shared_model,
)


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


