"""Where the repository is, for the tests that read its files (deploy/, benchmarks/, the
package's sources), wherever in ``tests/`` they live."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
"""The repository's root: the directory of ``pyproject.toml``."""
