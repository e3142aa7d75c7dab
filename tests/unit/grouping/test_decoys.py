"""The suppressed rows as one more group: decoys, members' requirements, spent members."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from stream_release.core.grouping.requirements import Requirements
from stream_release.core.grouping.suppressed_set import (
    GroupValid,
    PlaceRows,
    SuppressedSet,
    protect_suppressed_set,
)
from stream_release.core.privacy.breach import RATIO_RTOL
from stream_release.errors import GuaranteeUnsatisfiable

A, B, C, D, E = range(5)
PROTECTED = np.ones(5, dtype=np.bool_)


def _fixed_groups(groups: list[list[int]], n: int):  # type: ignore[no-untyped-def]
    """A grouping that puts the given rows together and leaves the others out (the
    eligibility mask removes rows, as the real one does)."""

    def group_rows(eligible: np.ndarray) -> np.ndarray:
        out = np.full(n, -1, dtype=np.int64)
        g = 0
        for rows in groups:
            if all(eligible[r] for r in rows):
                out[rows] = g
                g += 1
        return out

    return group_rows


SETTINGS: dict[str, Any] = {"cap": 8, "floor": 2.0}


def _nowhere(group: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """No group takes any row."""
    return group


def _never(rows: np.ndarray) -> bool:
    """No group stays valid without one of its rows (the fixed groups are minimal)."""
    return False


def _history(n: int, entries: dict[int, list[tuple[int, float]]]) -> Requirements:
    """Requirements whose Theorem 1 ratios are ``entries``: row -> [(value, ratio)]."""
    ptr = np.zeros(n + 1, dtype=np.int64)
    for row, pairs in entries.items():
        ptr[row + 1] = len(pairs)
    ptr = np.cumsum(ptr)
    flat = [pair for row in sorted(entries) for pair in entries[row]]
    value = np.array([v for v, _ in flat], dtype=np.int32)
    ratio = np.array([r for _, r in flat], dtype=np.float64)
    empty = np.zeros(n + 1, dtype=np.int64)
    return Requirements(4.0, empty, np.zeros(0, np.int32), np.zeros(0), ptr, value, ratio)


def _protect(
    sensitive: np.ndarray,
    groups: list[list[int]],
    forced: list[int],
    history: dict[int, list[tuple[int, float]]],
    place_rows: PlaceRows = _nowhere,
    group_valid: GroupValid = _never,
) -> tuple[np.ndarray, SuppressedSet]:
    """:func:`protect_suppressed_set` of the rows' ``sensitive`` values (every value
    protected) with the fixed ``groups`` (:func:`_fixed_groups`), the rows ``forced`` into the
    set (not eligible), the members' Theorem 1 ratios ``history`` (:func:`_history`), and
    groups that take and give rows as ``place_rows`` and ``group_valid`` say (by default they
    take no row and give none): the rows' group ids and the set."""
    n = sensitive.shape[0]
    eligible = np.ones(n, dtype=np.bool_)
    eligible[forced] = False
    return protect_suppressed_set(
        sensitive, PROTECTED, _history(n, history), eligible, _fixed_groups(groups, n),
        place_rows, group_valid, **SETTINGS,
    )  # fmt: skip


def _share(sensitive: np.ndarray, rows: np.ndarray) -> Fraction:
    counts = np.bincount(sensitive[rows], minlength=5)
    return Fraction(int(counts.max()), rows.shape[0])


def test_decoys_dilute_a_set_made_of_one_value_below_1_over_l() -> None:
    # three rows of A left over; two groups of four rows without A
    sensitive = np.array([A, A, A, B, C, D, E, B, C, D, E], dtype=np.int32)
    group, star = _protect(sensitive, [[3, 4, 5, 6], [7, 8, 9, 10]], [0, 1, 2], {})
    assert star.rows.tolist() == [0, 1, 2, 3, 4, 5, 6]  # the first group joined them
    assert star.decoys.tolist() == [3, 4, 5, 6]
    assert _share(sensitive, star.rows) == Fraction(3, 7) < Fraction(1, 2)
    assert star.share_max(PROTECTED) == pytest.approx(3 / 7)
    assert group.tolist() == [-1] * 7 + [0] * 4  # ids renumbered
    assert star.exempt_members.size == 0 and star.exhausted.size == 0


def test_a_members_history_raises_the_ratio_the_set_must_meet() -> None:
    # row 0 (value A) needs a ratio of 3 for A: one A in at least 3 rows (plus the margin)
    sensitive = np.array([A, B, C, D, E, B, C, D, E], dtype=np.int32)
    _, star = _protect(sensitive, [[1, 2], [3, 4], [5, 6], [7, 8]], [0], {0: [(A, 3.0)]})
    assert star.size >= 3 * (1 + RATIO_RTOL)
    assert star.size == 5  # 1 + two groups of 2: 3 rows would not clear 3 (1 + margin)
    assert star.ratio[A] == pytest.approx(3.0 * (1 + RATIO_RTOL))


def test_an_exhausted_member_is_exempt_for_its_value_and_counted() -> None:
    # row 0 is at the bound for its own value A (Theorem 1's ratio infinite): exhausted; the
    # pair raises nothing, the set still keeps A below 1/l
    sensitive = np.array([A, B, C, D, E], dtype=np.int32)
    _, star = _protect(sensitive, [[1, 2], [3, 4]], [0], {0: [(A, np.inf)]})
    assert star.exempt_members.tolist() == [0] and star.exhausted.tolist() == [0]
    assert star.size == 3 and _share(sensitive, star.rows) == Fraction(1, 3)


def test_a_requirement_above_any_group_is_met_by_the_set() -> None:
    # row 0 needs a ratio of 6 for its own A (larger than the groups): one A in 7 rows
    sensitive = np.array([A, B, C, D, E, B, C, D, E], dtype=np.int32)
    _, star = _protect(sensitive, [[1, 2], [3, 4], [5, 6], [7, 8]], [0], {0: [(A, 6.0)]})
    assert star.exempt_members.size == 0 and star.size == 7


def test_no_decoy_brings_a_value_a_member_is_at_the_bound_for() -> None:
    # row 0 (A) is at the bound for B: a group holding B may not join the set
    sensitive = np.array([A, B, C, C, D], dtype=np.int32)
    _, star = _protect(sensitive, [[1, 2], [3, 4]], [0], {0: [(B, np.inf)]})
    assert star.rows.tolist() == [0, 3, 4] and star.exempt_members.size == 0


def test_a_set_no_decoy_can_make_safe_refuses_the_release() -> None:
    sensitive = np.array([A, A, A, B], dtype=np.int32)
    with pytest.raises(GuaranteeUnsatisfiable, match="suppressed rows cannot be made safe"):
        _protect(sensitive, [], [], {})


def _place_into(target: int):  # type: ignore[no-untyped-def]
    """Puts every row it is given into group ``target``."""

    def place(group: np.ndarray, rows: np.ndarray) -> np.ndarray:
        out = group.copy()
        out[rows] = target
        return out

    return place


def test_a_row_left_over_at_the_bound_for_a_value_of_the_set_is_placed() -> None:
    # row 1 (B, eligible) is at the bound for A, which exhausted row 0 brings; grouping left
    # row 1 over
    sensitive = np.array([A, B, C, D, C, D, E], dtype=np.int32)
    groups, history = [[2, 3], [4, 5, 6]], {0: [(A, np.inf)], 1: [(A, np.inf)]}
    group, star = _protect(sensitive, groups, [0], history, _place_into(1))
    assert 1 not in star.rows.tolist() and group[1] >= 0
    assert star.exempt_members.tolist() == [0] and star.exempt_row.tolist() == [0]
    # where no group takes it, it is unplaced: counted as forced, its pair exempt
    _, star = _protect(sensitive, groups, [0], history)
    assert star.unplaced.tolist() == [1] and star.forced.tolist() == [0, 1]
    assert star.exempt_members.tolist() == [0, 1]


def test_only_the_spent_pairs_of_a_spent_member_go_unheld() -> None:
    # forced row 0 is at the bound for its own A but needs a ratio of 5 for C (row 1's)
    sensitive = np.array([A, C, B, D, B, D, E, E], dtype=np.int32)
    history = {0: [(A, np.inf), (C, 5.0)]}
    _, star = _protect(sensitive, [[2, 3], [4, 5], [6, 7]], [0, 1], history)
    assert star.exempt_row.tolist() == [0] and star.exempt_value.tolist() == [A]
    assert star.ratio[C] == pytest.approx(5.0 * (1 + RATIO_RTOL))
    assert star.size >= 5 * (1 + RATIO_RTOL)  # one C among more than 5 rows
    assert star.exhausted.tolist() == [0] and star.forced.tolist() == [0, 1]


def test_a_row_its_group_can_spare_joins_when_no_whole_group_can() -> None:
    # rows 0 (A) and 1 (B) are forced: one more row makes each 1/3 < 1/2. Rows 4 and 7 are at
    # the bound for A, so neither whole group may join; a group of three that stays valid
    # with two gives a row, and nothing is grouped again
    sensitive = np.array([A, B, C, D, E, C, D, E], dtype=np.int32)
    history = {4: [(A, np.inf)], 7: [(A, np.inf)]}
    group, star = _protect(
        sensitive, [[2, 3, 4], [5, 6, 7]], [0, 1], history, _nowhere, lambda rows: rows.size >= 2
    )
    assert star.rows.tolist() == [0, 1, 2] and star.decoys.tolist() == [2]
    assert group.tolist() == [-1, -1, -1, 0, 0, 1, 1, 1]


def _place_distinct(sensitive: np.ndarray):  # type: ignore[no-untyped-def]
    """Puts each row into the first group that does not hold its value yet."""

    def place(group: np.ndarray, rows: np.ndarray) -> np.ndarray:
        out = group.copy()
        for r in rows.tolist():
            for g in np.unique(out[out >= 0]).tolist():
                if sensitive[r] not in sensitive[out == g]:
                    out[r] = g
                    break
        return out

    return place


def test_a_row_whose_group_breaks_without_it_joins_when_the_rest_fits_elsewhere() -> None:
    # rows 0 (A) and 1 (B) are forced. Rows 4 and 7 are at the bound for A: no whole group
    # may join; no group can spare a row; grouping again without rows 2 and 5 leaves 4 and 7
    # where no group takes them. Row 2 joins and the rest of its group, D and E, goes to the
    # group of C, B, C
    sensitive = np.array([A, B, C, D, E, C, B, C], dtype=np.int32)
    history = {3: [(D, 5.0)], 4: [(A, np.inf)], 7: [(A, np.inf)]}
    group, star = _protect(
        sensitive, [[2, 3, 4], [5, 6, 7]], [0, 1], history, _place_distinct(sensitive)
    )
    assert star.rows.tolist() == [0, 1, 2] and star.decoys.tolist() == [2]
    assert group.tolist() == [-1, -1, -1, 0, 0, 0, 0, 0]


def test_a_row_at_the_bound_for_a_value_only_another_part_holds_is_placed() -> None:
    # a part of a release cut on shards: row 1 is at the bound for a value no row of this part
    # holds (no local code: its history names it, no requirement here does), which another
    # part's set holds (also_stranded); grouping left row 1 over, and it must be placed
    sensitive = np.array([A, B, C, D, C, D, E], dtype=np.int32)
    n, groups = sensitive.shape[0], [[2, 3], [4, 5, 6]]
    eligible = np.ones(n, dtype=np.bool_)
    eligible[0] = False
    stranded = np.zeros(n, dtype=np.bool_)
    stranded[1] = True

    def protect(place_rows: PlaceRows) -> tuple[np.ndarray, SuppressedSet]:
        return protect_suppressed_set(
            sensitive, PROTECTED, _history(n, {0: [(A, np.inf)]}), eligible,
            _fixed_groups(groups, n), place_rows, _never, **SETTINGS, also_stranded=stranded,
        )  # fmt: skip

    group, star = protect(_place_into(1))
    assert 1 not in star.rows.tolist() and group[1] >= 0
    # where no group takes it, it is unplaced, counted as forced (its part's vote then keeps
    # the value out of every part's set: PlannedRelease.set_needs' blocks)
    _, star = protect(_nowhere)
    assert star.unplaced.tolist() == [1] and star.forced.tolist() == [0, 1]


def test_no_decoy_is_at_the_bound_for_a_value_only_another_part_holds() -> None:
    # row 0 forced (A) needs decoys; rows 1-6 in two groups, each row and each group able to
    # join; rows 1 and 2 of the first group (the one taken first otherwise) are
    # also_stranded, so the decoys come from the second
    sensitive = np.array([A, B, C, D, B, C, D], dtype=np.int32)
    n = sensitive.shape[0]
    eligible = np.ones(n, dtype=np.bool_)
    eligible[0] = False
    stranded = np.zeros(n, dtype=np.bool_)
    stranded[[1, 2]] = True
    groups = _fixed_groups([[1, 2, 3], [4, 5, 6]], n)
    for valid in (_never, lambda rows: True):
        _, star = protect_suppressed_set(
            sensitive, PROTECTED, _history(n, {}), eligible, groups, _nowhere, valid,
            **SETTINGS, also_stranded=stranded,
        )  # fmt: skip
        assert not set(star.rows.tolist()) & {1, 2} and star.decoys.size
        assert star.share_max(PROTECTED) <= Fraction(1, 2)
