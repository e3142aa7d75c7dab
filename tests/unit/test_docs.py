"""The documentation: the site builds with every warning an error (MkDocs ``--strict``, its
configuration and command-line references generated from the code), the README is a landing
page (at most 12 KB), and no page contradicts the code: every command line of a shell block
parses with the command's own parser, every TOML block and every ``[section] key`` named is a
key of the settings, and every ``SR_*`` variable sets one."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from support.paths import REPO
from support.shell import command_arguments

from stream_release.cli.main import parse_arguments
from stream_release.config import Settings
from stream_release.config._suggest import section_model

PAGES = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
TEST_VARIABLES = {"SR_TEST_DATA", "SR_TEST_KAFKA", "SR_TEST_REDIS_CLUSTER", "SR_TEST_REDIS_URL"}
"""The test suite's own variables (docs/install.md), not settings."""


def _blocks(language: str) -> list[tuple[Path, str]]:
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        found += [(page, b) for b in re.findall(rf"```{language}\n(.*?)```", text, re.S)]
    return found


def _commands() -> list[tuple[Path, list[str]]]:
    """Every ``stream-release`` command line of the pages' shell blocks, as arguments."""
    out = []
    for page, block in _blocks("sh"):
        for line in block.replace("\\\n", " ").splitlines():
            words = command_arguments(line)
            if words is not None:
                out.append((page, words))
    return out


def test_the_site_builds_with_every_warning_an_error(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    config = (tmp_path / "configuration" / "index.html").read_text(encoding="utf-8")
    assert "SR_PRIVACY_HORIZON" in config and "k_prime" in config  # generated from the models
    cli = (tmp_path / "cli" / "index.html").read_text(encoding="utf-8")
    assert "stream-release report" in cli and "--risk-threshold" in cli  # from the parser


def test_the_readme_is_a_landing_page() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= 12 * 1024
    first = readme.split("```sh\n", 1)[1].split("```", 1)[0].splitlines()
    assert first[0].endswith("stream-release demo") and "pytest" in first[1]  # the two commands


@pytest.mark.parametrize(("page", "argv"), _commands(), ids=lambda x: getattr(x, "name", None))
def test_every_documented_command_line_parses(page: Path, argv: list[str]) -> None:
    assert "--help" not in argv  # a help page exits: name the command alone
    assert parse_arguments(argv).command, f"{page.name}: stream-release {' '.join(argv)}"


def test_there_are_documented_command_lines() -> None:
    assert len(_commands()) >= 15


def test_every_toml_block_is_a_configuration() -> None:
    blocks = _blocks("toml")
    assert blocks
    for page, block in blocks:
        data = tomllib.loads(block)
        for section, table in data.items():
            model = section_model(Settings, [section])
            assert model is not None, f"{page.name}: no table [{section}]"
            keys = {f.alias or name for name, f in model.model_fields.items()}
            unknown = [k for k in table if k not in keys]
            assert not unknown, f"{page.name}: [{section}] has no key {unknown}"


def test_every_named_key_and_variable_is_a_setting() -> None:
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for section, key in re.findall(r"`\[([a-z_]+)\] ([a-z_]+)`", text):
            model = section_model(Settings, [section])
            assert model is not None, f"{page.name}: no table [{section}]"
            keys = {f.alias or name for name, f in model.model_fields.items()}
            assert key in keys, f"{page.name}: [{section}] has no key {key!r}"
        for variable in set(re.findall(r"\bSR_[A-Z][A-Z_]*[A-Z]\b", text)) - TEST_VARIABLES:
            section, _, rest = variable.removeprefix("SR_").lower().partition("_")
            key, _, nested = rest.partition("__")
            model = section_model(Settings, [section])
            assert model is not None, f"{page.name}: {variable} names no table"
            if nested:
                model = section_model(model, [key])
                key = nested
            keys = {f.alias or name for name, f in model.model_fields.items()} if model else set()
            assert key in keys, f"{page.name}: {variable} sets no key"
