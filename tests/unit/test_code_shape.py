"""Modules a reader can hold in mind: none of the package's is over :data:`MAX_LINES` lines
(the complexity of each function, at most 20, is ruff's C901 in pyproject.toml, run with the
suite's command)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "stream_release"
MAX_LINES = 600


def test_no_module_is_over_600_lines() -> None:
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    assert len(sizes) > 100  # the package's modules were found
    over = {name: lines for name, lines in sizes.items() if lines > MAX_LINES}
    assert not over, f"modules over {MAX_LINES} lines: {over}; split them by job"


def test_the_complexity_limit_is_configured() -> None:
    text = (PACKAGE.parent / "pyproject.toml").read_text(encoding="utf-8")
    assert '"C901"' in text and "max-complexity = 20" in text
