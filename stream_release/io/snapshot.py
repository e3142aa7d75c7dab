"""The snapshot model: one validated table of raw strings, each column factorized.

A snapshot is a table with one row per individual: the identifier, the quasi-identifiers and
the sensitive value (docs/contract.md §1, §3). Building one checks everything that does not need
the hierarchies: no id and no sensitive value is empty, and no id appears twice. A snapshot
comes from a CSV file (:func:`stream_release.io.snapshot_csv.read_snapshot`) or from in-memory
columns (:func:`snapshot_from_columns`, :func:`snapshot_from_distinct_rows`). Encoding against
the hierarchies is :func:`stream_release.io.encoding.encode`.

Every column the schema names is *factorized* once (distinct values in order of first
appearance plus an ``int32`` code per row, :class:`Factorized`), so that encoding never has to
hash a million Python strings again (STYLE.md rule 10).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from stream_release.errors import SchemaError

MEMORY_SOURCE = "<memory>"
"""``source`` of a snapshot built from in-memory columns."""

BLANKS = " \t"
"""The characters stripped from both ends of every value (spaces and tabs)."""


@dataclass(frozen=True, eq=False)
class Factorized:
    """One column as its distinct values and a code per row.

    Attributes
    ----------
    values : tuple of str, (u,)
        Distinct values, in order of first appearance.
    codes : (n,) int32
        ``values[codes[i]]`` is row ``i``'s value.
    first : (u,) int64
        Row index of each value's first appearance (ascending).
    """

    values: tuple[str, ...]
    codes: NDArray[np.int32]
    first: NDArray[np.int64]

    def decode(self) -> NDArray[np.object_]:
        """(n,) object array of the rows' values (shared ``str`` objects)."""
        table = np.empty(len(self.values), dtype=object)
        table[:] = self.values
        if len(self.values) == self.codes.shape[0]:  # all distinct: row i has code i
            return table
        return table[self.codes]


@dataclass(frozen=True, eq=False)
class RawSnapshot:
    """A validated snapshot before encoding: raw strings, one row per individual.

    Attributes
    ----------
    ids : (n,) object
        Identifiers (``str``), non-empty and distinct.
    qid : dict of str to (n,) object
        Raw value (``str``) of every quasi-identifier, in ``schema.qid`` order (built from
        ``qid_columns`` when first read: encoding reads only the factorized columns).
    sensitive : (n,) object
        Sensitive value (``str``) of every row, non-empty (built when first read).
    source : str
        The file path, or ``"<memory>"``.
    sha256 : str
        Hex SHA-256 of the file's bytes (in-memory: of the canonical form described in
        :func:`snapshot_from_columns`, computed when first read: the worker's cut never
        reads it, and at a million rows it costs half a second).
    lines : (n,) int64
        Where each row came from: its 1-based line number in the file, or its 1-based record
        number for in-memory columns (see ``row_label``).
    qid_columns : dict of str to Factorized
        The factorization of every QID column (same keys as ``qid``).
    sensitive_column : Factorized
        The factorization of the sensitive column.
    row_label : {"line", "record"}
        How messages name a position in ``source``.
    """

    ids: NDArray[np.object_]
    source: str
    digest: str | Callable[[], str] = field(repr=False)
    """``sha256``, or how to compute it."""
    lines: NDArray[np.int64]
    qid_columns: dict[str, Factorized]
    sensitive_column: Factorized
    row_label: Literal["line", "record"] = "line"

    @cached_property
    def qid(self) -> dict[str, NDArray[np.object_]]:
        return {name: column.decode() for name, column in self.qid_columns.items()}

    @cached_property
    def sensitive(self) -> NDArray[np.object_]:
        return self.sensitive_column.decode()

    @cached_property
    def sha256(self) -> str:
        return self.digest if isinstance(self.digest, str) else self.digest()

    @property
    def n_rows(self) -> int:
        return int(self.ids.shape[0])

    def locate(self, row: int) -> str:
        """Human position of row ``row`` (0-based index), e.g. ``"line 17"``."""
        return f"{self.row_label} {int(self.lines[row])}"


# --------------------------------------------------------------------------------------------
# Constructors from in-memory columns


def snapshot_from_columns(
    ids: Iterable[object],
    qid: Mapping[str, Iterable[object]],
    sensitive: Iterable[object],
    source: str = MEMORY_SOURCE,
) -> RawSnapshot:
    """Build a validated snapshot from in-memory columns (tests, the streaming worker).

    Parameters
    ----------
    ids : (n,) identifiers
    qid : QID name -> (n,) values, in the schema's order
    sensitive : (n,) sensitive values
    source : how messages name the origin

    Values are converted with ``str`` (``None`` becomes ``""``) and stripped of surrounding
    spaces and tabs, as the CSV reader does. Rows are numbered 1..n (``record 1``).
    ``sha256`` is the SHA-256 of a canonical form: for each column (``id``, ``sensitive``, then
    the QIDs in the given order) its name, U+001F, its values joined by U+001F, then U+001E.

    Raises
    ------
    SchemaError
        Columns of different lengths, an empty id or sensitive value, a duplicate id.
    """
    id_values = _as_text(ids)
    sensitive_values = _as_text(sensitive)
    qid_values = {name: _as_text(values) for name, values in qid.items()}
    n = len(id_values)
    lengths = {"id": n, "sensitive": len(sensitive_values)}
    lengths.update({f"qid {name!r}": len(v) for name, v in qid_values.items()})
    if len(set(lengths.values())) > 1:
        shown = ", ".join(f"{k}: {v}" for k, v in lengths.items())
        raise SchemaError(
            f"snapshot {source!r}: columns have different lengths ({shown}); give one value "
            "per row in every column"
        )
    columns = [("id", id_values), ("sensitive", sensitive_values), *qid_values.items()]
    return assemble_snapshot(
        source,
        _canonical_digest(columns),
        np.arange(1, n + 1, dtype=np.int64),
        "record",
        id_name="id",
        sensitive_name="sensitive",
        ids=factorize_strings(id_values),
        sensitive=factorize_strings(sensitive_values),
        qid={name: factorize_strings(v) for name, v in qid_values.items()},
    )


def snapshot_from_distinct_rows(
    ids: Iterable[object],
    row_codes: NDArray[np.int32],
    distinct: Sequence[Sequence[object]],
    qid_names: Sequence[str],
    source: str = MEMORY_SOURCE,
) -> RawSnapshot:
    """:func:`snapshot_from_columns` of rows given as codes into their distinct values.

    Row ``i`` holds ``distinct[row_codes[i]]``: its QID values in ``qid_names`` order, then its
    sensitive value. The streaming worker's staged rows repeat far more than they differ (QIDs
    are coarse), so each distinct row is converted and factorised once and every column's
    codes are gathered with numpy; ids, values, codes and ``sha256`` are those
    :func:`snapshot_from_columns` gives for the same columns.

    Parameters
    ----------
    ids : (n,) identifiers
    row_codes : (n,) int32
        Numbers the distinct rows in order of first appearance (row 0 has code 0, and every
        code is at most one more than the largest before it).
    distinct : (u,) rows of ``len(qid_names) + 1`` values
    qid_names : the QID names, in the schema's order
    source : how messages name the origin

    Raises
    ------
    SchemaError
        A distinct row of the wrong width, an empty id or sensitive value, a duplicate id.
    """
    width = len(qid_names) + 1
    for k, row in enumerate(distinct):
        if len(row) != width:
            raise SchemaError(
                f"snapshot {source!r}: distinct row {k} has {len(row)} values, not {width} "
                f"({list(qid_names)} and the sensitive value)"
            )
    id_values = _as_text(ids)
    n = len(id_values)
    if row_codes.shape != (n,):
        raise SchemaError(
            f"snapshot {source!r}: {n} ids but {row_codes.shape[0]} row codes; give one per row"
        )
    texts = [_as_text(row) for row in distinct]
    columns: list[Factorized] = []
    for j in range(width):
        column = factorize_strings([row[j] for row in texts])
        per_row = column.codes[row_codes]
        columns.append(Factorized(column.values, per_row, first_rows(per_row)))
    sensitive, qid = columns[-1], dict(zip(qid_names, columns[:-1], strict=True))

    def digest() -> str:
        return _canonical_digest(
            [
                ("id", id_values),
                ("sensitive", sensitive.decode().tolist()),
                *((name, column.decode().tolist()) for name, column in qid.items()),
            ]
        )

    return assemble_snapshot(
        source,
        digest,
        np.arange(1, n + 1, dtype=np.int64),
        "record",
        id_name="id",
        sensitive_name="sensitive",
        ids=factorize_strings(id_values),
        sensitive=sensitive,
        qid=qid,
    )


def _canonical_digest(columns: Sequence[tuple[str, Sequence[str]]]) -> str:
    """SHA-256 of each column's name, U+001F, its values joined by U+001F, then U+001E."""
    digest = hashlib.sha256()
    for name, values in columns:
        digest.update(f"{name}\x1f{chr(0x1F).join(values)}\x1e".encode())
    return digest.hexdigest()


# --------------------------------------------------------------------------------------------
# Validation and factorization shared with the CSV reader


def assemble_snapshot(
    source: str,
    digest: str | Callable[[], str],
    lines: NDArray[np.int64],
    row_label: Literal["line", "record"],
    *,
    id_name: str,
    sensitive_name: str,
    ids: Factorized,
    sensitive: Factorized,
    qid: dict[str, Factorized],
) -> RawSnapshot:
    """The :class:`RawSnapshot` of factorized columns, once its ids and sensitive values pass.

    Parameters
    ----------
    source : how messages name the origin
    digest : the snapshot's ``sha256``, or how to compute it when first read
    lines : (n,) int64, each row's line (or record) number
    row_label : how messages name a position in ``source``
    id_name, sensitive_name : the column names messages give
    ids, sensitive : the factorized id and sensitive columns, (n,) rows each
    qid : QID name -> factorized column, in the schema's order

    Raises
    ------
    SchemaError
        An empty id or sensitive value (naming its first row), an id that appears more than
        once (how many, the first one and both its rows).
    """
    n = int(ids.codes.shape[0])

    def where(row: int) -> str:
        return f"snapshot {source!r}, {row_label} {int(lines[row])}"

    if "" in ids.values:
        row = int(ids.first[ids.values.index("")])
        raise SchemaError(
            f"{where(row)}: the id (column {id_name!r}) is empty; every row needs an identifier"
        )
    if "" in sensitive.values:
        row = int(sensitive.first[sensitive.values.index("")])
        raise SchemaError(
            f"{where(row)}: the sensitive value (column {sensitive_name!r}) is empty; give every "
            "row a value or drop the row"
        )
    if len(ids.values) < n:
        counts = np.bincount(ids.codes, minlength=len(ids.values))
        repeated = np.flatnonzero(ids.first[ids.codes] != np.arange(n))
        second = int(repeated[0])
        code = int(ids.codes[second])
        first = int(ids.first[code])
        raise SchemaError(
            f"snapshot {source!r}: {int(np.count_nonzero(counts > 1))} id(s) appear more than "
            f"once in column {id_name!r}, the first {ids.values[code]!r} on {row_label}s "
            f"{int(lines[first])} and {int(lines[second])}; an individual may have at most one "
            "row per snapshot: merge or remove the duplicates"
        )
    return RawSnapshot(
        ids=ids.decode(),
        source=source,
        digest=digest,
        lines=lines,
        qid_columns=qid,
        sensitive_column=sensitive,
        row_label=row_label,
    )


def _as_text(values: Iterable[object]) -> list[str]:
    return [
        "" if v is None else (v if isinstance(v, str) else str(v)).strip(BLANKS) for v in values
    ]


def factorize_strings(values: Sequence[str]) -> Factorized:
    """The :class:`Factorized` form of ``values``: distinct values in order of first appearance."""
    distinct = dict.fromkeys(values)  # in order of first appearance
    if len(distinct) == len(values):  # all distinct (ids): row i has code i
        codes = np.arange(len(values), dtype=np.int32)
        return Factorized(tuple(distinct), codes, codes.astype(np.int64))
    index = {v: i for i, v in enumerate(distinct)}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))
    return Factorized(tuple(index), codes, first_rows(codes))


def first_rows(codes: NDArray[np.int32]) -> NDArray[np.int64]:
    """Row of each code's first appearance, for codes numbered in order of first appearance."""
    if codes.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    running = np.maximum.accumulate(codes)
    new = np.empty(codes.shape[0], dtype=bool)
    new[0] = True
    new[1:] = running[1:] > running[:-1]
    return np.flatnonzero(new).astype(np.int64)
