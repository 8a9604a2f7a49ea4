"""What every `servebench` command shares: exit codes, the warehouse and runs options, the output
format option, the run a command is about, and the error for a flag value whose content is wrong."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

from servebench.paths import default_warehouse

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_REGRESSION, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def interruptible() -> None:
    """Let SIGINT stop the command even when a shell started it in the background, where SIGINT
    arrives ignored (bash without job control: `servebench build x.yaml &`, a CI script's `&`): the
    commands that say what Ctrl-C left behind (run, build, bisect, serve) must also get it from `kill -INT`."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


class ContentError(Exception):
    """A flag's value that parses but whose content is wrong (a workload block, a file): the command's
    parser reports it in one line and exits 2, without the usage, which is for flags misused."""


def warehouse_arg(parser: argparse.ArgumentParser, makes_runs: bool = False) -> None:
    """--warehouse, and --runs beside it on the commands that start runs (run, resume, bisect), which make
    each run's directory under it; a command that only reads finds a run's directory in the warehouse."""
    parser.add_argument("--warehouse", help="DuckDB file (default: $SERVEBENCH_WAREHOUSE or "
                        "runs/servebench.duckdb)")
    if makes_runs:
        parser.add_argument("--runs", metavar="DIR", help="where this command makes the run's directory: logs, "
                            "load results, report (default: $SERVEBENCH_RUNS or runs/)")


def warehouse_path(args: argparse.Namespace) -> Path:
    return Path(args.warehouse) if args.warehouse else default_warehouse()


def export_runs_dir(args: argparse.Namespace) -> None:
    """--runs as SERVEBENCH_RUNS, before a command runs: `paths.runs_dir()` is read deep in the
    orchestration, by Prefect tasks in this process and by the processes they start, which all
    see the environment, so the flag reaches each of them without being threaded through every
    flow's parameters. Absolute, because `serve` changes directory and subprocesses start elsewhere."""
    if getattr(args, "runs", None):
        os.environ["SERVEBENCH_RUNS"] = str(Path(args.runs).absolute())


def format_arg(parser: argparse.ArgumentParser, choices: tuple[str, ...], help: str | None = None) -> None:
    """`--format`, the one output option of every command: the formats this command can print, `table`
    the default where it prints one."""
    default = "table" if "table" in choices else choices[0]
    parser.add_argument("--format", choices=list(choices), default=default,
                        help=help or f"how to print the result (default: {default})")


def campaign_file(given: str) -> str:
    """A command line's campaign: a file, or a shipped campaign by its name (`servebench campaigns`)."""
    from servebench.campaign.loading import campaign_path

    return str(campaign_path(given))


def campaign_arg(parser: argparse.ArgumentParser) -> None:
    """The campaign positional of the commands that take one by file or by its shipped name."""
    parser.add_argument("file", type=campaign_file,
                        help="a campaign file, or a shipped campaign's name (`servebench campaigns`)")


def run_choice_args(parser: argparse.ArgumentParser) -> None:
    """--run ID or --campaign NAME (its latest run); neither: the latest run."""
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--run", help="run id (default: the latest run)")
    which.add_argument("--campaign", help="the latest run of this campaign")


def chosen_run_id(con, args: argparse.Namespace) -> str | None:
    """The run `run_choice_args` asked for, or None if the warehouse has none."""
    from servebench.warehouse.reads import latest_run_id

    return args.run or latest_run_id(con, args.campaign)


def chosen_run_or_say_why(con, args: argparse.Namespace) -> str | None:
    """`chosen_run_id`, or None after saying on stderr why there is none (the commands that show a run)."""
    run_id = chosen_run_id(con, args)
    if run_id is None:
        print(f"servebench: {no_run_message(con, args)}", file=sys.stderr)
    return run_id


def no_run_message(con, args: argparse.Namespace) -> str:
    """Why `chosen_run_id` found nothing: for a campaign, the campaigns that do have runs, the closest
    first, since a misspelt name is the likely cause."""
    from servebench.campaign.loading import did_you_mean
    from servebench.warehouse.history import finished_runs
    from servebench.warehouse.reads import run_campaign

    if not args.campaign:
        return "no run found in the warehouse"
    names = sorted({name for run_id in finished_runs(con, latest_only=True) if (name := run_campaign(con, run_id))})
    if not names:
        return f"no run of campaign {args.campaign!r}: the warehouse has no finished run"
    hint = did_you_mean(args.campaign, names)
    return (f"no run of campaign {args.campaign!r}" + (f": {hint}" if hint else "")
            + f" (campaigns with runs: {', '.join(names)})")
