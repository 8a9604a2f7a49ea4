"""The CLI's seams: every command a module of its own (`servebench/cli/<command>.py` with
`add_<command>_parser` and `cmd_<command>`), one `--format` for what a command prints, and `--runs`
wherever `--warehouse` is taken."""

import argparse
import ast
import importlib
from pathlib import Path

from servebench.cli import build_parser

CLI = Path(__file__).parents[2] / "servebench" / "cli"


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
        if name not in ("builds", "testbed", "deployments"):  # their actions have the functions: builds list, ...
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
    starting = {"servebench run", "servebench resume", "servebench bisect", "servebench submit"}   # submit: in its job
    for parser in every_parser(build_parser()):
        flags = options(parser)
        assert ("--runs" in flags) == (parser.prog in starting), parser.prog


# a help text cut off mid-sentence ends on one of these words (or on a comma, a colon, an open bracket)
DANGLING_WORDS = {"a", "an", "and", "e.g.", "its", "of", "or", "than", "the", "their", "with"}
PAIRS = ("()", "[]", "{}")


def help_texts(parser: argparse.ArgumentParser):
    """(where, text) of every help a user reads of one parser: its description, each flag's and positional's
    help (%(default)s and the like expanded), each subcommand's line; a missing help is an empty text."""
    formatter = parser._get_formatter()
    if parser.description:
        yield f"{parser.prog}: description", parser.description
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):  # the command's own line: its choices, said below
            for choice in action._choices_actions:
                yield f"{parser.prog} {choice.dest}", choice.help or ""
            continue
        if action.help == argparse.SUPPRESS:
            continue
        name = "/".join(action.option_strings) or action.dest
        yield f"{parser.prog} {name}", formatter._expand_help(action) if action.help else ""


def cut_off(text: str) -> str | None:
    """Why a help text reads as cut off mid-sentence, or None."""
    words = text.rstrip(" .").split()
    if not words:
        return "no help"
    if text.rstrip()[-1] in ",:;([{-":
        return f"ends with {text.rstrip()[-1]!r}"
    if words[-1].lower() in DANGLING_WORDS:
        return f"ends with {words[-1]!r}"
    for opening, closing in PAIRS:
        if text.count(opening) != text.count(closing):
            return f"unbalanced {opening}{closing}"
    if text.count("`") % 2:
        return "unbalanced `"
    return None


def test_every_flag_positional_and_command_has_a_whole_help():
    problems = [f"{where}: {why}: {text!r}" for parser in every_parser(build_parser())
                for where, text in help_texts(parser) if (why := cut_off(text))]
    assert not problems, "\n".join(problems)


def test_the_cut_off_check_finds_what_it_is_for():
    assert cut_off("the highest open-loop rate (or, with --clients-search, the most closed-loop") == "unbalanced ()"
    assert cut_off("never probe above this and") == "ends with 'and'"
    assert cut_off("what to remove,") == "ends with ','"
    assert cut_off("") == "no help"
    assert cut_off("the first rate (or clients) probed: your guess") is None


def test_load_and_capacity_share_one_load_group_and_add_only_their_own_flags():
    """One definition of the load generator's flags: the same group on both commands, the load point (--rate,
    --clients) only on `load`, which takes it; `capacity` searches for it."""
    parsers = commands(build_parser())

    def group_flags(parser: argparse.ArgumentParser) -> list[str]:
        group = next(g for g in parser._action_groups if g.title == "load")
        return [flag for action in group._group_actions for flag in action.option_strings]

    shared = group_flags(parsers["load"])
    assert shared == group_flags(parsers["capacity"]) and "--base-url" in shared and "--engine" in shared
    assert {"--rate", "--clients"} <= set(options(parsers["load"])) - set(shared)
    assert not {"--rate", "--clients"} & set(options(parsers["capacity"]))
