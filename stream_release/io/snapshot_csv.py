"""Read one CSV snapshot and validate it against the schema.

Reading checks the columns exist and every row has the header's number of fields, then builds
the :class:`~stream_release.io.snapshot.RawSnapshot` (empty or repeated ids are checked there).
Every column the schema names is factorized once, as it is read.

CSV dialect
-----------
* A header row, then one row per individual. The delimiter is ``;`` if the header line holds
  more ``;`` than ``,``, else ``,``.
* UTF-8, with or without a byte-order mark; ``\\n``, ``\\r\\n`` or ``\\r`` line endings.
* Spaces and tabs around a field are removed. Lines holding only spaces and tabs are skipped.
* Fields may be quoted (``"a;b"``, ``""`` for a quote; spaces may surround the quotes). A file
  without any ``"`` after the header is read by pyarrow's CSV reader with quoting off, which
  also factorizes each column (``dictionary_encode``), so that only the distinct values of a
  column become Python strings. Files with quotes go through :mod:`csv`, several times slower
  but identical in result: pyarrow takes a quote only as a field's first character, where
  :mod:`csv` (with ``skipinitialspace``) also takes it after spaces.

pyarrow reads a copy of the body in memory pyarrow owns, never the file's bytes in place: see
:func:`_arrow_copy` for why (a process that ended right after a refused snapshot aborted).
"""

from __future__ import annotations

import codecs
import csv
import hashlib
import io
import os
import re
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv
from numpy.typing import NDArray

from stream_release.config import SchemaSettings
from stream_release.core.grouping.threads import available_threads
from stream_release.errors import SchemaError
from stream_release.io._distinct import all_distinct
from stream_release.io.snapshot import (
    BLANKS,
    Factorized,
    RawSnapshot,
    assemble_snapshot,
    factorize_strings,
    first_rows,
)

__all__ = ["read_snapshot"]

_LF, _CR, _TAB, _SPACE = 10, 13, 9, 32

_LINE_END = re.compile(rb"[\r\n]")
_QUOTE = re.compile(rb'"')
"""Searched for in a memoryview (``bytes.find`` needs a copy of the file as ``bytes``)."""

_BLOCK_SIZE = 1 << 20
"""pyarrow's CSV block size (its default); a line longer than a block is read in one block."""


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
        data = _read_file(file)
    except FileNotFoundError:
        raise SchemaError(f"snapshot {source!r} does not exist; check the path") from None
    except OSError as exc:
        raise SchemaError(f"snapshot {source!r} cannot be read: {exc.strerror or exc}") from exc
    with ThreadPoolExecutor(max_workers=available_threads()) as pool:
        # hashlib and pyarrow's compute functions let go of the GIL: the file's hash and the
        # columns' factorizations run beside the parse
        digest = pool.submit(_sha256, data)
        snapshot = _read_body(source, data, schema, digest.result, pool)
    del data
    # pyarrow's allocator (mimalloc) keeps the pages of the file and its parsed table for
    # reuse: 240 MiB at a million rows that the release would hold on top of its own memory
    pa.default_memory_pool().release_unused()
    return snapshot


def _read_file(file: Path) -> pa.Buffer:
    """The file's bytes, read straight into memory pyarrow owns (:func:`_arrow_copy` says why
    pyarrow's reader needs that; reading there saves copying a million rows' bytes)."""
    with file.open("rb") as stream:
        buffer = _arrow_buffer(os.fstat(stream.fileno()).st_size)
        read = stream.readinto(memoryview(buffer))
        more = stream.read()  # the file grew while it was read
    if more:
        return _arrow_copy(np.frombuffer(buffer.to_pybytes() + more, dtype=np.uint8))
    return buffer.slice(0, read)


def _sha256(data: pa.Buffer) -> str:
    return hashlib.sha256(memoryview(data)).hexdigest()


def _read_body(
    source: str,
    data: pa.Buffer,
    schema: SchemaSettings,
    digest: Callable[[], str],
    pool: Executor,
) -> RawSnapshot:
    """The snapshot of the file's bytes ``data``, whose hash ``digest`` gives."""
    view = memoryview(data)
    start = len(codecs.BOM_UTF8) if bytes(view[:3]) == codecs.BOM_UTF8 else 0
    header_end = _line_end(view, start)
    header_bytes = bytes(view[start:header_end])
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
        name.strip(BLANKS)
        for name in next(csv.reader([header_text], delimiter=delimiter, skipinitialspace=True))
    ]
    wanted = [schema.id, schema.sensitive, *schema.qid]
    roles = ["schema.id", "schema.sensitive"] + ["schema.qid"] * len(schema.qid)
    positions = _find_columns(source, names, wanted, roles)

    body = header_end
    if bytes(view[body : body + 2]) == b"\r\n":
        body += 2
    elif body < len(view):
        body += 1
    if _QUOTE.search(view, body) is None:
        columns, lines = _parse_plain(
            source, data.slice(body), delimiter, len(names), positions, pool
        )
    else:
        columns, lines = _parse_quoted(
            source, data.to_pybytes(), body, delimiter, len(names), positions
        )
    if len(lines) == 0:
        raise SchemaError(
            f"snapshot {source!r} has a header but no rows: a release of nobody says nothing "
            "and would still count as one; give it the snapshot's rows, or skip this period"
        )
    return assemble_snapshot(
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


def _line_end(data: memoryview, start: int) -> int:
    end = _LINE_END.search(data, start)
    return len(data) if end is None else end.start()


def _ragged_row(source: str, line: int, fields: int, n_fields: int, delimiter: str) -> SchemaError:
    return SchemaError(
        f"snapshot {source!r}, line {line}: {fields} field(s) where the header has {n_fields}; "
        f"fix the row (a value containing {delimiter!r} must be quoted)"
    )


# --------------------------------------------------------------------------------------------
# No quotes after the header: pyarrow


def _parse_plain(
    source: str,
    body: pa.Buffer,
    delimiter: str,
    n_fields: int,
    positions: list[int],
    pool: Executor,
) -> tuple[list[Factorized], NDArray[np.int64]]:
    """The factorized columns at ``positions`` and each row's line number.

    pyarrow reads every line as a row (an empty one as a row of empty values) and refuses a
    line of blanks, a row of the wrong width and a line longer than its block. When it reads
    the body and no id is empty, row ``i`` is on line ``i + 2``. Otherwise :class:`_Lines`
    finds the first ragged row, or numbers the rows and pyarrow reads the body again without
    its blank lines.
    """
    table: pa.Table | None
    try:
        table = _read_table(body, delimiter, n_fields, positions, _BLOCK_SIZE)
    except pa.ArrowInvalid:  # a ragged row, a line of blanks or longer than a block
        table = None
    if table is None or _has_empty(table.column(0)):
        lines = _Lines(np.frombuffer(body, dtype=np.uint8), delimiter)
        lines.check_widths(source, n_fields, delimiter)
        rows = _arrow_copy(lines.rows())
        table = _read_table(rows, delimiter, n_fields, positions, lines.block_size)
        numbers = lines.row_numbers()
    else:
        numbers = np.arange(2, table.num_rows + 2, dtype=np.int64)
    # on ``pool``, the columns in order: the first column's error is the one raised
    factorized = [pool.submit(_factorize_ids, source, table.column(0), numbers)]
    factorized += [
        pool.submit(_factorize_column, source, table.column(k), numbers)
        for k in range(1, len(positions))
    ]
    return [f.result() for f in factorized], numbers


def _has_empty(column: pa.ChunkedArray) -> bool:
    """Whether a value of ``column`` is empty (or missing)."""
    return bool(column.null_count > 0 or pc.min(pc.binary_length(column)).as_py() == 0)


def _read_table(
    body: pa.Buffer, delimiter: str, n_fields: int, positions: list[int], block_size: int
) -> pa.Table:
    """Columns ``positions`` (in that order) of the headerless CSV ``body``, as bytes.

    ``body`` must be memory that pyarrow owns (:func:`_arrow_copy`).
    """
    names = [f"f{i}" for i in range(n_fields)]
    wanted = [names[p] for p in positions]
    if body.size == 0:
        return pa.table({name: pa.array([], type=pa.binary()) for name in wanted})
    return pa_csv.read_csv(
        pa.BufferReader(body),
        read_options=pa_csv.ReadOptions(column_names=names, block_size=block_size),
        parse_options=pa_csv.ParseOptions(
            delimiter=delimiter, quote_char=False, ignore_empty_lines=False
        ),
        convert_options=pa_csv.ConvertOptions(
            column_types=dict.fromkeys(wanted, pa.binary()), include_columns=wanted
        ),
    )


def _arrow_copy(view: NDArray[np.uint8]) -> pa.Buffer:
    """A copy of ``view`` in memory that pyarrow allocates and owns (its default pool).

    pyarrow's CSV reader must never be given memory that Python owns (``pa.py_buffer`` over
    the file's ``bytes``, as it was until issue 26 item 8). Its multithreaded reader may
    release its input on one of pyarrow's own threads after ``read_csv`` has returned: the last
    reference to the reader (``AsyncThreadedTableReader``, which holds the input stream) is in
    a callback of its read's future, run and dropped by the ``ThreadPool`` worker that
    finishes the last task (``Future::MarkFinished``). A buffer over a Python object
    (``arrow::py::PyBuffer``) takes the GIL in its destructor to release that object. When a
    snapshot is refused right after the read (bytes that are not UTF-8, a ragged row, an empty
    or repeated id), the command prints its one line and the interpreter finalizes at once;
    CPython ends a thread that takes the GIL once finalization has begun with
    ``pthread_exit``, whose forced unwind cannot pass the destructor (``noexcept``) and calls
    ``std::terminate``: "terminate called without an active exception", SIGABRT, exit 134,
    after the error line, in one run in 4 (the issue) to one in 200 (``tests/bad_input_runs.py``
    on a loaded machine). Memory that pyarrow owns is released without the GIL, on any
    thread, at any time.

    The copy is one pass over the body (40 ms for 83 MB in a warm process), within the noise of
    a whole read: ``read_snapshot`` of 1M Adult rows (91 MB), best of 4 in each of 3 fresh
    processes, took 1.29-1.42 s before the copy and 1.34-1.40 s with it.
    """
    buffer = _arrow_buffer(view.shape[0])
    np.frombuffer(buffer, dtype=np.uint8)[:] = view
    return buffer


def _arrow_buffer(size: int) -> pa.Buffer:
    """``size`` writable bytes that pyarrow allocates and owns (its default pool)."""
    return pa.allocate_buffer(size)


def _factorize_ids(source: str, column: pa.ChunkedArray, lines: NDArray[np.int64]) -> Factorized:
    """The id column, as :func:`_factorize_column` gives it. Ids are distinct in a valid
    snapshot, so their values are the column's, in order: a compiled check
    (:func:`~stream_release.io._distinct.all_distinct`) says so without pyarrow's dictionary
    encoding (a million ids: 0.2 s). A column that is not UTF-8 or repeats an id is factorized
    as any other, for its error."""
    try:
        text = column.combine_chunks().cast(pa.string())
    except pa.ArrowInvalid:
        return _factorize_column(source, column, lines)
    trimmed = pc.utf8_trim(text, characters=BLANKS)
    _, offsets, data = trimmed.buffers()
    n = len(trimmed)
    if data is None or not all_distinct(
        np.frombuffer(data, dtype=np.uint8),
        np.frombuffer(offsets, dtype=np.int32)[trimmed.offset : trimmed.offset + n + 1],
    ):
        return _factorize_column(source, column, lines)
    rows = np.arange(n, dtype=np.int64)
    return Factorized(tuple(trimmed.to_pylist()), rows.astype(np.int32), rows)


def _factorize_column(source: str, column: pa.ChunkedArray, lines: NDArray[np.int64]) -> Factorized:
    """The column's values, trimmed of blanks and decoded, in order of first appearance.

    Raises
    ------
    SchemaError
        A value that is not UTF-8 (the first one in order of first appearance, on its line).
    """
    encoded = column.combine_chunks().dictionary_encode()  # in order of first appearance
    codes = encoded.indices.to_numpy().astype(np.int32)
    try:
        text = encoded.dictionary.cast(pa.string())
    except pa.ArrowInvalid:
        for code, value in enumerate(encoded.dictionary.to_pylist()):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                line = int(lines[int(np.argmax(codes == code))])
                shown = value.strip(BLANKS.encode())
                raise SchemaError(
                    f"snapshot {source!r}, line {line}: the value {shown!r} is not UTF-8 text; "
                    "save the file as UTF-8"
                ) from None
        raise  # pragma: no cover - pyarrow and Python agree on what UTF-8 is
    trimmed = pc.utf8_trim(text, characters=BLANKS)
    if not trimmed.equals(text):  # values that differ only in blanks become one
        merged = trimmed.dictionary_encode()
        codes = merged.indices.to_numpy()[codes].astype(np.int32)
        trimmed = merged.dictionary
    values = tuple(trimmed.to_pylist())
    if len(values) == codes.shape[0]:  # all distinct (ids): row i has code i
        return Factorized(values, codes, np.arange(codes.shape[0], dtype=np.int64))
    return Factorized(values, codes, first_rows(codes))


class _Lines:
    """The lines of a headerless CSV body: ``\\n``, ``\\r\\n`` and a lone ``\\r`` end one.

    A line is *blank* if it holds only spaces and tabs (it is skipped, but still counted). A
    line's fields are its delimiters plus one.
    """

    def __init__(self, buf: NDArray[np.uint8], delimiter: str) -> None:
        n = buf.shape[0]
        is_cr = buf == _CR
        ends_line = buf == _LF
        ends_line[:-1] |= is_cr[:-1] & (buf[1:] != _LF)
        ends_line[-1:] |= is_cr[-1:]
        stops = np.flatnonzero(ends_line)
        starts = np.concatenate(([0], stops + 1))
        if starts[-1] == n:  # nothing after the last line's end
            starts = starts[:-1]
        shown = ~((buf == _SPACE) | (buf == _TAB) | (buf == _LF) | is_cr)
        del is_cr, ends_line
        # per line (with its end, which is neither shown nor a delimiter): reduceat sums each
        # line's bytes in buffered chunks, never a running total the size of the file; every
        # line holds at least one byte, so no segment is empty
        if starts.shape[0]:
            shown_per_line = np.add.reduceat(shown, starts, dtype=np.int64)
            delimiters = np.add.reduceat(buf == ord(delimiter), starts, dtype=np.int64)
        else:
            shown_per_line = delimiters = np.zeros(0, dtype=np.int64)
        self._buf = buf
        self._lengths = np.diff(np.append(starts, n))  # with the line's end
        self.blank: NDArray[np.bool_] = shown_per_line == 0
        self.fields: NDArray[np.int64] = delimiters + 1
        self.block_size = max(_BLOCK_SIZE, int(self._lengths.max(initial=0)) + 1)

    def check_widths(self, source: str, n_fields: int, delimiter: str) -> None:
        """Raise SchemaError for the first row whose number of fields is not ``n_fields``."""
        ragged = np.flatnonzero(~self.blank & (self.fields != n_fields))
        if ragged.shape[0]:
            k = int(ragged[0])
            raise _ragged_row(source, k + 2, int(self.fields[k]), n_fields, delimiter)

    def row_numbers(self) -> NDArray[np.int64]:
        """(rows,) int64: the file line number of every row (the header is line 1)."""
        return (np.flatnonzero(~self.blank) + 2).astype(np.int64)

    def rows(self) -> NDArray[np.uint8]:
        """The body without its blank lines (a copy)."""
        return self._buf[np.repeat(~self.blank, self._lengths)]


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
            if not record or (len(record) == 1 and not record[0].strip(BLANKS)):
                continue
            if len(record) != n_fields:
                raise _ragged_row(source, line, len(record), n_fields, delimiter)
            lines.append(line)
            for column, position in zip(columns, positions, strict=True):
                column.append(record[position].strip(BLANKS))
    except csv.Error as exc:
        raise SchemaError(
            f"snapshot {source!r}, line {consumed + 2}: malformed CSV ({exc}); check the quotes"
        ) from None
    return [factorize_strings(column) for column in columns], np.asarray(lines, dtype=np.int64)
