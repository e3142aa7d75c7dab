"""Utility metrics: group sizes, NCP, discernibility and the random count-query error."""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import trim_mean
from support.tables import EDUCATION_HIERARCHY, SMALL_ROWS, encode_columns

from stream_release.core.table import EncodedTable
from stream_release.core.utility.groups import discernibility, group_size_stats, ncp
from stream_release.core.utility.queries import draw_count_queries, query_error, relative_errors
from stream_release.core.utility.report import utility_report
from stream_release.errors import InvalidParameter

ROWS = SMALL_ROWS
GROUP = np.array([0, 0, 1, 1, 2, 3, -1])


def make_table(tmp_path: Path, columns: dict[str, list[str]], sensitive: list[str]) -> EncodedTable:
    return encode_columns(tmp_path, columns, sensitive)


@pytest.fixture
def small(tmp_path: Path) -> EncodedTable:
    columns = list(zip(*ROWS, strict=True))
    return make_table(
        tmp_path,
        {"age": list(columns[1]), "education": list(columns[2]), "city": list(columns[3])},
        list(columns[4]),
    )


def random_table(tmp_path: Path, n: int, seed: int, names: tuple[str, ...]) -> EncodedTable:
    """A random table over numeric, hierarchy, small-set and large-set (> 64 values) QIDs."""
    rng = np.random.default_rng(seed)
    schools = [line.split(";")[0] for line in EDUCATION_HIERARCHY.splitlines()]
    makers = {
        "age": lambda: [
            str(int(a)) if a % 3 else f"{a + 0.5}" for a in rng.integers(17, 60, size=n)
        ],
        "education": lambda: [schools[i] for i in rng.integers(0, 5, size=n)],  # 2 leaves unused
        "city": lambda: [f"c{i}" for i in rng.integers(0, 6, size=n)],
        "zip": lambda: [f"z{i:03d}" for i in rng.integers(0, 90, size=n)],
    }
    columns = {name: makers[name]() for name in names}
    sensitive = [f"s{i}" for i in rng.choice(5, size=n, p=[0.4, 0.3, 0.15, 0.1, 0.05])]
    return make_table(tmp_path, columns, sensitive)


def random_groups(n: int, seed: int, suppressed: float = 0.1) -> np.ndarray:
    rng = np.random.default_rng(seed + 1000)
    sizes = rng.integers(1, 12, size=n)
    group = np.repeat(np.arange(n), sizes)[:n]
    group = group[rng.permutation(n)]
    group[rng.random(n) < suppressed] = -1
    _, group_ids = np.unique(group[group >= 0], return_inverse=True)  # renumber 0..G-1
    group[group >= 0] = group_ids
    return group


# -- group sizes, discernibility, NCP ----------------------------------------------------------


def test_group_size_stats() -> None:
    assert group_size_stats(GROUP) == {
        "avg_group_size": 1.5,
        "max_group_size": 2,
        "min_group_size": 1,
        "groups": 4,
        "published": 6,
        "suppressed": 1,
        "suppression": 1 / 7,
    }
    assert group_size_stats(np.full(3, -1)) == {
        "avg_group_size": 0.0,
        "max_group_size": 0,
        "min_group_size": 0,
        "groups": 0,
        "published": 0,
        "suppressed": 3,
        "suppression": 1.0,
    }


def test_discernibility() -> None:
    assert discernibility(GROUP, 7) == 2 * 2 + 2 * 2 + 1 + 1 + 1 * 7
    assert discernibility(np.zeros(5, dtype=np.int64), 5) == 25
    assert discernibility(np.array([0, 0, 1]), 10) == 4 + 1 + 7 * 10  # 7 rows not in any group
    with pytest.raises(InvalidParameter, match="fewer than the 3 published rows"):
        discernibility(np.array([0, 0, 1]), 2)


def test_ncp_by_hand(small: EncodedTable) -> None:
    # age domain {25.5, 30, 34, 41}: width 15.5; education 7 leaves; city {Lyon, Nice, Paris}.
    # group 0 (a, b): age [30, 34] 4/15.5; LCA "Higher education" 4 leaves: 3/6; 2 cities: 1/2
    # group 1 (c, d): age [30, 41] 11/15.5; "*": 6/6; 2 cities: 1/2
    # groups 2 and 3: one row each, 0
    expected = (2 * (4 / 15.5 + 0.5 + 0.5) + 2 * (11 / 15.5 + 1 + 0.5)) / (6 * 3)
    assert ncp(small, GROUP) == pytest.approx(expected, rel=1e-15)
    assert ncp(small, GROUP, format="anatomy") == 0.0
    assert ncp(small, np.arange(7)) == 0.0
    assert ncp(small, np.full(7, -1)) == 0.0
    whole = ncp(small, np.zeros(7, dtype=np.int64))
    assert whole == pytest.approx((1 + 1 + 1) / 3)  # every attribute spans its whole domain


# -- query error -------------------------------------------------------------------------------


def test_query_error_is_zero_for_one_row_groups(tmp_path: Path) -> None:
    table = random_table(tmp_path, 300, 1, ("age", "education", "city", "zip"))
    singletons = np.arange(300)
    for fmt in ("generalized", "anatomy"):
        errors = relative_errors(
            table, singletons, format=fmt, queries=500, rng=np.random.default_rng(0)
        )
        assert errors.shape == (500,)
        assert np.max(errors) < 1e-12


def test_query_error_is_positive_for_one_big_group(tmp_path: Path) -> None:
    table = random_table(tmp_path, 300, 2, ("age", "education", "city", "zip"))
    one = np.zeros(300, dtype=np.int64)
    for fmt in ("generalized", "anatomy"):
        assert query_error(table, one, format=fmt, queries=500, rng=np.random.default_rng(0)) > 0.1


def test_anatomy_is_more_accurate_than_generalization(tmp_path: Path) -> None:
    table = random_table(tmp_path, 600, 3, ("age", "education", "city", "zip"))
    group = random_groups(600, 3, suppressed=0.0)
    generalized = query_error(table, group, format="generalized", rng=np.random.default_rng(5))
    anatomy = query_error(table, group, format="anatomy", rng=np.random.default_rng(5))
    assert 0 < anatomy < generalized


def _reference_errors(
    table: EncodedTable, group: np.ndarray, fmt: str, queries: int, rng: np.random.Generator
) -> list[float]:
    """The workload of the metrics module docstring, in plain Python loops."""
    n, d = table.qid.shape
    qid = table.qid.tolist()
    sensitive = table.sensitive.tolist()
    published = [i for i in range(n) if group[i] >= 0]
    members: dict[int, list[int]] = defaultdict(list)
    for i in published:
        members[int(group[i])].append(i)
    sizes = [a.size for a in table.attributes]
    qd = min(3, d)
    lengths = [max(1, round(0.1 ** (1 / qd) * c)) for c in sizes]

    def covered(g: int, j: int) -> set[int]:
        """The codes group g's published value of attribute j covers."""
        attribute = table.attributes[j]
        codes = {qid[i][j] for i in members[g]}
        if attribute.kind == "numeric":
            return set(range(min(codes), max(codes) + 1))
        if attribute.kind == "set":
            return codes
        levels = attribute.levels.tolist()  # type: ignore[union-attr]
        for h in range(len(levels[0])):
            nodes = {levels[c][h] for c in codes}
            if len(nodes) == 1:
                node = nodes.pop()
                return {c for c in range(attribute.size) if levels[c][h] == node}
        raise AssertionError("no common ancestor")

    cover = {(g, j): covered(g, j) for g in members for j in range(d)}
    errors: list[float] = []
    draws = 0
    while len(errors) < queries and draws < 100 * queries:
        m = min(queries - len(errors), 100 * queries - draws)
        attrs = np.argsort(rng.random((m, d)), axis=1)[:, :qd]
        u = rng.random((m, qd))
        picks = rng.integers(0, len(published), size=m)
        for k in range(m):
            ranges = {}
            for t in range(qd):
                j = int(attrs[k, t])
                start = math.floor(float(u[k, t]) * (sizes[j] - lengths[j] + 1))
                ranges[j] = (start, start + lengths[j] - 1)
            s = sensitive[published[int(picks[k])]]

            def match(i: int, ranges: dict[int, tuple[int, int]] = ranges) -> bool:
                return all(lo <= qid[i][j] <= hi for j, (lo, hi) in ranges.items())

            act = sum(1 for i in published if sensitive[i] == s and match(i))
            if act == 0:
                continue
            est = 0.0
            for g, rows in members.items():
                n_s = sum(1 for i in rows if sensitive[i] == s)
                if fmt == "anatomy":
                    est += sum(1 for i in rows if match(i)) * n_s / len(rows)
                elif n_s:
                    share = float(n_s)
                    for j, (lo, hi) in ranges.items():
                        inside = [c for c in cover[g, j] if lo <= c <= hi]
                        share *= len(inside) / len(cover[g, j])
                    est += share
            errors.append(abs(est - act) / act)
        draws += m
    return errors


@pytest.mark.parametrize(
    ("names", "seed"),
    [
        (("age", "education", "city", "zip"), 0),  # intervals, bit-mask set, CSR set
        (("age", "education", "city", "zip"), 1),
        (("zip", "age", "education"), 2),
        (("age", "education"), 3),  # two attributes per query
        (("city", "age"), 4),
        (("education",), 5),  # one attribute per query
        (("zip",), 6),
    ],
)
@pytest.mark.parametrize("fmt", ["generalized", "anatomy"])
def test_query_error_matches_a_plain_python_reference(
    tmp_path: Path, names: tuple[str, ...], seed: int, fmt: str
) -> None:
    n = 250
    table = random_table(tmp_path, n, seed, names)
    if "zip" in names:
        zip_size = table.attributes[names.index("zip")].size
        assert zip_size > 64  # exercises the CSR set path
    group = random_groups(n, seed)
    ours = relative_errors(table, group, format=fmt, queries=300, rng=np.random.default_rng(seed))
    reference = _reference_errors(table, group, fmt, 300, np.random.default_rng(seed))
    assert ours.shape == (len(reference),) == (300,)
    np.testing.assert_allclose(ours, reference, rtol=0, atol=1e-12)
    mean = query_error(table, group, format=fmt, queries=300, rng=np.random.default_rng(seed))
    assert mean == pytest.approx(float(np.mean(reference)), abs=1e-12)


def test_actual_counts_leave_out_suppressed_rows(tmp_path: Path) -> None:
    table = random_table(tmp_path, 200, 8, ("age", "city"))
    group = np.arange(200)
    group[150:] = -1
    errors = relative_errors(
        table, group, format="anatomy", queries=400, rng=np.random.default_rng(1)
    )
    # singleton groups publish the published rows exactly: the suppressed ones count nowhere
    np.testing.assert_allclose(errors, 0.0, atol=1e-12)
    reference = _reference_errors(table, group, "anatomy", 400, np.random.default_rng(1))
    np.testing.assert_allclose(errors, reference, rtol=0, atol=1e-12)


def _brute_force_count(table: EncodedTable, attrs, starts, ends, value) -> int:
    inside = table.sensitive == value
    for j, lo, hi in zip(attrs.tolist(), starts.tolist(), ends.tolist(), strict=True):
        inside &= (table.qid[:, j] >= lo) & (table.qid[:, j] <= hi)
    return int(np.count_nonzero(inside))


@pytest.mark.parametrize(
    ("names", "seed"), [(("age", "education", "city", "zip"), 0), (("city",), 1)]
)
def test_draw_count_queries_are_the_queries_of_relative_errors(
    tmp_path: Path, names: tuple[str, ...], seed: int
) -> None:
    n = 250
    table = random_table(tmp_path, n, seed, names)
    group = random_groups(n, seed)
    published = np.flatnonzero(group >= 0)
    drawn = draw_count_queries(table, queries=300, rng=np.random.default_rng(seed), rows=published)
    assert len(drawn) == 300
    assert drawn.attrs.shape == drawn.starts.shape == drawn.ends.shape == (300, min(3, len(names)))
    for i in range(len(drawn)):
        act = _brute_force_count(
            table.take(published), drawn.attrs[i], drawn.starts[i], drawn.ends[i], drawn.values[i]
        )
        assert drawn.actual[i] == act >= 1  # counted on the published rows only
        assert drawn.values[i] in table.sensitive[published]
    # the same rng: the queries (and so the actual counts) behind relative_errors; one-row
    # groups publish every published row exactly, so each estimate is the actual count
    exact = np.full(n, -1)
    exact[published] = np.arange(published.shape[0])
    errors = relative_errors(
        table, exact, format="anatomy", queries=300, rng=np.random.default_rng(seed)
    )
    assert errors.shape == (300,)
    np.testing.assert_allclose(errors, 0.0, atol=1e-12)
    # the suppressed rows count nowhere: their values may be permuted among them
    moved = table.sensitive.copy()
    hidden = np.flatnonzero(group < 0)
    moved[hidden] = np.random.default_rng(seed).permutation(moved[hidden])
    shuffled = dataclasses.replace(table, sensitive=moved)
    for fmt in ("anatomy", "generalized"):
        before = relative_errors(
            table, group, format=fmt, queries=300, rng=np.random.default_rng(seed)
        )
        after = relative_errors(
            shuffled, group, format=fmt, queries=300, rng=np.random.default_rng(seed)
        )
        np.testing.assert_array_equal(before, after)


def test_draw_count_queries_from_every_row(tmp_path: Path) -> None:
    table = random_table(tmp_path, 200, 3, ("age", "education", "city"))
    first = draw_count_queries(table, queries=100, rng=np.random.default_rng(2))
    again = draw_count_queries(table, queries=100, rng=np.random.default_rng(2))
    every = draw_count_queries(
        table, queries=100, rng=np.random.default_rng(2), rows=np.arange(200)
    )
    for a, b in ((first, again), (first, every)):
        for name in ("attrs", "starts", "ends", "values", "actual"):
            assert np.array_equal(getattr(a, name), getattr(b, name))
    assert len(draw_count_queries(table, queries=0, rng=np.random.default_rng(0))) == 0
    with pytest.raises(InvalidParameter, match="rows: empty"):
        draw_count_queries(table, rng=np.random.default_rng(0), rows=np.zeros(0, dtype=np.int64))
    with pytest.raises(InvalidParameter, match="outside"):
        draw_count_queries(table, rng=np.random.default_rng(0), rows=np.array([200]))
    with pytest.raises(InvalidParameter, match="queries = -1"):
        draw_count_queries(table, queries=-1, rng=np.random.default_rng(0))
    with pytest.raises(InvalidParameter, match=r"numpy\.random\.Generator"):
        draw_count_queries(table, rng=0)  # type: ignore[arg-type]


def test_query_error_edge_cases(small: EncodedTable) -> None:
    rng = np.random.default_rng(0)
    assert math.isnan(query_error(small, GROUP, format="generalized", queries=0, rng=rng))
    nothing = np.full(7, -1)
    assert (
        relative_errors(small, nothing, format="anatomy", queries=4, rng=rng).tolist() == [1.0] * 4
    )
    with pytest.raises(InvalidParameter, match="format = 'bucketized'"):
        query_error(small, GROUP, format="bucketized", rng=rng)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="queries = -1"):
        query_error(small, GROUP, format="anatomy", queries=-1, rng=rng)
    with pytest.raises(InvalidParameter, match=r"numpy\.random\.Generator"):
        query_error(small, GROUP, format="anatomy", rng=0)  # type: ignore[arg-type]


def test_query_error_is_reproducible(tmp_path: Path) -> None:
    table = random_table(tmp_path, 300, 9, ("age", "education", "city"))
    group = random_groups(300, 9)
    runs = [
        relative_errors(
            table, group, format="generalized", queries=200, rng=np.random.default_rng(4)
        )
        for _ in range(2)
    ]
    assert np.array_equal(runs[0], runs[1])


def test_utility_report(small: EncodedTable) -> None:
    report = utility_report(
        small, GROUP, format="generalized", queries=50, rng=np.random.default_rng(0)
    )
    assert set(report) == {
        "avg_group_size",
        "max_group_size",
        "min_group_size",
        "groups",
        "published",
        "suppressed",
        "suppression",
        "ncp",
        "discernibility",
        "query_error",
        "query_error_median",
        "query_error_trimmed",
        "queries",
    }
    assert report["queries"] == 50
    errors = relative_errors(
        small, GROUP, format="generalized", queries=50, rng=np.random.default_rng(0)
    )
    assert report["query_error_median"] == pytest.approx(float(np.median(errors)))
    assert report["query_error_trimmed"] == pytest.approx(float(trim_mean(errors, 0.1)))
    assert report["ncp"] == ncp(small, GROUP)
    assert report["discernibility"] == 17.0
    assert report["query_error"] == pytest.approx(
        query_error(small, GROUP, format="generalized", queries=50, rng=np.random.default_rng(0))
    )
    none = utility_report(small, GROUP, format="anatomy", queries=0, rng=np.random.default_rng(0))
    assert none["query_error"] is None and none["queries"] == 0 and none["ncp"] == 0.0


def test_min_count_keeps_only_queries_with_that_many_rows(tmp_path: Path) -> None:
    table = random_table(tmp_path, 400, 4, ("age", "education", "city"))
    group = random_groups(400, 4)
    published = np.flatnonzero(group >= 0)
    base = draw_count_queries(table, queries=200, rng=np.random.default_rng(5), rows=published)
    same = draw_count_queries(
        table, queries=200, rng=np.random.default_rng(5), rows=published, min_count=1
    )
    assert np.array_equal(base.actual, same.actual)
    floor = int(np.median(base.actual)) + 1
    dense = draw_count_queries(
        table, queries=200, rng=np.random.default_rng(5), rows=published, min_count=floor
    )
    assert len(dense) == 200
    for i in range(len(dense)):
        act = _brute_force_count(
            table.take(published), dense.attrs[i], dense.starts[i], dense.ends[i], dense.values[i]
        )
        assert dense.actual[i] == act >= floor
    # the first batch's draws that meet the floor lead the kept ones, in draw order (the
    # first 150 queries with a row come from the first batch of 200 draws on this table)
    first = base.actual[:150] >= floor
    assert np.array_equal(dense.actual[: int(first.sum())], base.actual[:150][first])
    errors = relative_errors(
        table, group, format="generalized", queries=200, rng=np.random.default_rng(5),
        min_count=floor,
    )  # fmt: skip
    assert errors.shape == (200,)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(InvalidParameter, match="min_count"):
            draw_count_queries(table, rng=np.random.default_rng(0), min_count=bad)  # type: ignore[arg-type]
