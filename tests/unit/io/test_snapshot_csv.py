"""The two ways ``read_snapshot`` reads a CSV body agree, and pyarrow reads only its own memory.

A body without quotes is read by pyarrow (``_parse_plain``), one with quotes by :mod:`csv`
(``_parse_quoted``); on a body without quotes both must give the same columns (values, codes,
first rows), the same line numbers and the same message for a ragged row.

pyarrow's multithreaded reader is given copies in memory pyarrow owns, never memory Python
owns: a buffer over a Python object, released on one of pyarrow's threads while the
interpreter shut down after a bad snapshot's error, aborted the process (issue 26 item 8; the
mechanism is in :func:`stream_release.io.snapshot_csv._arrow_copy`). The last two tests check
that cause, deterministically; ``tests/bad_input_runs.py`` counts the exit codes of many runs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray
from support.data import adult_snapshot
from support.hostile_files import HOSTILE_SNAPSHOTS

from stream_release.config import SchemaSettings
from stream_release.devtools.datasets import ADULT_QID, ADULT_SENSITIVE
from stream_release.errors import SchemaError
from stream_release.io import snapshot_csv
from stream_release.io.snapshot import Factorized
from stream_release.io.snapshot_csv import _arrow_copy, _parse_quoted, read_snapshot

Parse = Callable[[str, bytes, int, str, int, list[int]], tuple[list[Factorized], NDArray[np.int64]]]
Read = tuple[list[int], list[tuple[tuple[str, ...], list[int], list[int]]]] | str

N_FIELDS = 4
POSITIONS = [2, 0, 3]

fields = st.sampled_from(["x", "y", " x", "x\t", "", "  ", "é", "10", "p1", "p2"])
rows = st.one_of(
    st.lists(fields, min_size=N_FIELDS, max_size=N_FIELDS),  # a row
    st.lists(fields, min_size=N_FIELDS - 1, max_size=N_FIELDS + 1),  # maybe ragged
    st.sampled_from([[""], [" "], [" \t "]]),  # a blank line
)
line_ends = st.sampled_from(["\n", "\r\n", "\r"])

POOL = ThreadPoolExecutor(max_workers=2)
"""The pool pyarrow's path factorizes its columns on, as ``read_snapshot`` gives it one."""


def _parse_plain(
    source: str, data: bytes, body: int, delimiter: str, n_fields: int, positions: list[int]
) -> tuple[list[Factorized], NDArray[np.int64]]:
    body_bytes = _arrow_copy(np.frombuffer(data, dtype=np.uint8)[body:])
    return snapshot_csv._parse_plain(source, body_bytes, delimiter, n_fields, positions, POOL)


def _read(parse: Parse, data: bytes, delimiter: str) -> Read:
    try:
        columns, lines = parse("s.csv", data, 0, delimiter, N_FIELDS, POSITIONS)
    except SchemaError as exc:
        return str(exc)
    assert lines.dtype == np.int64
    return lines.tolist(), [(c.values, c.codes.tolist(), c.first.tolist()) for c in columns]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(rows, line_ends), max_size=12),
    st.sampled_from([";", ","]),
    st.booleans(),
)
def test_pyarrow_reads_what_the_csv_module_reads(
    body: list[tuple[list[str], str]], delimiter: str, last_line_ended: bool
) -> None:
    text = "".join(delimiter.join(row) + end for row, end in body)
    if not last_line_ended:
        text = text.rstrip("\r\n")
    data = text.encode()
    assert _read(_parse_plain, data, delimiter) == _read(_parse_quoted, data, delimiter)


def test_a_line_longer_than_pyarrows_block_is_read() -> None:
    long = "v" * (3 << 20)
    data = f"p1;x;{long};y\r\n \r\np2;x;z;y\r\n".encode()
    read = _read(_parse_plain, data, ";")
    assert not isinstance(read, str)
    lines, columns = read
    assert lines == [2, 4] and columns[0][0] == (long, "z")


def _inside(inner: pa.Buffer, outer: pa.Buffer) -> bool:
    return (
        outer.address <= inner.address and inner.address + inner.size <= outer.address + outer.size
    )


def test_the_copy_pyarrow_reads_holds_no_python_object() -> None:
    # a buffer over Python memory (pa.py_buffer: what the reader was given before) holds a
    # reference to the Python object, which its destructor releases under the GIL on whichever
    # thread drops the buffer last; a copy in pyarrow's memory holds none
    view = np.frombuffer(b"p1;x;y\r\np2;x;z\r\n", dtype=np.uint8)
    alone = sys.getrefcount(view)
    over_python = pa.py_buffer(view)
    assert sys.getrefcount(view) == alone + 1
    del over_python
    copy = _arrow_copy(view)
    assert sys.getrefcount(view) == alone
    assert copy.to_pybytes() == view.tobytes()
    assert not _inside(copy, pa.py_buffer(view)) and copy.address != view.ctypes.data
    assert _arrow_copy(view[:0]).size == 0


@pytest.fixture(scope="module")
def adult_300(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 300 rows of Adult, as the hostile snapshots spoil them."""
    return adult_snapshot(shared_data, tmp_path_factory.mktemp("adult") / "valid.csv", 300)


@pytest.mark.parametrize(
    "name",
    [
        "not-utf8-value-ff",  # pyarrow reads the body once; the error comes after the read
        "not-utf8-after-a-blank-line",  # refused on the blank line, then read without it
        "ragged-row",  # pyarrow refuses the row; the error comes from the line count
    ],
)
def test_pyarrow_reads_only_copies_it_owns(
    adult_300: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # every buffer the reader reads lies in memory pyarrow allocated (the file read into it,
    # or a copy of its rows), none in Python's: the hostile snapshots that reach pyarrow, each
    # refused after its read
    copies: list[pa.Buffer] = []
    read: list[pa.Buffer] = []
    real_allocate, real_read = snapshot_csv._arrow_buffer, pa_csv.read_csv

    def allocate_spy(size: int) -> pa.Buffer:
        copies.append(real_allocate(size))
        return copies[-1]

    def read_spy(input_file: pa.BufferReader, **options: object) -> pa.Table:
        read.append(input_file.read_buffer())  # what pyarrow will read, in place
        input_file.seek(0)
        return real_read(input_file, **options)

    monkeypatch.setattr(snapshot_csv, "_arrow_buffer", allocate_spy)
    monkeypatch.setattr(pa_csv, "read_csv", read_spy)
    hostile = {h.name: h for h in HOSTILE_SNAPSHOTS}[name]
    path = hostile.write(adult_300, tmp_path / "hostile.csv")
    schema = SchemaSettings(id="id", sensitive=ADULT_SENSITIVE, qid=ADULT_QID)
    with pytest.raises(SchemaError) as info:
        read_snapshot(path, schema)
    assert all(s in str(info.value) for s in hostile.says)
    assert len(read) == (2 if "blank" in name else 1)
    assert all(any(_inside(r, c) for c in copies) for r in read)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=4), max_size=40))
def test_all_distinct_answers_as_a_set_does(strings: list[bytes]) -> None:
    from stream_release.io._distinct import all_distinct

    offsets = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in strings], out=offsets[1:])
    data = np.frombuffer(b"".join(strings) or b"\0", dtype=np.uint8)
    assert all_distinct(data, offsets) == (len(set(strings)) == len(strings))
