"""The CLI's seams: every command a module of its own (`servebench/cli/<command>.py` with
`add_<command>_parser` and `cmd_<command>`), one `--format` for what a command prints, and `--runs`
wherever `--warehouse` is taken."""

import argparse
import ast
import importlib
from pathlib import Path

from servebench.cli import build_parser

CLI = Path(__file__).parents[1] / "servebench" / "cli"


def commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def every_parser(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from every_parser(child)


def options(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {flag: action for action in parser._actions for flag in action.option_strings}


def test_every_command_is_a_module_with_its_parser_and_its_function():
    for name in commands(build_parser()):
        stem = name.replace("-", "_")
        module = importlib.import_module(f"servebench.cli.{stem}")
        assert callable(getattr(module, f"add_{stem}_parser", None)), name
        if name not in ("builds", "testbed"):  # their actions have the functions: builds list, testbed up, ...
            assert callable(getattr(module, f"cmd_{stem}", None)), name


def test_the_package_module_holds_no_command():
    tree = ast.parse((CLI / "__init__.py").read_text())
    defined = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert not {name for name in defined if name.startswith("cmd_")}


def test_one_format_option_with_table_the_default():
    for parser in every_parser(build_parser()):
        flags = options(parser)
        assert "--json" not in flags, parser.prog
        if "--format" in flags:
            choices = flags["--format"].choices
            assert choices, parser.prog
            assert flags["--format"].default == ("table" if "table" in choices else next(iter(choices))), parser.prog


def test_runs_only_where_a_command_makes_run_directories():
    """--runs says where a run's directory is made: the commands that start runs have it, and a command that
    only reads (it finds a run's directory in the warehouse) does not offer it."""
    starting = {"servebench run", "servebench resume", "servebench bisect", "servebench chaos"}
    for parser in every_parser(build_parser()):
        flags = options(parser)
        assert ("--runs" in flags) == (parser.prog in starting), parser.prog
