"""An example at the foot of every help page of ``stream-release`` (``COMMAND --help``).

Every example is a command line the parser accepts (``tests/unit/cli/test_cli_help.py`` parses
each one): a help page never shows a flag that does not exist.
"""

from __future__ import annotations

import argparse
from typing import Final

__all__ = ["EXAMPLES", "HelpFormatter", "attach_examples", "parsers"]

EXAMPLES: Final[dict[str, tuple[str, ...]]] = {
    "": (
        "stream-release demo                      # the bundled Adult series, audited",
        "stream-release anonymize --config series.toml --out releases 2024.csv 2025.csv",
        "stream-release audit releases --config series.toml 2024.csv 2025.csv",
    ),
    "bounds": (
        "stream-release bounds --l 2 --k-prime 15",
        "stream-release bounds --l 2 --strategy geometric --alpha 2 --releases 5",
    ),
    "anonymize": (
        "stream-release anonymize --config series.toml --out releases 2024.csv 2025.csv",
        "stream-release anonymize --config series.toml --out releases --private "
        "/secure/releases.private 2026.csv",
    ),
    "keygen": ("stream-release keygen > series.key && chmod 600 series.key",),
    "plan": (
        "stream-release plan --config series.toml wave01.csv wave02.csv wave03.csv",
        "stream-release plan --config series.toml --horizon 15 wave01.csv wave02.csv",
    ),
    "audit": (
        "stream-release audit releases",
        "stream-release audit releases --private releases.private --config series.toml "
        "--strict 2024.csv 2025.csv",
        "stream-release audit archive --config worker.toml --key-file series.key 2026-10.csv",
    ),
    "report": (
        "stream-release report releases --out report.html",
        "stream-release report releases --private releases.private --out report.html",
    ),
    "publish": (
        "stream-release publish --config worker.toml --release 2026-10 2026-10.csv --wait",
    ),
    "worker": (
        "SR_HISTORY_KEY_FILE=/run/secrets/series.key stream-release worker --config worker.toml",
    ),
    "demo": (
        "stream-release demo",
        "stream-release demo --offline --releases 3 --out demo-releases",
        "stream-release demo --offline --snapshots demo-snapshots",
    ),
    "calc": ("stream-release calc delta --k 20 --beta 0.1 --epsilon 1",),
    "calc delta": ("stream-release calc delta --k 20 --beta 0.1 --epsilon 1",),
    "calc amplify": ("stream-release calc amplify --epsilon 1 --delta 1e-6 --beta 0.1",),
    "calc rp-cap": (
        "stream-release calc rp-cap --p 0.5 --epsilon 0.2 --delta 0.1 --domain-size 5",
    ),
    "calc laplace-scale": (
        "stream-release calc laplace-scale --diameter 80 --epsilon 1 --delta 0",
    ),
    "calc rr-keep": ("stream-release calc rr-keep --domain-size 5 --epsilon 1 --delta 0",),
    "calc lower-bound": (
        "stream-release calc lower-bound --epsilon 1 --delta 0 --diameter 80",
        "stream-release calc lower-bound --epsilon 1 --delta 0 --domain-size 5",
    ),
    "reconstruct": (
        "stream-release reconstruct releases --value Sales --where sex=Female",
        "stream-release reconstruct releases --value Sales --where age=30-39 --release 2 --json",
    ),
}
"""Command path (``""`` the top page, ``"calc delta"`` a calculator) -> its examples."""


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, the examples kept one per line (the descriptions still wrap)."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def parsers(
    parser: argparse.ArgumentParser, path: str = ""
) -> list[tuple[str, argparse.ArgumentParser]]:
    """``(command path, parser)`` of ``parser`` and of every sub-command under it."""
    found = [(path, parser)]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.extend(parsers(sub, f"{path} {name}".strip()))
    return found


def attach_examples(parser: argparse.ArgumentParser) -> None:
    """Put each command's :data:`EXAMPLES` at the foot of its help page.

    Raises
    ------
    KeyError
        A command has no example (a new command needs one here).
    """
    for path, command in parsers(parser):
        lines = EXAMPLES[path]
        command.formatter_class = HelpFormatter
        command.epilog = "examples:\n" + "\n".join(f"  {line}" for line in lines)
