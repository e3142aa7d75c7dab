"""The grouping: every group valid, requirements from history honoured, suppression counted."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream_release.config import GroupingSettings
from stream_release.core.grouping.partition import (
    Requirements,
    form_groups,
    group_rules,
    group_size_cap,
    kernel_table,
)
from stream_release.core.table import Attribute, EncodedTable


def _form(
    table: EncodedTable, protected: np.ndarray, req: Requirements, **kwargs: object
) -> np.ndarray:
    """form_groups with the configuration's grouping defaults unless overridden."""
    defaults = GroupingSettings()
    options = {
        "max_group_factor": defaults.max_group_factor,
        "insertion_window": defaults.insertion_window,
        **kwargs,
    }
    return form_groups(table, protected, req, **options)  # type: ignore[arg-type]


def make_table(qid: np.ndarray, sensitive: np.ndarray, n_values: int | None = None) -> EncodedTable:
    qid = np.asarray(qid, dtype=np.int32).reshape(len(sensitive), -1)
    n_values = n_values or int(sensitive.max()) + 1
    attributes = tuple(
        Attribute(f"q{j}", "numeric", np.arange(int(qid[:, j].max()) + 1, dtype=np.float64))
        for j in range(qid.shape[1])
    )
    return EncodedTable(
        ids=np.array([f"p{i}" for i in range(len(sensitive))], dtype=object),
        qid=qid,
        sensitive=np.asarray(sensitive, dtype=np.int32),
        sensitive_values=tuple(f"v{i}" for i in range(n_values)),
        attributes=attributes,
    )


def group_requirement_violations(
    table: EncodedTable, group: np.ndarray, protected: np.ndarray, req: Requirements, min_size: int
) -> list[str]:
    """Reference check, written independently of the kernel: |G| >= n(G,s) * R(G,s)."""
    problems = []
    for g in np.unique(group[group >= 0]):
        members = np.flatnonzero(group == g)
        size = members.size
        if size < min_size:
            problems.append(f"group {g} has {size} < {min_size} rows")
        values, counts = np.unique(table.sensitive[members], return_counts=True)
        for v, c in zip(values, counts, strict=True):
            if not protected[v]:
                continue
            need = req.base
            for o in members:
                for e in range(req.ptr[o], req.ptr[o + 1]):
                    if req.value[e] == v:
                        need = max(need, req.ratio[e])
            if size < c * need * (1 - 1e-9):
                problems.append(f"group {g}: value {v} x{c} needs ratio {need}, has {size / c}")
    return problems


def adult_like(n: int, n_values: int, seed: int) -> EncodedTable:
    rng = np.random.default_rng(seed)
    qid = np.stack([rng.integers(17, 90, n), rng.integers(0, 2, n), rng.integers(0, 16, n)], axis=1)
    weights = rng.dirichlet(np.ones(n_values) * 3)
    sensitive = rng.choice(n_values, size=n, p=weights)
    return make_table(qid, sensitive, n_values)


def test_uniform_ratio_makes_small_valid_groups() -> None:
    table = adult_like(3000, 14, seed=1)
    counts = np.bincount(table.sensitive, minlength=14)
    base = 0.95 * table.n_rows / counts.max()  # feasible by construction
    base = min(base, 4.85)
    protected = np.ones(14, dtype=bool)
    req = Requirements.uniform(base, table.n_rows)
    group = _form(table, protected, req, min_group_size=1, eligible=np.ones(table.n_rows, bool))
    assert group_requirement_violations(table, group, protected, req, 1) == []
    sizes = np.bincount(group[group >= 0])
    assert sizes.mean() <= 1.3 * math.ceil(base)
    assert np.count_nonzero(group < 0) <= 0.01 * table.n_rows


def test_group_ids_are_dense_and_every_group_nonempty() -> None:
    table = adult_like(500, 8, seed=2)
    req = Requirements.uniform(3.0, table.n_rows)
    group = _form(table, np.ones(8, bool), req, min_group_size=1, eligible=np.ones(500, bool))
    ids = np.unique(group[group >= 0])
    assert np.array_equal(ids, np.arange(ids.size))


def test_unprotected_values_do_not_constrain() -> None:
    # value 0 protected, values 1..3 not: rows without value 0 may form groups of min_group_size
    table = adult_like(400, 4, seed=3)
    protected = np.array([True, False, False, False])
    req = Requirements.uniform(4.0, table.n_rows)
    group = _form(table, protected, req, min_group_size=2, eligible=np.ones(400, bool))
    assert group_requirement_violations(table, group, protected, req, 2) == []
    sizes = np.bincount(group[group >= 0])
    assert sizes.min() >= 2
    assert np.count_nonzero(group < 0) == 0


def test_history_requirement_raises_group_size_for_that_value() -> None:
    # 60 rows, 12 values, 5 each, in turn along the QID (row r holds r mod 12); row 15 (value
    # 3) needs ratio 10 for its own value, row 1 may never meet value 4
    sensitive = np.tile(np.arange(12), 5)
    table = make_table(np.arange(60)[:, None], sensitive)
    ptr = np.zeros(61, dtype=np.int64)
    ptr[2:] = 1  # row 1: one entry
    ptr[16:] = 2  # row 15: one entry
    req = Requirements(
        4.0,
        ptr,
        np.array([4, 3], dtype=np.int32),
        np.array([np.inf, 10.0]),
    )
    protected = np.ones(12, bool)
    eligible = np.ones(60, bool)
    # with the default cap (2 x the base ratio 4 = 8 rows), ratio 10 is out of reach: the row
    # is forced out of every group (into the suppressed set), the others are grouped
    group = _form(table, protected, req, min_group_size=1, eligible=eligible)
    assert group_requirement_violations(table, group, protected, req, 1) == []
    assert group[15] < 0 and np.count_nonzero(group < 0) < 5
    # with a cap that allows it, row 15's group holds value 3 (its own): 10 rows at least for
    # each holder of 3, while the other groups keep near the base ratio
    group = _form(table, protected, req, min_group_size=1, eligible=eligible, max_group_factor=3.0)
    assert group_requirement_violations(table, group, protected, req, 1) == []
    assert group[15] >= 0
    g15 = np.flatnonzero(group == group[15])
    assert g15.size >= 10 * np.count_nonzero(table.sensitive[g15] == 3) >= 10
    assert np.median(np.bincount(group[group >= 0])) < 10
    g1 = np.flatnonzero(group == group[1])
    assert group[1] < 0 or 4 not in table.sensitive[g1]


def test_ineligible_rows_are_suppressed() -> None:
    table = adult_like(200, 6, seed=4)
    eligible = np.ones(200, bool)
    eligible[:7] = False
    group = _form(
        table, np.ones(6, bool), Requirements.uniform(3.0, 200), min_group_size=1, eligible=eligible
    )
    assert np.all(group[:7] == -1)


def test_groups_are_qid_local() -> None:
    # two far-apart QID clusters with the same value mix: no group should straddle them
    sensitive = np.tile(np.arange(5), 40)
    qid = np.where(np.arange(200) < 100, 0, 1000)[:, None] + (np.arange(200) % 7)[:, None]
    table = make_table(qid, sensitive)
    group = _form(
        table,
        np.ones(5, bool),
        Requirements.uniform(5.0, 200),
        min_group_size=1,
        eligible=np.ones(200, bool),
    )
    for g in np.unique(group[group >= 0]):
        side = qid[group == g, 0] >= 1000
        assert side.all() or (~side).all()


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(5, 120),
    n_values=st.integers(2, 9),
    base=st.floats(1.5, 6.0),
    min_size=st.integers(1, 4),
    seed=st.integers(0, 10_000),
    with_history=st.booleans(),
)
def test_every_group_is_valid_on_random_inputs(
    n: int, n_values: int, base: float, min_size: int, seed: int, with_history: bool
) -> None:
    rng = np.random.default_rng(seed)
    table = make_table(rng.integers(0, 30, size=(n, 2)), rng.integers(0, n_values, n), n_values)
    protected = rng.random(n_values) < 0.7
    if with_history:
        per_row = rng.integers(0, 3, n)
        ptr = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int64)
        values = np.concatenate([rng.choice(n_values, k, replace=False) for k in per_row]).astype(
            np.int32
        )
        ratios = np.where(rng.random(ptr[-1]) < 0.2, np.inf, base * (1 + 3 * rng.random(ptr[-1])))
        req = Requirements(base, ptr, values, ratios)
    else:
        req = Requirements.uniform(base, n)
    group = _form(table, protected, req, min_group_size=min_size, eligible=np.ones(n, bool))
    assert group_requirement_violations(table, group, protected, req, min_size) == []


@pytest.mark.parametrize("factor", [1.0, 4.0])
def test_max_group_factor_caps_group_size(factor: float) -> None:
    table = adult_like(600, 10, seed=5)
    req = Requirements.uniform(3.0, 600)
    group = _form(
        table,
        np.ones(10, bool),
        req,
        min_group_size=1,
        eligible=np.ones(600, bool),
        max_group_factor=factor,
    )
    sizes = np.bincount(group[group >= 0])
    assert sizes.max() <= math.ceil(3.0 * factor)


def test_no_group_of_a_million_rows_grows_past_the_cap() -> None:
    # 2 % of the rows have histories that need ratios between the base and the cap for their
    # own value: groups started from them fail and their rows go through every later pass
    n, base, factor = 1_000_000, 4.85, 4.0
    table = adult_like(n, 14, seed=11)
    rng = np.random.default_rng(12)
    rows = np.sort(rng.choice(n, size=n // 50, replace=False))
    cap = group_size_cap(base, 2, factor)
    ptr = np.zeros(n + 1, dtype=np.int64)
    ptr[rows + 1] = 1
    req = Requirements(
        base,
        np.cumsum(ptr),
        table.sensitive[rows].astype(np.int32),
        rng.uniform(base * 1.01, cap, size=rows.size),
    )
    group = _form(
        table, np.ones(14, bool), req, min_group_size=2, eligible=np.ones(n, bool),
        max_group_factor=factor,
    )  # fmt: skip
    sizes = np.bincount(group[group >= 0])
    assert sizes.max() <= cap, f"a group of {sizes.max()} rows, cap {cap}"
    assert np.count_nonzero(group >= 0) > 0.9 * n


def _stratify(table: EncodedTable, ratio: float, min_size: int = 2) -> tuple[np.ndarray, int, bool]:
    from stream_release.core.grouping.stratified import stratified_cut

    perm = np.arange(table.n_rows, dtype=np.int64)
    v = len(table.sensitive_values)
    mid, ok = stratified_cut(
        perm, 0, table.n_rows, table.qid, 0, table.sensitive, np.ones(v, np.bool_), ratio,
        min_size, np.zeros(v, np.int64), np.zeros(v, np.int64), np.empty(table.n_rows, np.int64),
    )  # fmt: skip
    return perm, int(mid), bool(ok)


@pytest.mark.parametrize("per_value", [200, 201])
def test_a_tight_leaf_splits_value_by_value_into_halves_that_stay_tight(per_value: int) -> None:
    # five values, each exactly 1/5 of the rows: ratio 5 leaves no slack, and a half is valid
    # only with exactly 1/5 of each value
    rng = np.random.default_rng(per_value)
    sensitive = np.repeat(np.arange(5), per_value)
    table = make_table(rng.integers(0, 50, sensitive.size), sensitive)
    perm, mid, ok = _stratify(table, 5.0)
    assert ok
    assert sorted(perm.tolist()) == list(range(sensitive.size))
    for half in (perm[:mid], perm[mid:]):
        counts = np.bincount(table.sensitive[half], minlength=5)
        assert counts.max() * 5 <= half.size
    for value in range(5):  # each value's lower codes went left
        left = table.qid[perm[:mid]][table.sensitive[perm[:mid]] == value, 0]
        right = table.qid[perm[mid:]][table.sensitive[perm[mid:]] == value, 0]
        assert left.max() <= right.min()


def test_a_value_above_the_ratio_cannot_be_split_and_nothing_moves() -> None:
    sensitive = np.array([0] * 30 + [1] * 70)  # value 1 holds 0.7 > 1/2
    table = make_table(np.arange(100), sensitive)
    perm, _, ok = _stratify(table, 2.0)
    assert not ok
    assert perm.tolist() == list(range(100))


def test_leaves_no_single_code_cut_can_split_are_cut_value_by_value() -> None:
    # code 0 holds only value 0 (exactly a fifth of the rows): every median cut on the one
    # attribute leaves a half with too much of it, so before the value-balanced cut the whole
    # table was one leaf
    from stream_release.core.grouping.mondrian import STRATIFIED_FROM, mondrian_leaves

    n = 5 * STRATIFIED_FROM
    sensitive = np.concatenate([np.zeros(n // 5), np.repeat(np.arange(1, 5), n // 5)])
    qid = np.concatenate([np.zeros(n // 5), np.ones(n - n // 5)]).astype(np.int32)
    table = make_table(qid, sensitive.astype(np.int32))
    perm = np.arange(n, dtype=np.int64)
    rules = group_rules(
        np.ones(5, np.bool_), Requirements.uniform(5.0, n), min_group_size=2, cap=4 * 5
    )
    bounds = mondrian_leaves(kernel_table(table), rules, perm)
    sizes = np.diff(bounds)
    assert sizes.max() < STRATIFIED_FROM * 2
    for lo, hi in itertools.pairwise(bounds.tolist()):
        counts = np.bincount(table.sensitive[perm[lo:hi]], minlength=5)
        assert counts.max() * 5 <= hi - lo


def test_leaves_split_on_threads_equal_one_thread_depth_first() -> None:
    # the top levels are split a level at a time and the subtrees shared out over numba's
    # threads: the leaves and the row order must be those of one depth-first split (which
    # mondrian_leaves takes below PARALLEL_FROM rows)
    from stream_release.core.grouping.mondrian import (
        FRONTIER,
        PARALLEL_FROM,
        _leaves,
        _leaves_one_thread,
        mondrian_leaves,
    )

    rng = np.random.default_rng(7)
    n = 40 * FRONTIER * 8
    assert n < PARALLEL_FROM
    table = make_table(rng.integers(0, 90, size=(n, 3)), rng.integers(0, 6, size=n))
    rules = group_rules(
        np.ones(6, np.bool_), Requirements.uniform(3.0, n), min_group_size=3, cap=4 * 3
    )
    kernel = kernel_table(table)
    alone = np.arange(n, dtype=np.int64)
    expected = _leaves_one_thread(kernel, rules, alone)
    for n_threads in (1, 2, 3):
        threaded = np.arange(n, dtype=np.int64)
        bounds = _leaves(kernel, rules, threaded, n_threads)
        assert bounds.shape[0] - 1 > FRONTIER  # the subtrees were split further on the threads
        assert bounds.tolist() == expected.tolist()
        assert threaded.tolist() == alone.tolist()
    small = np.arange(n, dtype=np.int64)
    assert mondrian_leaves(kernel, rules, small).tolist() == expected.tolist()
    assert small.tolist() == alone.tolist()


def test_pass_2_on_threads_gives_the_groups_of_one_thread() -> None:
    # each leaf is bucketized with ids from 0 in its own stretch of the leftovers, then moved
    # into leaf order: the groups, their ids and the leftovers must be one thread's
    from stream_release.core.grouping.bucketize import GroupingState
    from stream_release.core.grouping.mondrian import _leaves_one_thread
    from stream_release.core.grouping.passes import (
        _bucketize_leaves,
        _bucketize_leaves_parallel,
    )
    from stream_release.core.grouping.tally import new_tally

    rng = np.random.default_rng(11)
    n = 6000
    table = make_table(rng.integers(0, 60, size=(n, 3)), rng.integers(0, 6, size=n))
    rules = group_rules(
        np.array([True, True, True, True, False, False]),
        Requirements.uniform(3.0, n),
        min_group_size=3,
        cap=4 * 3,
    )
    kernel = kernel_table(table)
    perm = np.arange(n, dtype=np.int64)
    bounds = _leaves_one_thread(kernel, rules, perm)

    def state() -> GroupingState:
        return GroupingState(np.full(n, -1, np.int64), np.empty(n, np.int64))

    alone = state()
    expected = _bucketize_leaves(kernel, rules, new_tally(6), alone, perm, bounds)
    assert expected[1] > 0  # some rows were left over: their order is checked too
    for n_threads in (1, 2, 3, 5):
        threaded = state()
        got = _bucketize_leaves_parallel(kernel, rules, threaded, perm, bounds, n_threads)
        assert got == expected
        assert threaded.group.tolist() == alone.group.tolist()
        assert threaded.leftover[: got[1]].tolist() == alone.leftover[: expected[1]].tolist()


def test_leaves_with_more_values_than_rows_per_node_equal_one_thread_depth_first() -> None:
    # a node's counts are reset over its rows when the values outnumber them: the same
    # leaves on threads as depth first, with thousands of sensitive values
    from stream_release.core.grouping.mondrian import _leaves, _leaves_one_thread

    rng = np.random.default_rng(5)
    n = 3000
    table = make_table(rng.integers(0, 200, size=(n, 2)), rng.integers(0, 2000, size=n))
    rules = group_rules(
        np.ones(2000, np.bool_), Requirements.uniform(2.0, n), min_group_size=2, cap=8
    )
    kernel = kernel_table(table)
    alone = np.arange(n, dtype=np.int64)
    expected = _leaves_one_thread(kernel, rules, alone)
    threaded = np.arange(n, dtype=np.int64)
    assert _leaves(kernel, rules, threaded, 2).tolist() == expected.tolist()
    assert threaded.tolist() == alone.tolist()
    assert expected.shape[0] > 100  # the table was cut into many leaves
