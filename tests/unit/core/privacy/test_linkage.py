"""The compiled history merge against a dictionary reference (Lemma 4, one factor per release)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_release.core.privacy.linkage import HistoryRows, linked_entries, merge_linkages


def _rows(entries: list[dict[int, tuple[float, int]]]) -> HistoryRows:
    indptr = np.concatenate([[0], np.cumsum([len(e) for e in entries])]).astype(np.int64)
    flat = [(v, *e[v]) for e in entries for v in sorted(e)]
    return HistoryRows(
        indptr,
        np.array([f[0] for f in flat], dtype=np.int32),
        np.array([f[1] for f in flat], dtype=np.float64),
        np.array([f[2] for f in flat], dtype=np.int32),
    )


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_merge_matches_a_dictionary_reference(data: st.DataObject) -> None:
    n_values = data.draw(st.integers(1, 8))
    n_rows = data.draw(st.integers(1, 6))
    old = [
        {
            v: (-data.draw(st.floats(0, 3)), data.draw(st.integers(1, 4)))
            for v in data.draw(st.sets(st.integers(0, n_values - 1)))
        }
        for _ in range(n_rows)
    ]
    n_groups = data.draw(st.integers(1, 3))
    pairs = [
        sorted(data.draw(st.sets(st.integers(0, n_values - 1), min_size=1)))
        for _ in range(n_groups)
    ]
    factors = [[-data.draw(st.floats(0.01, 2)) for _ in p] for p in pairs]
    rows = np.array(
        data.draw(st.lists(st.integers(0, n_rows - 1), min_size=1, unique=True)), dtype=np.int64
    )
    groups = np.array([data.draw(st.integers(0, n_groups - 1)) for _ in rows], dtype=np.int64)
    ptr = np.concatenate([[0], np.cumsum([len(p) for p in pairs])]).astype(np.int64)
    merged = merge_linkages(
        _rows(old),
        rows,
        groups,
        ptr,
        np.array([v for p in pairs for v in p], dtype=np.int64),
        np.array([f for fs in factors for f in fs], dtype=np.float64),
    )
    for i, (r, g) in enumerate(zip(rows.tolist(), groups.tolist(), strict=True)):
        expected = dict(old[r])
        for v, f in zip(pairs[g], factors[g], strict=True):
            lp, k = expected.get(v, (0.0, 0))
            expected[v] = (lp + f, k + 1)
        got = {
            int(merged.value[j]): (float(merged.log_p[j]), int(merged.links[j]))
            for j in range(merged.indptr[i], merged.indptr[i + 1])
        }
        assert list(got) == sorted(got)
        assert got.keys() == expected.keys()
        for v in got:
            assert math.isclose(got[v][0], expected[v][0], rel_tol=1e-12, abs_tol=1e-15)
            assert got[v][1] == expected[v][1]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(st.integers(0, 6), st.integers(1, 4), max_size=4),
            st.dictionaries(st.integers(0, 6), st.integers(1, 5), max_size=4),
        ),
        max_size=8,
    )
)
def test_linked_entries_are_the_pairs_with_more_links_than_before(
    pairs: list[tuple[dict[int, int], dict[int, int]]],
) -> None:
    def rows(side: int) -> HistoryRows:
        histories = [sorted(p[side].items()) for p in pairs]
        indptr = np.concatenate([[0], np.cumsum([len(h) for h in histories])]).astype(np.int64)
        value = np.array([v for h in histories for v, _ in h], dtype=np.int32)
        links = np.array([k for h in histories for _, k in h], dtype=np.int32)
        return HistoryRows(indptr, value, np.zeros(value.shape[0]), links)

    got = linked_entries(rows(0), rows(1)).tolist()
    expected = [
        links > old.get(value, 0) for old, new in pairs for value, links in sorted(new.items())
    ]
    assert got == expected
