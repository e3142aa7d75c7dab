"""Every message that suggests a new series says what that costs (issue 26, item 5).

A new history (another history location, ``history.prefix``, ``--out``) restarts every
individual's count from zero while the releases already published stay public: the guarantee
no longer covers what can be linked across the two series. A message that offers it as a way
out must say so (:data:`~stream_release.errors.NEW_SERIES_CAVEAT`). The sources are read: every
string (not a docstring) that mentions a new series, history or archive must be part of a
statement that also names the caveat.
"""

from __future__ import annotations

import ast
import re

from support.paths import REPO

from stream_release.errors import NEW_SERIES_CAVEAT

PACKAGE = REPO / "stream_release"

SUGGESTS = re.compile(r"\bnew (series|history|archive)|\bstart a new\b|\bfor another series\b")

NOT_ADVICE = {
    # the demo refuses a non-empty --out: it starts a series of its own, nothing to continue
    ("cli/demo.py", "the streaming demo starts a new series there"),
}


def _text(node: ast.AST) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(part) for part in node.values)
    return ""


def _messages_without_caveat() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            text = _text(node)
            if not SUGGESTS.search(text) or isinstance(parents.get(node), ast.JoinedStr):
                continue
            statement = node
            while not isinstance(statement, ast.stmt):
                statement = parents[statement]
            if isinstance(statement, ast.Expr) and statement.value is node:
                continue  # a docstring
            names = {n.id for n in ast.walk(statement) if isinstance(n, ast.Name)}
            where = path.relative_to(PACKAGE).as_posix()
            if "NEW_SERIES_CAVEAT" in names or any(
                where == file and part in text for file, part in NOT_ADVICE
            ):
                continue
            found.append(f"{where}:{node.lineno}: {text!r}")
    return found


def test_every_message_that_suggests_a_new_series_states_what_it_restarts() -> None:
    assert _messages_without_caveat() == []


def test_the_caveat_says_the_counts_restart_and_the_old_releases_stay_public() -> None:
    assert "restarts every individual's count" in NEW_SERIES_CAVEAT
    assert "stay public" in NEW_SERIES_CAVEAT
