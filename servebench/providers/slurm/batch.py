"""A campaign as one Slurm batch job (`servebench submit`, the provider's BATCH_JOBS): the sbatch script
whose job holds the campaign's nodes and runs the orchestrator on the first of them, where the run uses the
job's own allocation (no second one), the job id sbatch gives back and its state. Pure: the provider runs
the commands.

The job asks what the campaign's `provider:` block asks of salloc (nodes, CPUs per node, partition,
account, QOS, constraint, node list, exclusive), for the campaign's `time_limit` unless `--time` says
otherwise. Slurm signals the orchestrator `SIGNAL_LEAD_S` before the limit (`--signal=B:TERM@...`, to
the batch shell, which `exec`s servebench): it stops as after Ctrl-C, every cell measured is landed,
and `servebench submit --resume RUN` finishes the run in a new job, each cell measured once.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from pydantic import BaseModel

from servebench.providers.base import BatchRequest, BatchState
from servebench.providers.slurm.argv import parse_record
from servebench.providers.slurm.spec import SlurmProviderSpec

SIGNAL_LEAD_S = 300   # before the time limit: the cell under way and the release fit in it on most campaigns
SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
JOB_ID = re.compile(r"^\s*(\d+)(;\S+)?\s*$")   # sbatch --parsable: `JOB` or `JOB;CLUSTER`


class BatchJob(BaseModel):
    """What the sbatch script of one campaign's run (or resume) holds."""

    campaign: str
    provider: SlurmProviderSpec
    command: list[str]          # the orchestrator's command in the job: servebench run|resume ...
    workdir: Path               # where the command runs (relative paths of the campaign resolve here)
    log: Path                   # the job's output, %j for its id
    time_limit: str             # --time
    setup: list[str] = []       # the campaign's `provider.setup` lines (module load ...), run first

    @property
    def signal_lead_s(self) -> int:
        """`SIGNAL_LEAD_S`, or a tenth of a short limit (at least a minute): a 20-minute job is warned
        2 minutes before its end, not 5."""
        return max(60, min(SIGNAL_LEAD_S, slurm_seconds(self.time_limit) // 10))


def slurm_seconds(limit: str) -> int:
    """A Slurm time limit in seconds: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S` (ValueError otherwise)."""
    found = SLURM_TIME.match(limit.strip())
    if found is None:
        raise ValueError(f"{limit!r} is not a Slurm time limit (minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]])")
    days, first, second, third = (int(part) if part else None for part in found.groups())
    if days is not None:   # D-H, D-H:M, D-H:M:S
        return ((days * 24 + (first or 0)) * 60 + (second or 0)) * 60 + (third or 0)
    if third is not None:
        return ((first or 0) * 60 + (second or 0)) * 60 + third
    if second is not None:
        return (first or 0) * 60 + second
    return (first or 0) * 60


def batch_job(spec: SlurmProviderSpec, request: BatchRequest) -> BatchJob:
    """The job of a request: the campaign's nodes, its time limit unless the request names one, its setup."""
    return BatchJob(campaign=request.campaign, provider=spec, command=request.command, workdir=request.workdir,
                    log=request.log, time_limit=request.time_limit or spec.time_limit, setup=list(spec.setup))


def sbatch_options(job: BatchJob) -> list[str]:
    """The #SBATCH options: the nodes as salloc would ask for them, the time, the log and the signal."""
    spec = job.provider
    options = [f"--job-name=servebench-{job.campaign}", f"--nodes={spec.nodes}", "--ntasks-per-node=1",
               f"--cpus-per-task={spec.cpus_per_node}", f"--time={job.time_limit}", f"--output={job.log}",
               f"--signal=B:TERM@{job.signal_lead_s}"]
    for name, value in (("partition", spec.partition), ("account", spec.account), ("qos", spec.qos),
                        ("constraint", spec.constraint)):
        if value:
            options.append(f"--{name}={value}")
    if spec.nodelist:
        options.append(f"--nodelist={','.join(spec.nodelist)}")
    if spec.exclusive:
        options.append("--exclusive")
    return options + [option for option in spec.salloc_args if option.startswith("--")]


def sbatch_script(job: BatchJob) -> str:
    """The batch script: options, the site's setup lines, then `exec` of the orchestrator's command, so
    Slurm's signal before the time limit reaches servebench itself."""
    lines = ["#!/bin/bash", *(f"#SBATCH {option}" for option in sbatch_options(job)),
             "# servebench submit: the campaign's run inside this job's allocation (its nodes, no second one)",
             "set -e", *job.setup, f"cd {shlex.quote(str(job.workdir))}",
             "exec " + shlex.join(job.command)]
    return "\n".join(lines) + "\n"


def sbatch_argv(script: Path) -> list[str]:
    return ["sbatch", "--parsable", str(script)]


def parse_job_id(stdout: str) -> int:
    """The job id of `sbatch --parsable`'s output; ValueError with the output when there is none."""
    found = JOB_ID.match(stdout.strip().splitlines()[-1] if stdout.strip() else "")
    if found is None:
        raise ValueError(f"sbatch printed no job id: {stdout.strip()[-500:]!r}")
    return int(found.group(1))


def job_state_argv(job_id: int) -> list[str]:
    """scontrol's one line on the job (it keeps a finished job for MinJobAge, 300 s by default; sacct needs
    the accounting database many test clusters lack)."""
    return ["scontrol", "show", "job", "--oneliner", str(job_id)]


def parse_job_state(stdout: str) -> BatchState | None:
    """The job of scontrol's line (`JobState=COMPLETED ExitCode=0:0`, `TIMEOUT`, `0:15`); None: no such job."""
    record = parse_record(stdout.strip().splitlines()[0]) if stdout.strip() else {}
    if "JobState" not in record:
        return None
    state = record["JobState"]
    return BatchState(state=state, exit_code=record.get("ExitCode", ""), ended=state in FINISHED,
                      completed=state == "COMPLETED")


FINISHED = frozenset({"COMPLETED", "FAILED", "TIMEOUT", "CANCELLED", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
                      "BOOT_FAIL", "DEADLINE"})
