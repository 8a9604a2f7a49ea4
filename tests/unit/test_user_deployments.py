"""Nightly runs the user owns: `servebench deployments init` writes a prefect.yaml of the user's own
campaigns in the user's time zone, checked against Prefect's own prefect.yaml model (what `prefect
deploy` validates the file with) and its flow loader; `prefect deploy` itself needs a server and is
not run. Then what `servebench plan` says of the generator's priority and of the site's setup.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from servebench.campaign.deployments import (
    ENTRYPOINT,
    CampaignDeployment,
    Schedule,
    local_timezone,
    prefect_yaml,
)
from servebench.campaign.priority import PriorityFacts, nice_text, nice_verdict
from servebench.cli import main

ROOT = Path(__file__).resolve().parents[2]

CAMPAIGN = """\
name: {name}
description: A tiny generated model on one local node.
provider:
  kind: local
  nodes: [{{name: node0, cpus: "0"}}]
  setup: ["export SB_SITE=lmod", "umask 027"]
  env: {{OMP_WAIT_POLICY: passive}}
engine: {{kind: llamacpp}}
model: {{generate: tiny-llama}}
modes: [{{name: single}}]
load: {{clients: [1], requests: 4, input_len: 16, output_len: 8}}
"""


def campaign_file(directory: Path, name: str) -> Path:
    path = directory / f"{name}.yaml"
    path.write_text(CAMPAIGN.format(name=name))
    return path


# ---------------------------------------------------------------------------- deployments init

def test_init_writes_one_deployment_per_campaign_that_prefect_reads(tmp_path, monkeypatch, capsys):
    from prefect.cli.deploy._models import PrefectYamlModel
    from prefect.flows import load_flow_from_entrypoint
    from prefect.schedules import Cron

    monkeypatch.chdir(tmp_path)
    first, second = campaign_file(tmp_path, "alpha"), campaign_file(tmp_path, "beta")
    code = main(["deployments", "init", str(first), "beta.yaml", "--timezone", "America/Chicago",
                 "--cron", "15 1 * * *", "--warehouse", "bench.duckdb"])
    assert code == 0, capsys.readouterr()
    text = (tmp_path / "prefect.yaml").read_text()
    data = yaml.safe_load(text)
    model = PrefectYamlModel.model_validate(data)    # Prefect's own schema of prefect.yaml
    assert [d.name for d in model.deployments] == ["alpha-nightly", "beta-nightly"]
    for deployment, path in zip(model.deployments, (first, second)):
        assert deployment.entrypoint == ENTRYPOINT
        assert deployment.parameters == {"campaign_file": str(path), "warehouse_path": str(tmp_path / "bench.duckdb")}
        (schedule,) = deployment.schedules or []
        assert (schedule.cron, schedule.timezone, schedule.active) == ("15 1 * * *", "America/Chicago", True)
        Cron(schedule.cron, timezone=schedule.timezone)   # Prefect accepts the cron and the zone
    assert load_flow_from_entrypoint(ENTRYPOINT).name == "campaign-run"   # from any directory: a module path
    assert "Europe/Lisbon" not in text and f"--prefect-file {tmp_path / 'prefect.yaml'}" in text
    assert model.pull == [{"prefect.deployments.steps.set_working_directory": {"directory": str(tmp_path)}}]
    from servebench.flows.serve import nightly_deployments  # what `servebench deployments serve` serves

    served = {d.name: d for d in nightly_deployments(tmp_path / "prefect.yaml")}
    assert sorted(served) == ["alpha-nightly", "beta-nightly"]
    assert served["beta-nightly"].schedules[0].schedule.timezone == "America/Chicago"
    assert served["beta-nightly"].parameters["campaign_file"] == str(second)


def test_init_refuses_to_replace_a_file_without_force_and_checks_its_arguments(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    campaign_file(tmp_path, "alpha")
    (tmp_path / "prefect.yaml").write_text("deployments: []\n")
    assert main(["deployments", "init", "alpha.yaml", "--timezone", "UTC"]) == 1
    assert "exists: give --force" in capsys.readouterr().err
    assert (tmp_path / "prefect.yaml").read_text() == "deployments: []\n"
    assert main(["deployments", "init", "alpha.yaml", "--timezone", "UTC", "--force"]) == 0
    assert "alpha-nightly" in (tmp_path / "prefect.yaml").read_text()
    assert main(["deployments", "init", "alpha.yaml", "--out", "x.yaml", "--timezone", "Mars/Olympus"]) == 2
    assert main(["deployments", "init", "alpha.yaml", "--out", "x.yaml", "--cron", "0 2 * *"]) == 2
    assert not (tmp_path / "x.yaml").exists()


def test_the_default_zone_is_the_machines_never_the_projects(tmp_path):
    link = tmp_path / "localtime"
    link.symlink_to("/usr/share/zoneinfo/America/Chicago")
    nowhere = tmp_path / "no-such-file"
    assert local_timezone({}, localtime=link, timezone_file=nowhere) == "America/Chicago"
    assert local_timezone({"TZ": "Asia/Tokyo"}, localtime=link, timezone_file=nowhere) == "Asia/Tokyo"
    assert local_timezone({"TZ": ":/usr/share/zoneinfo/Asia/Tokyo"}, localtime=nowhere,
                          timezone_file=nowhere) == "Asia/Tokyo"
    (tmp_path / "timezone").write_text("Pacific/Auckland\n")
    assert local_timezone({}, localtime=nowhere, timezone_file=tmp_path / "timezone") == "Pacific/Auckland"
    assert local_timezone({"TZ": "EST5EDT,M3.2.0,M11.1.0"}, localtime=nowhere, timezone_file=nowhere) == "UTC"
    text = prefect_yaml([CampaignDeployment("a", Path("/b/a.yaml"))], Schedule(timezone=local_timezone({})))
    assert "Europe/Lisbon" not in text
    with pytest.raises(ValueError, match="same campaign name"):
        prefect_yaml([CampaignDeployment("a", Path("/x.yaml")), CampaignDeployment("a", Path("/y.yaml"))],
                     Schedule(timezone="UTC"))


def test_the_projects_own_prefect_yaml_stays_the_projects():
    data = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    assert all(d["entrypoint"].startswith("flows/") for d in data["deployments"])


# ---------------------------------------------------------------------------- the generator's priority

USER = PriorityFacts(current=0, euid=1000, cap_sys_nice=False, rlimit_nice=0)


@pytest.mark.parametrize(("facts", "wanted", "value", "said"), [
    (USER, -10, 0, "needs root, CAP_SYS_NICE or RLIMIT_NICE >= 30; this user has RLIMIT_NICE 0"),
    (USER, 5, 5, None),                                                      # lowering priority: anyone
    (PriorityFacts(current=0, euid=0, cap_sys_nice=False, rlimit_nice=0), -10, -10, None),
    (PriorityFacts(current=0, euid=1000, cap_sys_nice=True, rlimit_nice=0), -10, -10, None),
    (PriorityFacts(current=0, euid=1000, cap_sys_nice=False, rlimit_nice=30), -10, -10, None),
    (PriorityFacts(current=0, euid=1000, cap_sys_nice=False, rlimit_nice=29), -10, 0, "RLIMIT_NICE 29"),
    (PriorityFacts(current=0, euid=1000, cap_sys_nice=False, rlimit_nice=None), -10, -10, None),
])
def test_nice_only_where_the_user_may_raise_priority(facts, wanted, value, said):
    got, why = nice_verdict(wanted, facts)
    assert got == value and (why is None if said is None else said in why), why


def test_plan_says_the_generator_runs_at_its_current_nice_and_prints_the_setup_once(tmp_path, monkeypatch, capsys):
    import servebench.cli.plan as plan_module

    monkeypatch.setattr(plan_module, "this_process", lambda: USER)
    assert main(["plan", str(campaign_file(tmp_path, "alpha"))]) == 0
    out = capsys.readouterr().out
    assert "runs at its current nice 0, not -10: nice -10 needs root" in out and "nice -10," not in out
    assert out.count("setup    export SB_SITE=lmod") == 1 and out.count("setup    umask 027") == 1
    assert "env      OMP_WAIT_POLICY (values not printed" in out and "passive" not in out
    assert nice_text(-10, USER, client_node="node3").startswith("nice -10 on node3")
