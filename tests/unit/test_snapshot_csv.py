"""The two ways ``read_snapshot`` reads a CSV body agree.

A body without quotes is read by pyarrow (``_parse_plain``), one with quotes by :mod:`csv`
(``_parse_quoted``); on a body without quotes both must give the same columns (values, codes,
first rows), the same line numbers and the same message for a ragged row.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from stream_release.errors import SchemaError
from stream_release.io.snapshot import Factorized
from stream_release.io.snapshot_csv import _parse_plain, _parse_quoted

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
