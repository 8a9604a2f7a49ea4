"""`servebench submit CAMPAIGN`: the campaign as one batch job of yours on its provider's scheduler (the
provider's BATCH_JOBS: `batch_script`, `submit_batch`, `batch_state`); `submit --resume RUN` finishes a run cut
by its job's time limit in a new job. Prints the job id and where the results land; `--wait` follows the job
to its end and prints its state."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from servebench.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, campaign_file, warehouse_path
from servebench.paths import runs_dir
from servebench.providers.base import Provider

POLL_S = 5.0


def add_submit_parser(sub: argparse._SubParsersAction) -> None:
    submit = sub.add_parser("submit", help="run a campaign as one batch job of yours on its scheduler (the "
                            "orchestrator inside the job, on its first node), or with --resume finish a run in a new "
                            "job")
    target = submit.add_mutually_exclusive_group(required=True)
    target.add_argument("file", nargs="?", type=campaign_file, metavar="CAMPAIGN",
                        help="a campaign file whose provider has batch jobs, or a shipped campaign's "
                        "name")
    target.add_argument("--resume", metavar="RUN", help="a run of the warehouse to finish in a new job "
                        "(`servebench runs` lists them)")
    submit.add_argument("--time", dest="time_limit", help="the job's time limit, in the scheduler's syntax (default: "
                        "the campaign's provider.time_limit)")
    submit.add_argument("--dry-run", action="store_true", help="print the batch script, submit nothing")
    submit.add_argument("--wait", action="store_true", help="follow the job until it ends; exit 0 only when it "
                        "completed")
    submit.add_argument("--warehouse", help="DuckDB file the run lands in (default: $SERVEBENCH_WAREHOUSE or "
                        "runs/servebench.duckdb); on a file system the job's first node sees")
    submit.add_argument("--runs", metavar="DIR", help="where the run's directory and the job's log are made "
                        "(default: $SERVEBENCH_RUNS or runs/); on a file system the nodes see")
    submit.set_defaults(func=cmd_submit)


def cmd_submit(args: argparse.Namespace) -> int:
    from servebench.providers import get_provider, get_provider_class
    from servebench.providers.base import BATCH_JOBS, BatchRequest

    found = job_campaign(args)
    if isinstance(found, str):
        print(f"servebench: {found}", file=sys.stderr)
        return EXIT_USAGE
    campaign, command = found
    if BATCH_JOBS not in get_provider_class(campaign.provider.kind).capabilities:
        print(f"servebench: campaign {campaign.name!r} runs on provider {campaign.provider.kind!r}, which has no "
              "batch jobs: `submit` needs a scheduler's provider; `servebench run` runs on any",
              file=sys.stderr)
        return EXIT_USAGE
    provider = get_provider(campaign)
    runs = Path(args.runs).absolute() if args.runs else runs_dir().absolute()
    request = BatchRequest(campaign=campaign.name, command=command, workdir=Path.cwd(),
                           log=runs / f"job-{campaign.name}-%j.out", time_limit=args.time_limit)
    script = provider.batch_script(request)
    if args.dry_run:
        print(script, end="")
        return EXIT_OK
    runs.mkdir(parents=True, exist_ok=True)
    path = runs / f"job-{campaign.name}-{time.strftime('%Y%m%dT%H%M%S')}.sh"
    path.write_text(script)
    try:
        job_id = provider.submit_batch(path)
    except Exception as exc:   # the scheduler's own words: sbatch's refusal, an unreachable controller
        print(f"servebench: {exc}", file=sys.stderr)
        return EXIT_FAILED
    print(f"submitted job {job_id}: {path}")
    print(f"  log      {str(request.log).replace('%j', job_id)}")
    print(f"  results  {warehouse_path(args).absolute()} (servebench runs), run directories under {runs}")
    print("  then     servebench runs; a run cut by the job's time limit: servebench submit --resume RUN")
    return follow(provider, job_id) if args.wait else EXIT_OK


def job_campaign(args: argparse.Namespace):
    """(campaign, the job's servebench command), or why not: the command carries absolute paths, since
    the job starts it from the batch host."""
    from servebench.campaign.loading import load_campaign

    warehouse = str(warehouse_path(args).absolute())
    runs = ["--runs", str(Path(args.runs).absolute())] if args.runs else []
    servebench = [sys.executable, "-m", "servebench"]
    if args.resume:
        from servebench.campaign.resume import ResumeError, load_resumable

        try:
            _, campaign = load_resumable(warehouse, args.resume, False)
        except ResumeError as exc:
            return str(exc)
        return campaign, [*servebench, "resume", args.resume, "--warehouse", warehouse, *runs]
    campaign = load_campaign(args.file)
    return campaign, [*servebench, "run", str(Path(args.file).absolute()), "--warehouse", warehouse, *runs]


def follow(provider: Provider, job_id: str) -> int:
    """Poll the scheduler until the job ends; its state is printed, exit 0 only when it completed."""
    state = provider.batch_state(job_id)
    while state is None or not state.ended:
        time.sleep(POLL_S)
        state = provider.batch_state(job_id)
        if state is None:
            print(f"job {job_id}: no longer known to the scheduler (it keeps a finished job a few minutes)")
            return EXIT_FAILED
    print(f"job {job_id}: {state.state} (exit {state.exit_code})")
    return EXIT_OK if state.completed else EXIT_FAILED
