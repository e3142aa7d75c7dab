"""Publishing groups: generalized QIDs, sensitive counts, anatomy members (docs/contract.md §4)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.tables import SMALL_ROWS, encode_columns

from stream_release.core.grouping.generalize import (
    anatomy_members,
    generalize_groups,
    sensitive_counts,
)
from stream_release.core.grouping.layout import GroupBounds, group_layout
from stream_release.core.table import EncodedTable
from stream_release.errors import InvalidParameter

ROWS = SMALL_ROWS


def make_table(
    tmp_path: Path, rows: list[tuple[str, ...]] = ROWS, sensitive: list[str] | None = None
) -> EncodedTable:
    ids, age, education, city, disease = (list(c) for c in zip(*rows, strict=True))
    columns = {"age": age, "education": education, "city": city}
    return encode_columns(tmp_path, columns, sensitive if sensitive is not None else disease, ids)


def test_generalized_values_per_kind(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    group = np.array([0, 0, 1, 1, 2, 3, -1])
    qid = generalize_groups(table, group)
    assert qid == [
        {"age": [30, 34], "education": "Higher education", "city": ["Lyon", "Paris"]},
        {"age": [30, 41], "education": "*", "city": ["Nice", "Paris"]},
        {"age": 25.5, "education": "Some-college", "city": "Lyon"},
        {"age": 30, "education": "Bachelors", "city": "Paris"},
    ]
    assert type(qid[0]["age"][0]) is int and type(qid[2]["age"]) is float  # type: ignore[index]
    assert list(qid[0]) == ["age", "education", "city"]
    json.dumps(qid)  # JSON-ready


def test_lowest_common_ancestor_labels(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    # a,c,f: all Bachelors; a,e: Undergraduate; b,g: Graduate; d alone: 9th
    group = np.array([1, 2, 0, 3, 1, 0, 2])
    qid = generalize_groups(table, group)
    assert [g["education"] for g in qid] == ["Bachelors", "Undergraduate", "Graduate", "9th"]
    assert [g["age"] for g in qid] == [30, [25.5, 30], 34, 41]
    assert [g["city"] for g in qid] == ["Paris", ["Lyon", "Paris"], ["Lyon", "Paris"], "Nice"]


def test_sensitive_counts(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    group = np.array([0, 0, 0, 1, -1, 1, 1])
    assert sensitive_counts(table, group) == [
        {"cold": 1, "flu": 2},
        {"cold": 1, "flu": 1, "hiv": 1},
    ]


def test_anatomy_members_are_exact_and_sorted_by_qid_codes(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    group = np.array([0, 0, 0, 1, 1, 0, -1])
    members = anatomy_members(table, group)
    assert members == [
        [
            {"age": 30, "education": "Bachelors", "city": "Paris"},
            {"age": 30, "education": "Bachelors", "city": "Paris"},
            {"age": 30, "education": "Bachelors", "city": "Paris"},
            {"age": 34, "education": "Masters", "city": "Lyon"},
        ],
        [
            {"age": 25.5, "education": "Some-college", "city": "Lyon"},
            {"age": 41, "education": "9th", "city": "Nice"},
        ],
    ]


def test_anatomy_order_does_not_depend_on_the_sensitive_values(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    ages = [str(a) for a in rng.integers(20, 40, size=60)]
    schools = ["Bachelors", "Masters", "9th", "HS-grad", "Doctorate"]
    rows = [
        (f"p{i}", ages[i], schools[int(rng.integers(5))], ["Paris", "Lyon"][i % 2], "x")
        for i in range(60)
    ]
    values = [str(v) for v in rng.choice(["flu", "cold", "hiv", "cancer"], size=60)]
    group = rng.integers(0, 6, size=60)
    base = make_table(tmp_path, rows, values)
    first = anatomy_members(base, group)
    changed = 0
    for seed in range(3):
        shuffle = np.random.default_rng(seed)
        # any reassignment of the values: the member lists stay the same
        permuted = [str(v) for v in shuffle.permutation(values)]
        table = make_table(tmp_path, rows, permuted)
        assert anatomy_members(table, group) == first
        changed += sensitive_counts(table, group) != sensitive_counts(base, group)
        # who holds what inside each group (the multisets are kept): the same again
        within = np.array(values, dtype=object)
        for g in range(6):
            rows_g = np.flatnonzero(group == g)
            within[rows_g] = within[shuffle.permutation(rows_g)]
        table = make_table(tmp_path, rows, within.tolist())
        assert sensitive_counts(table, group) == sensitive_counts(base, group)
        assert anatomy_members(table, group) == first
    assert changed  # the sensitive values did change
    keys = [[tuple(m.values()) for m in g] for g in first]
    assert all(len(g) > 1 for g in keys)


def test_suppressed_rows_are_left_out(tmp_path: Path) -> None:
    table = make_table(tmp_path)
    group = np.full(7, -1)
    assert generalize_groups(table, group) == []
    assert sensitive_counts(table, group) == []
    assert anatomy_members(table, group) == []
    group[3] = 0
    assert generalize_groups(table, group) == [{"age": 41, "education": "9th", "city": "Nice"}]


@pytest.mark.parametrize(
    ("group", "message"),
    [
        (np.array([0, 0, 2, 2, 0, 0, 0]), r"group 1 of 3 has no rows"),
        (np.array([0, 0, -2, 0, 0, 0, 0]), r"group holds -2"),
        (np.array([0, 0, 0]), r"group has 3 entries but the table has 7 rows"),
        (np.zeros(7), r"1-D integer array"),
        (np.zeros((7, 1), dtype=np.int64), r"1-D integer array"),
    ],
)
def test_invalid_group_arrays(tmp_path: Path, group: np.ndarray, message: str) -> None:
    table = make_table(tmp_path)
    with pytest.raises(InvalidParameter, match=message):
        generalize_groups(table, group)


def test_group_layout() -> None:
    layout = group_layout(np.array([1, -1, 0, 1, 2, 0, -1]))
    assert layout.rows.tolist() == [2, 5, 0, 3, 4]
    assert layout.starts.tolist() == [0, 2, 4] and layout.sizes.tolist() == [2, 2, 1]
    assert (layout.n_groups, layout.published, layout.suppressed) == (3, 5, 2)
    assert layout.group_of_sorted().tolist() == [0, 0, 1, 1, 2]


def _naive_qid(table: EncodedTable, rows: list[int]) -> dict[str, object]:
    out: dict[str, object] = {}
    for j, attribute in enumerate(table.attributes):
        codes = sorted({int(table.qid[r, j]) for r in rows})
        if attribute.kind == "numeric":
            values = [float(attribute.domain[c]) for c in (codes[0], codes[-1])]
            values = [int(v) if v.is_integer() else v for v in values]
            out[attribute.name] = values[0] if len(codes) == 1 else values
        elif attribute.kind == "hierarchy":
            assert attribute.levels is not None and attribute.labels is not None
            for h in range(attribute.levels.shape[1]):
                nodes = {int(attribute.levels[c, h]) for c in codes}
                if len(nodes) == 1:
                    out[attribute.name] = attribute.labels[h][nodes.pop()]
                    break
        else:
            values = [str(attribute.domain[c]) for c in codes]
            out[attribute.name] = values[0] if len(values) == 1 else values
    return out


def test_vectorised_generalization_matches_a_naive_one(tmp_path: Path) -> None:
    rng = np.random.default_rng(11)
    n = 400
    schools = ["Bachelors", "Some-college", "11th", "HS-grad", "Masters", "9th", "Doctorate"]
    rows = [
        (
            f"p{i}",
            str(int(rng.integers(17, 90))) if i % 7 else f"{rng.uniform(17, 90):.1f}",
            schools[int(rng.integers(len(schools)))],
            f"c{int(rng.integers(12))}",
            "x",
        )
        for i in range(n)
    ]
    table = make_table(tmp_path, rows)
    group = rng.integers(-1, 60, size=n)
    group[:60] = np.arange(60)  # every id used
    qid = generalize_groups(table, group)
    assert len(qid) == 60
    for g in range(60):
        assert qid[g] == _naive_qid(table, np.flatnonzero(group == g).tolist())
    bounds = GroupBounds.of(table, group_layout(group, n))
    lo, hi = bounds.lo, bounds.hi
    j = 1  # education: the bounds are the LCA's leaf range and contain every member
    for g in range(60):
        codes = table.qid[group == g, j]
        assert lo[g, j] <= codes.min() and codes.max() <= hi[g, j]


def test_two_hundred_thousand_groups(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n = 600_000
    attributes = make_table(tmp_path).attributes
    qid = np.column_stack(
        [rng.integers(0, a.size, size=n, dtype=np.int32) for a in attributes]
    ).astype(np.int32)
    table = EncodedTable(
        ids=np.full(n, "", dtype=object),  # unused here
        qid=qid,
        sensitive=rng.integers(0, 3, size=n, dtype=np.int32),
        sensitive_values=("cold", "flu", "hiv"),
        attributes=attributes,
    )
    group = np.arange(n, dtype=np.int64) // 3
    qid_values = generalize_groups(table, group)
    counts = sensitive_counts(table, group)
    assert len(qid_values) == len(counts) == 200_000
    assert sum(sum(c.values()) for c in counts) == n
