"""Read one snapshot (CSV file or in-memory columns) and validate it against the schema.

A snapshot is a table with one row per individual: the identifier, the quasi-identifiers and
the sensitive value (docs/contract.md §1, §3). Reading checks everything that does not need the
hierarchies: the columns exist, every row has the header's number of fields, no id and no
sensitive value is empty, and no id appears twice. Encoding against the hierarchies is
:func:`stream_release.io.encoding.encode`.

Every column the schema names is *factorized* once here (distinct values in order of first
appearance plus an ``int32`` code per row, :class:`Factorized`), so that encoding never has to
hash a million Python strings again (STYLE.md rule 10).

CSV dialect
-----------
* A header row, then one row per individual. The delimiter is ``;`` if the header line holds
  more ``;`` than ``,``, else ``,``.
* UTF-8, with or without a byte-order mark; ``\\n``, ``\\r\\n`` or ``\\r`` line endings.
* Spaces and tabs around a field are removed. Lines holding only spaces and tabs are skipped.
* Fields may be quoted (``"a;b"``, ``""`` for a quote; spaces may surround the quotes). A file
  without any ``"`` after the header takes a fast path: a compiled tokenizer over the raw
  bytes, which decodes only the distinct values of each column into Python strings. Files with
  quotes go through :mod:`csv`, several times slower but identical in result.
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stream_release.config import SchemaSettings
from stream_release.errors import SchemaError

MEMORY_SOURCE = "<memory>"
"""``source`` of a snapshot built from in-memory columns."""

_BLANKS = " \t"


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
        return table[self.codes]


@dataclass(frozen=True, eq=False)
class RawSnapshot:
    """A validated snapshot before encoding: raw strings, one row per individual.

    Attributes
    ----------
    ids : (n,) object
        Identifiers (``str``), non-empty and distinct.
    qid : dict of str to (n,) object
        Raw value (``str``) of every quasi-identifier, in ``schema.qid`` order.
    sensitive : (n,) object
        Sensitive value (``str``) of every row, non-empty.
    source : str
        The file path, or ``"<memory>"``.
    sha256 : str
        Hex SHA-256 of the file's bytes (in-memory: of the canonical form described in
        :func:`snapshot_from_columns`).
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
    qid: dict[str, NDArray[np.object_]]
    sensitive: NDArray[np.object_]
    source: str
    sha256: str
    lines: NDArray[np.int64]
    qid_columns: dict[str, Factorized]
    sensitive_column: Factorized
    row_label: Literal["line", "record"] = "line"

    @property
    def n_rows(self) -> int:
        return int(self.ids.shape[0])

    def locate(self, row: int) -> str:
        """Human position of row ``row`` (0-based index), e.g. ``"line 17"``."""
        return f"{self.row_label} {int(self.lines[row])}"


# --------------------------------------------------------------------------------------------
# Public constructors


def read_snapshot(path: Path | str, schema: SchemaSettings) -> RawSnapshot:
    """Read and validate the CSV snapshot at ``path``.

    Parameters
    ----------
    path : the CSV file (header row; ``,`` or ``;``; see the module docstring for the dialect)
    schema : names the id, sensitive and QID columns; other columns are ignored

    Raises
    ------
    SchemaError
        One line naming the file, the column or line, the value and the fix: unreadable or
        empty file, a header without rows, missing column, a row with the wrong number of
        fields, text that is not UTF-8, an empty id or sensitive value, an id that appears more
        than once.
    """
    file = Path(path)
    source = str(file)
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        raise SchemaError(f"snapshot {source!r} does not exist; check the path") from None
    except OSError as exc:
        raise SchemaError(f"snapshot {source!r} cannot be read: {exc.strerror or exc}") from exc
    digest = hashlib.sha256(data).hexdigest()

    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    header_end = _line_end(data, start)
    header_bytes = data[start:header_end]
    if not header_bytes.strip():
        raise SchemaError(
            f"snapshot {source!r} is empty or its first line is blank; it needs a header row "
            f"naming the columns {_quoted([schema.id, schema.sensitive, *schema.qid])}"
        )
    try:
        header_text = header_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise SchemaError(
            f"snapshot {source!r}, line 1: the header is not UTF-8 text; save the file as UTF-8"
        ) from None
    delimiter = ";" if header_text.count(";") > header_text.count(",") else ","
    names = [
        name.strip(_BLANKS)
        for name in next(csv.reader([header_text], delimiter=delimiter, skipinitialspace=True))
    ]
    wanted = [schema.id, schema.sensitive, *schema.qid]
    roles = ["schema.id", "schema.sensitive"] + ["schema.qid"] * len(schema.qid)
    positions = _find_columns(source, names, wanted, roles)

    body = header_end
    if data.startswith(b"\r\n", body):
        body += 2
    elif body < len(data):
        body += 1
    if data.find(b'"', body) < 0:
        columns, lines = _parse_plain(source, data, body, delimiter, len(names), positions)
    else:
        columns, lines = _parse_quoted(source, data, body, delimiter, len(names), positions)
    if len(lines) == 0:
        raise SchemaError(
            f"snapshot {source!r} has a header but no rows: a release of nobody says nothing "
            "and would still count as one; give it the snapshot's rows, or skip this period"
        )
    return _assemble(
        source,
        digest,
        lines,
        "line",
        id_name=schema.id,
        sensitive_name=schema.sensitive,
        ids=columns[0],
        sensitive=columns[1],
        qid=dict(zip(schema.qid, columns[2:], strict=True)),
    )


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
    return _assemble(
        source,
        _canonical_digest(columns),
        np.arange(1, n + 1, dtype=np.int64),
        "record",
        id_name="id",
        sensitive_name="sensitive",
        ids=_factorize_strings(id_values),
        sensitive=_factorize_strings(sensitive_values),
        qid={name: _factorize_strings(v) for name, v in qid_values.items()},
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
        column = _factorize_strings([row[j] for row in texts])
        per_row = column.codes[row_codes]
        columns.append(Factorized(column.values, per_row, _first_rows(per_row)))
    sensitive, qid = columns[-1], dict(zip(qid_names, columns[:-1], strict=True))
    digest = _canonical_digest(
        [
            ("id", id_values),
            ("sensitive", sensitive.decode().tolist()),
            *((name, column.decode().tolist()) for name, column in qid.items()),
        ]
    )
    return _assemble(
        source,
        digest,
        np.arange(1, n + 1, dtype=np.int64),
        "record",
        id_name="id",
        sensitive_name="sensitive",
        ids=_factorize_strings(id_values),
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
# Validation shared by both constructors


def _assemble(
    source: str,
    digest: str,
    lines: NDArray[np.int64],
    row_label: Literal["line", "record"],
    *,
    id_name: str,
    sensitive_name: str,
    ids: Factorized,
    sensitive: Factorized,
    qid: dict[str, Factorized],
) -> RawSnapshot:
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
        qid={name: column.decode() for name, column in qid.items()},
        sensitive=sensitive.decode(),
        source=source,
        sha256=digest,
        lines=lines,
        qid_columns=qid,
        sensitive_column=sensitive,
        row_label=row_label,
    )


def _find_columns(source: str, names: list[str], wanted: list[str], roles: list[str]) -> list[int]:
    positions = []
    for name, role in zip(wanted, roles, strict=True):
        found = [i for i, header in enumerate(names) if header == name]
        if not found:
            raise SchemaError(
                f"snapshot {source!r} has no column {name!r} ({role}); columns found: "
                f"{_quoted(names)}; rename the column or fix {role}"
            )
        if len(found) > 1:
            raise SchemaError(
                f"snapshot {source!r}: column {name!r} ({role}) appears {len(found)} times in the "
                "header; keep one"
            )
        positions.append(found[0])
    return positions


def _quoted(names: Sequence[str]) -> str:
    return ", ".join(repr(n) for n in names)


def _as_text(values: Iterable[object]) -> list[str]:
    return [
        "" if v is None else (v if isinstance(v, str) else str(v)).strip(_BLANKS) for v in values
    ]


def _factorize_strings(values: Sequence[str]) -> Factorized:
    distinct = dict.fromkeys(values)  # in order of first appearance
    if len(distinct) == len(values):  # all distinct (ids): row i has code i
        codes = np.arange(len(values), dtype=np.int32)
        return Factorized(tuple(distinct), codes, codes.astype(np.int64))
    index = {v: i for i, v in enumerate(distinct)}
    codes = np.fromiter(map(index.__getitem__, values), dtype=np.int32, count=len(values))
    return Factorized(tuple(index), codes, _first_rows(codes))


def _first_rows(codes: NDArray[np.int32]) -> NDArray[np.int64]:
    """Row of each code's first appearance, for codes numbered in order of first appearance."""
    if codes.shape[0] == 0:
        return np.empty(0, dtype=np.int64)
    running = np.maximum.accumulate(codes)
    new = np.empty(codes.shape[0], dtype=bool)
    new[0] = True
    new[1:] = running[1:] > running[:-1]
    return np.flatnonzero(new).astype(np.int64)


def _line_end(data: bytes, start: int) -> int:
    ends = [i for i in (data.find(b"\n", start), data.find(b"\r", start)) if i >= 0]
    return min(ends) if ends else len(data)


# --------------------------------------------------------------------------------------------
# Fast path: no quotes after the header


def _parse_plain(
    source: str, data: bytes, body: int, delimiter: str, n_fields: int, positions: list[int]
) -> tuple[list[Factorized], NDArray[np.int64]]:
    buf = np.frombuffer(data, dtype=np.uint8)
    slot = np.full(n_fields, -1, dtype=np.int64)
    for k, position in enumerate(positions):
        slot[position] = k
    starts, ends, lines, n_rows, bad_line, bad_fields = _tokenize(
        buf, body, ord(delimiter), n_fields, slot, len(positions), 2
    )
    if bad_line >= 0:
        raise SchemaError(
            f"snapshot {source!r}, line {bad_line}: {bad_fields} field(s) where the header has "
            f"{n_fields}; fix the row (a value containing {delimiter!r} must be quoted)"
        )
    lines = lines[:n_rows].copy()
    columns = []
    for k in range(len(positions)):
        s = np.ascontiguousarray(starts[:n_rows, k])
        e = np.ascontiguousarray(ends[:n_rows, k])
        codes, reps = _factorize_slices(buf, s, e)
        values = _decode_slices(source, data, buf, s[reps], e[reps], lines[reps])
        columns.append(Factorized(values, codes, reps))
    return columns, lines


def _decode_slices(
    source: str,
    data: bytes,
    buf: NDArray[np.uint8],
    starts: NDArray[np.int64],
    ends: NDArray[np.int64],
    lines: NDArray[np.int64],
) -> tuple[str, ...]:
    if starts.shape[0] == 0:
        return ()
    joined = _join_slices(buf, starts, ends).tobytes()
    try:
        return tuple(joined.decode("utf-8").split("\n"))
    except UnicodeDecodeError:
        for s, e, line in zip(starts.tolist(), ends.tolist(), lines.tolist(), strict=True):
            try:
                data[s:e].decode("utf-8")
            except UnicodeDecodeError:
                raise SchemaError(
                    f"snapshot {source!r}, line {line}: the value {data[s:e]!r} is not UTF-8 "
                    "text; save the file as UTF-8"
                ) from None
        raise  # pragma: no cover - a slice that fails only when joined cannot exist


@njit(cache=True)
def _tokenize(buf, pos, delim, n_fields, slot, n_slots, first_line):  # pragma: no cover - jit
    """Split ``buf[pos:]`` into lines and fields; keep the (trimmed) fields with ``slot >= 0``.

    Returns ``starts, ends`` (rows, n_slots) int64 byte offsets, ``lines`` (rows,) line
    numbers, the number of rows, and the first line whose field count differs from
    ``n_fields`` (-1 if none) with its count. Blank lines are skipped.
    """
    n = buf.shape[0]
    cap = 1
    for i in range(pos, n):
        if buf[i] == 10 or buf[i] == 13:
            cap += 1
    starts = np.empty((cap, n_slots), dtype=np.int64)
    ends = np.empty((cap, n_slots), dtype=np.int64)
    lines = np.empty(cap, dtype=np.int64)
    row = 0
    line = first_line
    i = pos
    while i < n:
        field = 0
        field_start = i
        blank = True
        j = i
        while True:
            at_end = j >= n
            c = 0 if at_end else buf[j]
            if at_end or c == 10 or c == 13 or c == delim:
                if field < n_fields:
                    k = slot[field]
                    if k >= 0:
                        s = field_start
                        e = j
                        while s < e and (buf[s] == 32 or buf[s] == 9):
                            s += 1
                        while e > s and (buf[e - 1] == 32 or buf[e - 1] == 9):
                            e -= 1
                        starts[row, k] = s
                        ends[row, k] = e
                field += 1
                if at_end or c != delim:
                    break
                field_start = j + 1
            elif c != 32 and c != 9:
                blank = False
            j += 1
        if not (blank and field == 1):
            if field != n_fields:
                return starts, ends, lines, row, line, field
            lines[row] = line
            row += 1
        if j + 1 < n and buf[j] == 13 and buf[j + 1] == 10:
            j += 2
        else:
            j += 1
        i = j
        line += 1
    return starts, ends, lines, row, -1, 0


@njit(cache=True)
def _factorize_slices(buf, starts, ends):  # pragma: no cover - jit
    """Codes (first-appearance order, int32) and first rows of the byte strings
    ``buf[starts[i]:ends[i]]``: open addressing on a 64-bit FNV-1a hash (bytes compared on a
    hash match); the table doubles when half full."""
    n = starts.shape[0]
    size = 1024
    mask = np.uint64(size - 1)
    table = np.full(size, -1, dtype=np.int64)
    codes = np.empty(n, dtype=np.int32)
    reps = np.empty(n, dtype=np.int64)
    hashes = np.empty(n, dtype=np.uint64)
    n_unique = 0
    for r in range(n):
        s = starts[r]
        e = ends[r]
        h = np.uint64(14695981039346656037)
        for p in range(s, e):
            h = (h ^ np.uint64(buf[p])) * np.uint64(1099511628211)
        h ^= h >> np.uint64(29)
        h *= np.uint64(0xBF58476D1CE4E5B9)
        h ^= h >> np.uint64(32)
        idx = h & mask
        while True:
            u = table[idx]
            if u < 0:
                table[idx] = n_unique
                reps[n_unique] = r
                hashes[n_unique] = h
                codes[r] = n_unique
                n_unique += 1
                break
            if hashes[u] == h:
                q = reps[u]
                qs = starts[q]
                if ends[q] - qs == e - s:
                    same = True
                    for p in range(e - s):
                        if buf[qs + p] != buf[s + p]:
                            same = False
                            break
                    if same:
                        codes[r] = u
                        break
            idx = (idx + np.uint64(1)) & mask
        if 2 * n_unique > size:
            size *= 2
            mask = np.uint64(size - 1)
            table = np.full(size, -1, dtype=np.int64)
            for v in range(n_unique):
                idx = hashes[v] & mask
                while table[idx] >= 0:
                    idx = (idx + np.uint64(1)) & mask
                table[idx] = v
    return codes, reps[:n_unique].copy()


@njit(cache=True)
def _join_slices(buf, starts, ends):  # pragma: no cover - jit
    """The byte strings ``buf[starts[i]:ends[i]]`` joined by ``\\n`` (uint8 array)."""
    total = 0
    for i in range(starts.shape[0]):
        total += ends[i] - starts[i] + 1
    out = np.empty(max(total - 1, 0), dtype=np.uint8)
    o = 0
    for i in range(starts.shape[0]):
        if i > 0:
            out[o] = 10
            o += 1
        for p in range(starts[i], ends[i]):
            out[o] = buf[p]
            o += 1
    return out


# --------------------------------------------------------------------------------------------
# Quoted path: the csv module


def _parse_quoted(
    source: str, data: bytes, body: int, delimiter: str, n_fields: int, positions: list[int]
) -> tuple[list[Factorized], NDArray[np.int64]]:
    try:
        text = data[body:].decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: body + exc.start].count(b"\n") + 1
        raise SchemaError(
            f"snapshot {source!r}, line {line}: the bytes {exc.object[exc.start : exc.end]!r} "
            "are not UTF-8 text; save the file as UTF-8"
        ) from None
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, skipinitialspace=True)
    columns: list[list[str]] = [[] for _ in positions]
    lines: list[int] = []
    consumed = 0
    try:
        for record in reader:
            line = consumed + 2  # the header is line 1
            consumed = reader.line_num
            if not record or (len(record) == 1 and not record[0].strip(_BLANKS)):
                continue
            if len(record) != n_fields:
                raise SchemaError(
                    f"snapshot {source!r}, line {line}: {len(record)} field(s) where the header "
                    f"has {n_fields}; fix the row (a value containing {delimiter!r} must be "
                    "quoted)"
                )
            lines.append(line)
            for column, position in zip(columns, positions, strict=True):
                column.append(record[position].strip(_BLANKS))
    except csv.Error as exc:
        raise SchemaError(
            f"snapshot {source!r}, line {consumed + 2}: malformed CSV ({exc}); check the quotes"
        ) from None
    return [_factorize_strings(column) for column in columns], np.asarray(lines, dtype=np.int64)
