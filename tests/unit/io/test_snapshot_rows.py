"""``snapshot_from_distinct_rows`` gives what ``snapshot_from_columns`` gives for the same rows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_release.errors import SchemaError
from stream_release.io.snapshot import snapshot_from_columns, snapshot_from_distinct_rows

NAMES = ("age", "zip")
values = st.sampled_from(["30", " 31", "40\t", "m", "f", "10", "1"])
rows = st.lists(st.tuples(values, values, st.sampled_from(["flu", "cold", "hiv"])), min_size=1)


def _codes(table: list[tuple[str, str, str]]) -> tuple[np.ndarray, list[tuple[str, ...]]]:
    """Row codes in order of first appearance, and the distinct rows."""
    distinct: dict[tuple[str, ...], int] = {}
    codes = np.array([distinct.setdefault(r, len(distinct)) for r in table], dtype=np.int32)
    return codes, list(distinct)


@settings(max_examples=60, deadline=None)
@given(rows)
def test_distinct_rows_give_the_columns_snapshot(table: list[tuple[str, str, str]]) -> None:
    ids = [f"p-{i}" for i in range(len(table))]
    codes, distinct = _codes(table)
    fast = snapshot_from_distinct_rows(ids, codes, distinct, NAMES, source="s")
    slow = snapshot_from_columns(
        ids, {n: [r[j] for r in table] for j, n in enumerate(NAMES)}, [r[2] for r in table], "s"
    )
    assert fast.sha256 == slow.sha256
    assert fast.ids.tolist() == slow.ids.tolist()
    assert fast.sensitive.tolist() == slow.sensitive.tolist()
    for name in NAMES:
        assert fast.qid[name].tolist() == slow.qid[name].tolist()
        a, b = fast.qid_columns[name], slow.qid_columns[name]
        assert a.values == b.values
        np.testing.assert_array_equal(a.codes, b.codes)
        np.testing.assert_array_equal(a.first, b.first)


def test_a_duplicate_id_or_a_short_row_is_refused() -> None:
    codes = np.array([0, 0], dtype=np.int32)
    with pytest.raises(SchemaError, match="more than once"):
        snapshot_from_distinct_rows(["p", "p"], codes, [("30", "m", "flu")], NAMES)
    with pytest.raises(SchemaError, match="has 2 values, not 3"):
        snapshot_from_distinct_rows(["p", "q"], codes, [("30", "flu")], NAMES)
