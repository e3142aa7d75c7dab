"""The assembled group lines are byte for byte what orjson writes for the same lines."""

from __future__ import annotations

from itertools import pairwise
from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.typing import NDArray

from stream_release.core.grouping.generalize import GeneralizedColumn
from stream_release.io.file_assembly import assignment_rows, encode_generalized_lines
from stream_release.io.release_files import encode_lines, group_lines

texts = st.text(max_size=6)  # quotes, backslashes, control and non-ASCII characters included
values = st.one_of(
    texts,
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.lists(st.one_of(texts, st.integers(0, 99)), min_size=2, max_size=3),
)


class Release(NamedTuple):
    label: str
    sequence: int
    sizes: NDArray[np.int64]
    columns: list[GeneralizedColumn]
    names: tuple[str, ...]
    ptr: NDArray[np.int64]
    value: NDArray[np.int32]
    count: NDArray[np.int64]
    first: int
    virtual: NDArray[np.int64] | None


@st.composite
def releases(draw: st.DrawFn) -> Release:
    n_groups = draw(st.integers(0, 12))
    columns = []
    for j in range(draw(st.integers(0, 3))):
        shown = draw(st.lists(values, min_size=1, max_size=4))
        index = draw(st.lists(st.integers(0, len(shown) - 1), min_size=n_groups, max_size=n_groups))
        columns.append(GeneralizedColumn(draw(texts) + str(j), shown, np.array(index, np.int64)))
    names = tuple(draw(st.lists(texts, min_size=1, max_size=4, unique=True)))
    pairs = [
        sorted(
            draw(
                st.dictionaries(st.integers(0, len(names) - 1), st.integers(1, 10**6), max_size=3)
            ).items()
        )
        for _ in range(n_groups)
    ]
    ptr = np.cumsum([0, *map(len, pairs)]).astype(np.int64)
    flat = [p for group in pairs for p in group]
    value = np.array([v for v, _ in flat], dtype=np.int32)
    count = np.array([c for _, c in flat], dtype=np.int64)
    sizes = np.array(
        draw(st.lists(st.integers(1, 10**7), min_size=n_groups, max_size=n_groups)), np.int64
    )
    virtual = draw(
        st.one_of(st.none(), st.lists(st.integers(0, 99), min_size=n_groups, max_size=n_groups))
    )
    return Release(
        draw(texts.filter(bool)),
        draw(st.integers(1, 10**6)),
        sizes,
        columns,
        names,
        ptr,
        value,
        count,
        draw(st.integers(0, 10**9)),
        None if virtual is None else np.array(virtual, np.int64),
    )


@settings(max_examples=400, deadline=None, derandomize=True, database=None)
@given(releases())
def test_assembled_lines_equal_orjson_lines(release: Release) -> None:
    r = release
    qids = [{c.name: c.values[int(c.index[g])] for c in r.columns} for g in range(len(r.sizes))]
    sensitive = [
        {r.names[v]: n for v, n in zip(r.value[a:b].tolist(), r.count[a:b].tolist(), strict=True)}
        for a, b in pairwise(r.ptr.tolist())
    ]
    lines = list(group_lines(r.label, r.sequence, r.sizes, qids, None, sensitive, r.first))
    if r.virtual is not None:
        for line, n in zip(lines, r.virtual.tolist(), strict=True):
            line["virtual"] = n
    got = encode_generalized_lines(
        r.label,
        r.sequence,
        r.sizes,
        r.columns,
        r.names,
        r.ptr,
        r.value,
        r.count,
        first_group=r.first,
        virtual=r.virtual,
    )
    assert got == encode_lines(lines)


def test_the_kernels_refuse_inputs_of_other_lengths() -> None:
    """They have no bounds checks: the wrappers check every length first."""
    column = GeneralizedColumn("age", ["30-39"], np.zeros(2, np.int64))
    ptr, value, count = np.array([0, 1, 1]), np.array([0], np.int32), np.array([2])
    sizes = np.array([2, 3], np.int64)
    encode_generalized_lines("r", 1, sizes, [column], ("flu",), ptr, value, count)
    with pytest.raises(ValueError, match="virtual has 1 entries for 2"):
        encode_generalized_lines(
            "r", 1, sizes, [column], ("flu",), ptr, value, count, virtual=np.zeros(1, np.int64)
        )
    short = GeneralizedColumn("age", ["30-39"], np.zeros(1, np.int64))
    with pytest.raises(ValueError, match="column 'age' index has 1 entries for 2"):
        encode_generalized_lines("r", 1, sizes, [short], ("flu",), ptr, value, count)
    with pytest.raises(ValueError, match="never negative"):
        encode_generalized_lines("r", 1, -sizes, [column], ("flu",), ptr, value, count)
    with pytest.raises(ValueError, match="lengths has 1 entries for 2"):
        assignment_rows("ab", np.array([2]), np.array([0, 1]), None)
    with pytest.raises(ValueError, match="add up to 3, not 2"):
        assignment_rows("ab", np.array([1, 2]), np.array([0, 1]), None)
