"""A Slurm campaign as one batch job (`servebench submit`, servebench/campaign/batch.py): the script asks
for what salloc would, runs the site's setup, then execs the orchestrator so Slurm's warning before the
time limit reaches it; the job id and state read from sbatch and scontrol."""

import pytest

from servebench.campaign.loading import load_campaign
from servebench.cli import main
from servebench.paths import home
from servebench.providers.slurm.batch import BatchJob, parse_job_id, parse_job_state, sbatch_script, slurm_seconds

SLURM = home() / "campaigns" / "slurm-testbed.yaml"


def job(**fields) -> BatchJob:
    campaign = load_campaign(SLURM)
    provider = campaign.provider.model_copy(update=fields)
    return BatchJob(campaign="c", provider=provider, command=["/venv/bin/python", "-m", "servebench", "run",
                    "/w/c.yaml"], workdir="/w", log="/w/runs/slurm-c-%j.out", time_limit="01:00:00",
                    setup=["module load python/3.11"])


def test_the_script_asks_for_the_campaigns_nodes_and_execs_the_run_after_the_setup():
    script = sbatch_script(job(account="proj1", qos="short", constraint="a64fx", exclusive=True))
    lines = script.splitlines()
    assert lines[0] == "#!/bin/bash"
    for option in ("--nodes=3", "--ntasks-per-node=1", "--cpus-per-task=1", "--time=01:00:00", "--account=proj1",
                   "--qos=short", "--constraint=a64fx", "--exclusive", "--partition=testbed",
                   "--output=/w/runs/slurm-c-%j.out", "--signal=B:TERM@300"):
        assert f"#SBATCH {option}" in lines, option
    assert lines.index("module load python/3.11") < lines.index("cd /w") < lines.index(
        "exec /venv/bin/python -m servebench run /w/c.yaml")


def test_a_short_job_is_warned_a_tenth_of_its_limit_before_it_ends():
    assert job().model_copy(update={"time_limit": "20"}).signal_lead_s == 120
    assert job().model_copy(update={"time_limit": "5"}).signal_lead_s == 60
    assert job().model_copy(update={"time_limit": "1-00:00:00"}).signal_lead_s == 300


@pytest.mark.parametrize("limit, seconds", [("30", 1800), ("10:30", 630), ("01:30:00", 5400), ("2-0", 172800),
                                            ("1-02:03", 93780), ("1-00:00:05", 86405)])
def test_slurm_time_limits_are_read_in_every_form_slurm_takes(limit, seconds):
    assert slurm_seconds(limit) == seconds


def test_a_time_limit_slurm_would_refuse_is_named():
    with pytest.raises(ValueError, match="'half an hour' is not a Slurm time limit"):
        slurm_seconds("half an hour")


def test_the_job_id_and_the_job_state_are_read_from_slurms_own_output():
    assert parse_job_id("4242\n") == 4242 and parse_job_id("17;cluster2") == 17
    with pytest.raises(ValueError, match="no job id"):
        parse_job_id("sbatch: error: Batch job submission failed")
    line = "JobId=12 JobName=servebench-c UserId=sb(1001) JobState=TIMEOUT Reason=TimeLimit ExitCode=0:15 Nodes=3"
    state = parse_job_state(line)
    assert state is not None and (state.state, state.exit_code, state.ended, state.completed) == (
        "TIMEOUT", "0:15", True, False)
    running = parse_job_state("JobId=12 JobState=RUNNING ExitCode=0:0")
    assert running is not None and not running.ended
    assert parse_job_state("") is None


def test_submit_refuses_a_campaign_that_is_not_slurms_and_prints_the_script_on_dry_run(capsys):
    assert main(["submit", "smoke", "--dry-run"]) == 2
    assert "which has no batch jobs" in capsys.readouterr().err
    assert main(["submit", str(SLURM), "--dry-run", "--time", "45"]) == 0
    script = capsys.readouterr().out
    assert "#SBATCH --time=45" in script and f"run {SLURM}" in script and "--warehouse /" in script
