"""Hand-built tables for the unit tests: a small hierarchy, seven rows, their encoding, and
pseudonyms of the form the history keeps (plain functions, not fixtures)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from stream_release.config import SchemaSettings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.core.table import EncodedTable
from stream_release.io.encoding import encode
from stream_release.io.snapshot import snapshot_from_columns

EDUCATION_HIERARCHY = """\
Bachelors;Undergraduate;Higher education;*
Some-college;Undergraduate;Higher education;*
11th;High School;Secondary education;*
HS-grad;High School;Secondary education;*
Masters;Graduate;Higher education;*
9th;High School;Secondary education;*
Doctorate;Graduate;Higher education;*
"""
"""A small ARX-format hierarchy for hand-built tables."""

SMALL_ROWS = [  # id, age, education, city, disease
    ("a", "30", "Bachelors", "Paris", "flu"),
    ("b", "34", "Masters", "Lyon", "cold"),
    ("c", "30", "Bachelors", "Paris", "flu"),
    ("d", "41", "9th", "Nice", "hiv"),
    ("e", "25.5", "Some-college", "Lyon", "flu"),
    ("f", "30", "Bachelors", "Paris", "cold"),
    ("g", "34", "Doctorate", "Paris", "flu"),
]
"""Seven rows with a numeric, a hierarchy and a set attribute."""


def encode_columns(
    tmp_path: Path,
    columns: dict[str, list[str]],
    sensitive: list[str],
    ids: list[str] | None = None,
) -> EncodedTable:
    """Encode hand-built columns; ``education`` uses :data:`EDUCATION_HIERARCHY`."""
    hierarchy = tmp_path / "education.csv"
    hierarchy.write_text(EDUCATION_HIERARCHY, encoding="utf-8")
    hierarchies = {"education": hierarchy} if "education" in columns else {}
    schema = SchemaSettings(id="id", sensitive="s", qid=tuple(columns), hierarchies=hierarchies)
    ids = ids if ids is not None else [f"p{i}" for i in range(len(sensitive))]
    raw = snapshot_from_columns(ids, columns, sensitive)
    return encode(raw, schema, load_hierarchies(schema))


def keyed_pseudonyms(ids: Iterable[object], key: bytes = b"") -> np.ndarray:
    """Pseudonyms of ``ids`` (each as ``str``, UTF-8) as inputs to the mechanisms: 16-byte
    BLAKE2b digests keyed with ``key`` (none when empty), the form of
    :class:`stream_release.history.pseudonym.Pseudonymizer`'s; shape ``(len(ids),)``, dtype
    ``S16``, in the order of ``ids``. What the product computes is pinned by the known-answer
    test of ``tests/unit/history/test_pseudonym.py``, not by this."""
    return np.array(
        [hashlib.blake2b(str(i).encode(), key=key, digest_size=16).digest() for i in ids],
        dtype="S16",
    )


def random_ratios(
    rng: np.random.Generator, n: int, n_values: int, *, with_history: float, spent: float,
    span: tuple[float, float],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """A random CSR over ``n`` rows of (value, ratio) pairs, as a release's requirements or
    Theorem 1's ratios hold them: ``(ptr, value, ratio)``, 0-2 pairs for a share
    ``with_history`` of the rows, a share ``spent`` of the ratios infinite, the others uniform
    in ``span``."""
    per_row = rng.integers(0, 3, size=n) * (rng.random(n) < with_history)
    ptr = np.zeros(n + 1, np.int64)
    np.cumsum(per_row, out=ptr[1:])
    m = int(ptr[-1])
    value = rng.integers(0, n_values, size=m).astype(np.int32)
    low, high = span
    ratio = np.where(rng.random(m) < spent, np.inf, low + (high - low) * rng.random(m))
    return ptr, value, ratio
