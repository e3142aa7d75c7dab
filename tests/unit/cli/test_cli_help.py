"""``stream-release --help``: every option and positional of every command says what it is,
every page ends with examples the parser accepts, and ``--version`` names the version."""

from __future__ import annotations

import argparse

import pytest
from support.shell import command_arguments

from stream_release import __version__
from stream_release.cli.examples import EXAMPLES
from stream_release.cli.examples import parsers as _commands
from stream_release.cli.main import _parser, main, parse_arguments


def _arguments(example: str) -> list[str]:
    words = command_arguments(example)
    assert words is not None, example
    return words


def test_every_help_page_ends_with_examples_the_parser_accepts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    commands = _commands(_parser())
    assert {path for path, _ in commands} == set(EXAMPLES)  # none missing, none stale
    for path, command in commands:
        page = command.format_help()
        assert "\nexamples:\n  " in page, path
        for example in EXAMPLES[path]:
            assert example in page, path  # one line each, not wrapped
            assert parse_arguments(_arguments(example)).command.startswith(path), example


@pytest.mark.parametrize("path", [p for p in EXAMPLES if p.startswith(("calc", "bounds"))])
def test_the_calculators_examples_run(path: str, capsys: pytest.CaptureFixture[str]) -> None:
    for example in EXAMPLES[path]:
        assert main(_arguments(example)) == 0, example
        assert capsys.readouterr().out.strip()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"stream-release {__version__}\n"


def test_every_argument_of_every_command_has_help() -> None:
    missing = [
        f"{path}: {action.option_strings or action.dest}"
        for path, parser in _commands(_parser())
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction) and not action.help
    ]
    assert missing == []


@pytest.mark.parametrize(
    ("command", "shown", "hidden"),
    [
        ("worker", ["SR_KAFKA_BOOTSTRAP", "SR_KAFKA_TOPICS__CONTROL", "history.key_file"], []),
        ("reconstruct", ["95 % interval"], ["%%"]),
        ("publish", ["--wait", "--timeout"], []),
    ],
)
def test_help_pages(
    capsys: pytest.CaptureFixture[str], command: str, shown: list[str], hidden: list[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert all(item in text for item in shown), text
    assert not any(item in text for item in hidden), text
