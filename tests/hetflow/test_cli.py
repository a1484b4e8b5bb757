"""The ``hetflow`` command's help, as a user reads it."""

import argparse
import re

from hetflow.cli import _build_parser

ISSUE_NUMBER = re.compile(r"\bissues? \d+", re.IGNORECASE)


def helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    """The top level's help and every subcommand's, by command."""
    found = {"hetflow": parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found[name] = sub.format_help()
    return found


def test_no_help_names_an_issue_number():
    found = helps(_build_parser())
    assert {"hetflow", "serve", "up", "plan"} <= set(found)
    assert {name: ISSUE_NUMBER.findall(text) for name, text in found.items() if ISSUE_NUMBER.search(text)} == {}


def test_the_check_sees_an_issue_number_in_a_help():
    parser = argparse.ArgumentParser(prog="x")
    parser.add_subparsers().add_parser("plan", help="a plan (issue 15)", description="see issue 15")
    assert [name for name, text in helps(parser).items() if ISSUE_NUMBER.search(text)] == ["hetflow", "plan"]


def test_a_lab_command_without_the_lab_says_how_to_get_it(monkeypatch, capsys):
    import hetflow.cli as cli

    def no_lab(args):
        raise ModuleNotFoundError("No module named 'hetflow.bench'", name="hetflow.bench")

    parser = cli._build_parser()
    monkeypatch.setattr(cli, "_build_parser", lambda: parser)
    parser.set_defaults(fn=no_lab)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            action.choices["bench"].set_defaults(fn=no_lab)
    assert cli.main(["bench", "--sweep", "x.yaml"]) == 2
    assert "pip install -e '.[bench]'" in capsys.readouterr().err
