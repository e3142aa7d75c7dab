"""The union of the suppressed sets of a release cut in parts (one per shard), at the level of
the plan: a part's vote (:meth:`PlannedRelease.set_needs`), a part planned again in a later
round of the vote (:func:`plan_release` with ``set_floor``, ``set_held``, ``set_blocked``,
what ``release_vote.lua`` passes on) and a part's members linked to the union
(:func:`relink_suppressed`), on hand-built parts whose histories make each case arise.

Two parts, A and B, under constant-ratio ``l = 2``, ``k' = 3`` (groups of five distinct values
at least), ``min_group_size = 2``, the cap 10. In each part one row is *forced* (its own
value's Theorem 1 ratio, 11, is above the cap), so each part has a suppressed set, which
takes published rows as decoys. Pinned here:

* a protected value that part A holds and part B lacks entirely (no row of B holds it): the
  ratio B's members need for it is in B's vote, A's set holds it as its floor, and B's members
  are then safely linked to the union; without the floor they are not (the control);
* the same value, a member of B at the bound for it: planned again with the value held by the
  union, B must place that member into a group (as it does for a value its table holds);
* a forced member of A spent for a value B's set holds: A's vote blocks the value, B planned
  again keeps it out of its set, and A's forced member is linked to a union without it;
  linked to the union B first planned, it would pass the bound (the control).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from support.tables import encode_columns

from stream_release.core.grouping.partition import group_size_cap
from stream_release.core.privacy.strategy import make_strategy
from stream_release.core.table import EncodedTable
from stream_release.errors import GuaranteeUnsatisfiable
from stream_release.history.types import HistoryRows
from stream_release.pipeline.plan import SuppressedUnion, plan_release, relink_suppressed
from stream_release.pipeline.publisher import PlannedRelease

STRATEGY = make_strategy("constant-ratio", ell=2, k_prime=3)
MIN_GROUP_SIZE = 2
CAP = group_size_cap(STRATEGY.base_ratio, MIN_GROUP_SIZE, 2.0)

BEYOND_CAP = 0.55
"""A history ``P`` whose Theorem 1 ratio, ``0.55 / 0.05 = 11``, is above the cap (10): a row
holding that value is forced, and a forced row's pair for it is spent."""

LINKED = 0.53
"""A history ``P`` whose Theorem 1 ratio is ``0.53 / 0.03 = 17.7``: a row not forced holding
it needs a set 17.7 times the rows holding that value."""

AT_BOUND = 0.45
"""A history ``P`` at the bound (``P <= 1 - 1/l``): any further linkage breaches."""

Row = tuple[str, str, int, int]
"""id, sensitive value, two numeric QIDs."""


def part_table(tmp_path: Path, rows: list[Row]) -> EncodedTable:
    table = encode_columns(
        tmp_path,
        {"x": [str(r[2]) for r in rows], "y": [str(r[3]) for r in rows]},
        [r[1] for r in rows],
        ids=[r[0] for r in rows],
    )
    assert table.ids.tolist() == [r[0] for r in rows]
    return table


def part_history(
    table: EncodedTable, entries: Mapping[str, list[tuple[str, float]]], values: tuple[str, ...]
) -> HistoryRows:
    """The history of the table's rows: ``id -> [(value, P)]`` (one link each), by the part's
    value dictionary ``values``."""
    indptr = np.zeros(table.n_rows + 1, np.int64)
    value: list[int] = []
    log_p: list[float] = []
    for i, name in enumerate(table.ids.tolist()):
        mine = sorted((values.index(v), float(np.log(p))) for v, p in entries.get(name, []))
        indptr[i + 1] = indptr[i] + len(mine)
        value.extend(v for v, _ in mine)
        log_p.extend(p for _, p in mine)
    return HistoryRows(
        indptr,
        np.array(value, np.int32),
        np.array(log_p, np.float64),
        np.ones(len(value), np.int32),
    )


def plan_part(
    table: EncodedTable,
    history: HistoryRows,
    values: tuple[str, ...],
    *,
    floor: Mapping[str, float] | None = None,
    held: Collection[str] = (),
    blocked: Collection[str] = (),
) -> PlannedRelease:
    """A part planned as :meth:`Publisher.plan` plans it (rows in the given order)."""
    plan = plan_release(
        table,
        history,
        values,
        STRATEGY,
        min_group_size=MIN_GROUP_SIZE,
        set_floor=floor,
        set_held=held,
        set_blocked=blocked,
    )
    pseudonyms = np.zeros(table.n_rows, dtype="S16")
    return PlannedRelease(1, "r", table, pseudonyms, plan, None, False, 0.0, history)


def union_of(*parts: PlannedRelease) -> SuppressedUnion:
    """The union of the parts' suppressed rows, as ``release_vote.lua`` adds them up."""
    counts: dict[str, int] = {}
    for part in parts:
        for value, count in part.suppressed().counts.items():
            counts[value] = counts.get(value, 0) + count
    size = sum(part.suppressed().size for part in parts)
    forced = frozenset().union(*(part.suppressed().forced for part in parts))
    return SuppressedUnion(counts, size, forced)


def suppressed_ids(part: PlannedRelease) -> set[str]:
    return {str(i) for i in part.table.ids[part.plan.group < 0].tolist()}


def forced_ids(part: PlannedRelease) -> list[str]:
    return [str(i) for i in part.table.ids[part.plan.suppressed_set.forced].tolist()]


def relink(part: PlannedRelease, union: SuppressedUnion) -> PlannedRelease:
    """The part with its suppressed rows linked to ``union``, as :meth:`Publisher.relink`
    links it (every bound checked again)."""
    plan = relink_suppressed(part.table, part.history, part.plan, union, cap=CAP)
    return replace(part, plan=plan, linked_to=union)


def part_b_rows() -> list[Row]:
    """Part B: ``m`` (value ``v00``), the forced ``g`` (value ``w``), eleven rows of eleven
    other values; no row holds ``x`` or any of A's values."""
    rows: list[Row] = [("m", "v00", 0, 0), ("g", "w", 6, 6)]
    rows += [(f"b{i:02d}", f"v{i:02d}", i % 6, i // 6) for i in range(1, 12)]
    return rows


def part_a_rows(forced_value: str) -> list[Row]:
    """Part A: the forced ``f`` (holding ``forced_value``) and thirty rows of thirty values B
    does not hold."""
    rows: list[Row] = [("f", forced_value, 7, 7)]
    rows += [(f"a{i:02d}", f"u{i:02d}", i % 7, i // 7) for i in range(30)]
    return rows


def breach_for(part: PlannedRelease, row_id: str, value: str) -> float:
    """``1 - P`` of one individual's pair after the release (its merged history)."""
    row = part.table.ids.tolist().index(row_id)
    committed = part.plan.committed.tolist().index(row)
    history = part.plan.history
    start, stop = int(history.indptr[committed]), int(history.indptr[committed + 1])
    values = history.value[start:stop].tolist()
    [log_p] = history.log_p[start:stop][np.array(values) == part.plan.values.index(value)]
    return 1.0 - float(np.exp(log_p))


def test_a_value_one_part_lacks_is_held_to_its_members_need_by_the_part_that_holds_it(
    tmp_path: Path,
) -> None:
    """B's ``m`` was linked to ``x`` before (``P = 0.53``: it needs a set 17.7 times the rows
    holding ``x``), and B holds no ``x`` now; A's forced ``f`` holds ``x``. The need is in B's
    vote, A planned with it as its floor holds it, and ``m``, linked to the union, stays
    within ``1/l``; the union of A planned without the floor is too small for ``m``."""
    b_table = part_table(tmp_path, part_b_rows())
    assert "x" not in b_table.sensitive_values
    b_values = ("w", "x")
    b_history = part_history(b_table, {"m": [("x", LINKED)], "g": [("w", BEYOND_CAP)]}, b_values)
    b = plan_part(b_table, b_history, b_values)
    assert "m" in suppressed_ids(b) and suppressed_ids(b) >= {"g"}
    ratios, strands, blocks = b.set_needs((), CAP)
    need = ratios["x"]  # a value B's table lacks: its vote states it all the same
    assert need == pytest.approx(0.53 / 0.03, rel=1e-6) and need > 0.53 / 0.03
    assert (strands, blocks) == ([], [])

    a_table = part_table(tmp_path, part_a_rows("x"))
    a_values = ("x",)
    a_history = part_history(a_table, {"f": [("x", BEYOND_CAP)]}, a_values)
    plain = plan_part(a_table, a_history, a_values)
    floored = plan_part(a_table, a_history, a_values, floor={"x": need})
    for a in (plain, floored):
        assert forced_ids(a) == ["f"] and a.suppressed().counts["x"] == 1
    # the floor is the ratio A's own set holds for x, whatever its members need
    assert floored.suppressed().counts["x"] * need <= floored.suppressed().size
    union = union_of(floored, b)
    assert union.counts["x"] * need <= union.size
    assert union.counts["x"] / union.size < 0.5
    linked = relink(b, union)
    assert breach_for(linked, "m", "x") < 0.5
    assert linked.plan.suppressed_breach < 0.5
    relink(floored, union)  # A's members keep the bound too

    # the control: without the floor the union is too small for m's need, and m would pass
    # the bound (so it is the floor that keeps m safe above)
    short = union_of(plain, b)
    assert short.counts["x"] * need > short.size
    with pytest.raises(GuaranteeUnsatisfiable):
        relink(b, short)


def test_a_member_at_the_bound_for_a_value_its_part_lacks_is_placed_when_the_union_holds_it(
    tmp_path: Path,
) -> None:
    """B's ``m`` is at the bound for ``x`` (``P = 0.45``), which no row of B holds; B's first
    plan takes ``m`` into its set as a decoy and votes ``x`` as a strand (A's set holds
    ``x``). Planned again with ``x`` held, as the next round of the vote plans it, B must
    put ``m`` into a group: the union holds ``x``, and any linkage to it breaches ``m``."""
    b_table = part_table(tmp_path, part_b_rows())
    b_values = ("w", "x")
    b_history = part_history(b_table, {"m": [("x", AT_BOUND)], "g": [("w", BEYOND_CAP)]}, b_values)
    first = plan_part(b_table, b_history, b_values)
    assert "m" in suppressed_ids(first)  # the case arises: m is in B's set
    assert first.set_needs((), CAP)[1] == ["x"]  # B's vote: m is stranded for x

    a_table = part_table(tmp_path, part_a_rows("x"))
    a = plan_part(a_table, part_history(a_table, {"f": [("x", BEYOND_CAP)]}, ("x",)), ("x",))
    assert a.suppressed().counts["x"] == 1  # A's set holds x: the union does

    again = plan_part(b_table, b_history, b_values, held=sorted(union_of(a, first).counts))
    assert "m" not in suppressed_ids(again), "m stays in B's set although the union holds x"
    assert again.set_needs((), CAP)[1] == []
    relink(again, union_of(a, again))


def test_a_forced_members_spent_value_is_kept_out_of_the_other_parts_set(
    tmp_path: Path,
) -> None:
    """A's forced ``f`` is at the bound for ``v01``, a value A does not suppress; B's first
    plan takes the holder of ``v01``, ``b01``, into its set as a decoy. A's vote blocks
    ``v01``; B planned again with it blocked (``also_blocked``) keeps it out of its set and
    groups ``b01``; ``f`` is linked to a union without ``v01``. Linked to the union of B's
    first plan, ``f`` would pass the bound: the union would link its spent pair."""
    b_table = part_table(tmp_path, part_b_rows())
    b_values = ("w",)
    b_history = part_history(b_table, {"g": [("w", BEYOND_CAP)]}, b_values)
    first = plan_part(b_table, b_history, b_values)
    assert "b01" in suppressed_ids(first)  # the case arises: B's set holds v01
    assert first.suppressed().counts.get("v01") == 1 and "v01" not in first.suppressed().forced

    a_table = part_table(tmp_path, part_a_rows("u99"))
    a_values = ("u99", "v01")
    a_history = part_history(a_table, {"f": [("u99", BEYOND_CAP), ("v01", AT_BOUND)]}, a_values)
    a = plan_part(a_table, a_history, a_values)
    assert forced_ids(a) == ["f"] and "v01" not in a.suppressed().counts
    _, strands, blocks = a.set_needs((), CAP)
    assert "v01" in blocks and "v01" not in strands  # A's vote: v01 kept out of every set

    again = plan_part(b_table, b_history, b_values, blocked=blocks)
    assert "v01" not in again.suppressed().counts  # kept out
    assert int(again.plan.group[again.table.ids.tolist().index("b01")]) >= 0  # b01 grouped
    assert again.set_needs((), CAP)[2] == []
    union = union_of(a, again)
    assert "v01" not in union.counts and union.counts["u99"] == 1
    linked = relink(a, union)
    assert breach_for(linked, "f", "v01") == pytest.approx(1.0 - AT_BOUND)  # not linked again
    relink(again, union)

    # the control: the union of B's first plan links f's spent pair for v01 past the bound
    with pytest.raises(GuaranteeUnsatisfiable):
        relink(a, union_of(a, first))
