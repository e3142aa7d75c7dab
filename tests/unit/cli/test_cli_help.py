"""``stream-release --help``: every option and positional of every command says what it is."""

from __future__ import annotations

import argparse

import pytest

from stream_release.cli.main import _parser, main


def _commands(
    parser: argparse.ArgumentParser, path: str = ""
) -> list[tuple[str, argparse.ArgumentParser]]:
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, f"{path} {name}".strip())
    return found


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
