"""Code a reader can find and hold in mind: none of the package's modules is over
:data:`MAX_LINES` lines (the complexity of each function, at most 20, is ruff's C901 in
pyproject.toml, run with the suite's command), and the unit tests' folders mirror the
package's."""

from __future__ import annotations

from support.paths import REPO

PACKAGE = REPO / "stream_release"
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


def test_the_unit_tests_mirror_the_package() -> None:
    # tests/unit/<folder>/ tests stream_release/<folder>/ (deploy/: the repository's deploy/)
    unit = REPO / "tests" / "unit"
    folders = [
        p.relative_to(unit) for p in unit.rglob("*") if p.is_dir() and p.name != "__pycache__"
    ]
    assert folders
    for folder in folders:
        deploy = folder.parts[0] == "deploy"
        mirrored = REPO / "deploy" if deploy else REPO / "stream_release" / folder
        assert mirrored.is_dir(), f"tests/unit/{folder} mirrors no folder of the package"
