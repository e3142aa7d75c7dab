"""The file store's merge of a release's histories into the stored ones, against a dict."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_release.history._csr import merge_rows
from stream_release.history.types import PSEUDONYM_DTYPE

ENTRY = np.dtype([("value", "<u4")])

# few distinct first bytes: pseudonyms sharing their first 8 bytes compare on the last 8
pseudonyms = st.binary(min_size=16, max_size=16).map(lambda b: bytes([b[0] % 3]) * 8 + b[8:])
rows = st.dictionaries(pseudonyms, st.lists(st.integers(0, 9), max_size=3), max_size=12)


def _csr(histories: dict[bytes, list[int]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    keys = sorted(histories)
    ps = np.array(keys, dtype=PSEUDONYM_DTYPE)
    counts = [len(histories[k]) for k in keys]
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    entries = np.array([(v,) for k in keys for v in histories[k]], dtype=ENTRY)
    return ps, indptr, entries


@settings(max_examples=300, deadline=None)
@given(old=rows, new=rows, keep_empty=st.booleans())
def test_the_merge_replaces_inserts_and_drops_as_a_dict_does(
    old: dict[bytes, list[int]], new: dict[bytes, list[int]], keep_empty: bool
) -> None:
    old_ps, old_indptr, old_entries = _csr(old)
    new_ps, new_indptr, new_entries = _csr(new)
    ps, indptr, entries = merge_rows(
        old_ps,
        old_indptr,
        old_entries,
        new_ps,
        new_indptr[:-1],
        np.diff(new_indptr),
        new_entries,
        keep_empty=keep_empty,
    )
    expected = {**old, **new}
    if not keep_empty:
        expected = {k: v for k, v in expected.items() if v or k not in new}
    got = {
        ps[i : i + 1].tobytes(): entries["value"][indptr[i] : indptr[i + 1]].tolist()
        for i in range(ps.shape[0])
    }
    assert got == expected
    assert [ps[i : i + 1].tobytes() for i in range(ps.shape[0])] == sorted(expected)


@settings(max_examples=300, deadline=None)
@given(
    haystack=st.lists(pseudonyms, unique=True, max_size=15),
    needles=st.lists(pseudonyms, max_size=15),
)
def test_lookups_find_each_needle_where_a_dict_does(
    haystack: list[bytes], needles: list[bytes]
) -> None:
    from stream_release.history._csr import lookup_pseudonyms

    keys = sorted(haystack)
    where = lookup_pseudonyms(
        np.array(keys, dtype=PSEUDONYM_DTYPE), np.array(needles, dtype=PSEUDONYM_DTYPE)
    )
    index = {k: i for i, k in enumerate(keys)}
    assert where.tolist() == [index.get(n, -1) for n in needles]
