"""`servebench`: the command line. Every command is a module of this package with its
`add_<command>_parser` and `cmd_<command>`; this module assembles the parser and turns the errors
any command may raise into a line and an exit code.

Prefect is imported only by the commands that run flows, so `plan`, `query` and `load`
start fast and the load generator's process carries nothing it does not need.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Iterable

from servebench import warehouse
from servebench.campaign.loading import NoSuchCampaign, SpecError, did_you_mean
from servebench.cli.common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ContentError, export_runs_dir, interruptible
from servebench.plugins import load_plugins
from servebench.providers.claims import ClaimsError


def main(argv: list[str] | None = None) -> int:
    load_plugins()  # before the parser: plugin engines are choices of `load --engine`
    args = build_parser().parse_args(argv)
    export_runs_dir(args)
    interruptible()  # Ctrl-C (and `kill -INT`) stops every command, a shell's background job too
    try:
        return args.func(args) or EXIT_OK
    except NoSuchCampaign as exc:
        print(f"servebench: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except SpecError as exc:
        print(f"servebench: invalid campaign\n{exc}", file=sys.stderr)
        return EXIT_FAILED
    except (warehouse.WarehouseError, ClaimsError) as exc:
        print(f"servebench: {exc}", file=sys.stderr)
        return EXIT_FAILED


class CommandParser(argparse.ArgumentParser):
    """The parser of `servebench` and, since argparse makes a command's parser of its parent's class,
    of every command. A command reports a flag it does not know with its own usage (argparse leaves
    them to the top parser, whose usage lists every command); a mistyped command gets the closest
    names; a value whose content is wrong (`ContentError`) is one line without the usage."""

    def parse_known_args(self, args: Iterable[str] | None = None,
                         namespace: Any = None) -> tuple[Any, list[str]]:
        try:
            parsed, extras = super().parse_known_args(args, namespace)
        except ContentError as exc:
            self.exit(EXIT_USAGE, f"{self.prog}: {exc}\n")
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if isinstance(action, argparse._SubParsersAction) and value not in action.choices:
            hint = did_you_mean(value, action.choices)
            raise argparse.ArgumentError(None, f"unknown command {value!r}: "
                                         + (hint or f"the commands are {', '.join(action.choices)}"))
        super()._check_value(action, value)


def build_parser() -> argparse.ArgumentParser:
    from servebench.cli.annotate import add_annotate_parser
    from servebench.cli.best import add_best_parser
    from servebench.cli.bisect import add_bisect_parser
    from servebench.cli.build import add_build_parser
    from servebench.cli.builds import add_builds_parser
    from servebench.cli.campaigns import add_campaigns_parser
    from servebench.cli.capacity import add_capacity_parser
    from servebench.cli.chaos import add_chaos_parser
    from servebench.cli.compare import add_compare_parser
    from servebench.cli.deployments import add_deployments_parser
    from servebench.cli.load import add_load_parser
    from servebench.cli.plan import add_plan_parser
    from servebench.cli.predict import add_predict_parser
    from servebench.cli.query import add_query_parser
    from servebench.cli.regressions import add_regressions_parser
    from servebench.cli.report import add_report_parser
    from servebench.cli.resume import add_resume_parser
    from servebench.cli.run import add_run_parser
    from servebench.cli.runs import add_runs_parser
    from servebench.cli.saturation import add_saturation_parser
    from servebench.cli.schema import add_schema_parser
    from servebench.cli.submit import add_submit_parser
    from servebench.cli.tables import add_tables_parser
    from servebench.cli.testbed import add_testbed_parser

    parser = CommandParser(prog="servebench", description="Benchmark campaigns for LLM serving on CPUs.")
    parser.add_argument("--version", action="version", version=f"servebench {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add_parser in (add_plan_parser, add_build_parser, add_run_parser, add_resume_parser, add_runs_parser,
                       add_submit_parser, add_campaigns_parser, add_query_parser, add_tables_parser, add_report_parser,
                       add_load_parser,
                       add_capacity_parser, add_best_parser, add_saturation_parser, add_schema_parser,
                       add_builds_parser, add_bisect_parser, add_chaos_parser, add_testbed_parser,
                       add_regressions_parser, add_compare_parser, add_annotate_parser, add_deployments_parser,
                       add_predict_parser):
        add_parser(sub)
    return parser


def installed_version() -> str:
    """The installed distribution's version (pyproject.toml's), as pip knows it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("servebench-campaigns")
    except PackageNotFoundError:
        return "(not installed)"


if __name__ == "__main__":
    sys.exit(main())
