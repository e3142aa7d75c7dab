"""The union of the suppressed sets of a release cut in parts (one per shard), at the level of
the plan: a part's vote (:meth:`GuaranteePlan.set_needs`), a part planned again in a later
round of the vote (:func:`plan_release` with ``set_floor``, what ``release_vote.lua`` passes
on) and a part's members linked to the union (:func:`relink_suppressed`), on hand-built parts
whose histories make each case arise.

Two parts, A and B, under constant-ratio ``l = 2``, ``k' = 3`` (groups of five distinct values
at least), ``min_group_size = 2``, ``max_group_factor = 4`` (the cap 20). In each part one row
is *withheld for its history* (its plan for a value, Theorem 1's 26, is above the cap), so each
part has a suppressed set, which takes a published group as decoys. Pinned here:

* a protected value that part A holds and part B lacks entirely (no row of B holds it): the
  ratio B's members need for it is in B's vote, A's set holds it as its floor, and B's members
  are then safely linked to the union; without the floor they are not (the control);
* a member of B at the bound for that value is withheld whatever it holds, and linked to the
  union it is held to the per-release bound only: its pair is exempt, and counted past ``1/l``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from support.tables import encode_columns

from stream_release.config import GroupingSettings
from stream_release.core.grouping.partition import group_size_cap
from stream_release.core.privacy.linkage import HistoryRows
from stream_release.core.privacy.strategy import make_strategy
from stream_release.core.table import EncodedTable
from stream_release.errors import GuaranteeUnsatisfiable
from stream_release.history import FileHistoryStore
from stream_release.mechanisms.base import ReleaseInput, ReleaseRandomness
from stream_release.mechanisms.global_guarantee.mechanism import GuaranteePlan
from stream_release.mechanisms.global_guarantee.plan import (
    SuppressedUnion,
    plan_release,
    relink_suppressed,
)

STRATEGY = make_strategy("constant-ratio", ell=2, k_prime=3)
MIN_GROUP_SIZE = 2
GROUPING = GroupingSettings(max_group_factor=4.0)
CAP = group_size_cap(STRATEGY.base_ratio, MIN_GROUP_SIZE, GROUPING.max_group_factor)

BEYOND_CAP = 0.52
"""A history ``P`` whose Theorem 1 ratio, ``0.52 / 0.02 = 26``, is above the cap (20): a row
with it is withheld for its history, whatever value it holds."""

LINKED = 0.5265
"""A history ``P`` whose Theorem 1 ratio is ``0.5265 / 0.0265 = 19.9`` (just below the cap): a
row not withheld with it needs a set 19.9 times the rows holding that value."""

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
) -> GuaranteePlan:
    """A part planned as :meth:`GlobalGuarantee.plan` plans it (rows in the given order)."""
    plan = plan_release(
        table,
        history,
        values,
        STRATEGY,
        min_group_size=MIN_GROUP_SIZE,
        grouping=GROUPING,
        set_floor=floor,
    )
    pseudonyms = np.zeros(table.n_rows, dtype="S16")
    inputs = ReleaseInput(
        table=table,
        pseudonyms=pseudonyms,
        label="r",
        sequence=1,
        store=FileHistoryStore(Path("never-written")),  # the plan is given: nothing is read
        randomness=ReleaseRandomness(b"a test's secret, not a key", 1),
        started=0.0,
    )
    return GuaranteePlan(inputs, table, pseudonyms, plan, history)


def union_of(*parts: GuaranteePlan) -> SuppressedUnion:
    """The union of the parts' suppressed rows, as ``release_vote.lua`` adds them up."""
    counts: dict[str, int] = {}
    for part in parts:
        for value, count in part.suppressed().counts.items():
            counts[value] = counts.get(value, 0) + count
    size = sum(part.suppressed().size for part in parts)
    return SuppressedUnion(counts, size)


def suppressed_ids(part: GuaranteePlan) -> set[str]:
    return {str(i) for i in part.table.ids[part.plan.group < 0].tolist()}


def withheld_ids(part: GuaranteePlan) -> list[str]:
    return [str(i) for i in part.table.ids[part.plan.suppressed_set.withheld].tolist()]


def relink(part: GuaranteePlan, union: SuppressedUnion) -> GuaranteePlan:
    """The part with its suppressed rows linked to ``union``, as :meth:`Publisher.relink`
    links it (every bound checked again)."""
    plan = relink_suppressed(part.table, part.history, part.plan, union)
    return replace(part, plan=plan, linked_to=union)


def part_b_rows() -> list[Row]:
    """Part B: ``m`` (value ``v00``), the withheld ``g`` (value ``w``), five rows of five other
    values (one group, with ``m`` when it is not withheld); no row holds ``x`` or any of A's
    values."""
    rows: list[Row] = [("m", "v00", 0, 0), ("g", "w", 6, 6)]
    rows += [(f"b{i:02d}", f"v{i:02d}", i % 2, i // 2) for i in range(1, 6)]
    return rows


def part_a_rows(withheld_value: str) -> list[Row]:
    """Part A: the withheld ``f`` (holding ``withheld_value``) and thirty rows of thirty values
    B does not hold."""
    rows: list[Row] = [("f", withheld_value, 7, 7)]
    rows += [(f"a{i:02d}", f"u{i:02d}", i % 7, i // 7) for i in range(30)]
    return rows


def breach_for(part: GuaranteePlan, row_id: str, value: str) -> float:
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
    """B's ``m`` was linked to ``x`` before (``P = 0.5265``: it needs a set 19.9 times the
    rows holding ``x``), and B holds no ``x`` now; A's withheld ``f`` holds ``x``. The need is in
    B's vote, A planned with it as its floor holds it, and ``m``, linked to the union, stays
    within ``1/l``; the union of A planned without the floor is too small for ``m``."""
    b_table = part_table(tmp_path, part_b_rows())
    assert "x" not in b_table.sensitive_values
    b_values = ("w", "x")
    b_history = part_history(b_table, {"m": [("x", LINKED)], "g": [("w", BEYOND_CAP)]}, b_values)
    b = plan_part(b_table, b_history, b_values)
    assert withheld_ids(b) == ["g"]
    assert "m" in suppressed_ids(b)  # the case arises: m joined B's set as a decoy
    ratios, base = b.set_needs(())
    need = ratios["x"]  # a value B's table lacks: its vote states it all the same
    ratio = LINKED / (LINKED - 0.5)  # Theorem 1, l = 2
    assert need == pytest.approx(ratio, rel=1e-6) and need > ratio
    assert base == STRATEGY.base_ratio  # B's set has members not withheld

    a_table = part_table(tmp_path, part_a_rows("x"))
    a_values = ("x",)
    a_history = part_history(a_table, {"f": [("x", BEYOND_CAP)]}, a_values)
    plain = plan_part(a_table, a_history, a_values)
    floored = plan_part(a_table, a_history, a_values, floor={"x": need})
    for a in (plain, floored):
        assert withheld_ids(a) == ["f"] and a.suppressed().counts["x"] == 1
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


def test_a_member_at_the_bound_is_withheld_and_held_to_the_per_release_bound(
    tmp_path: Path,
) -> None:
    """B's ``m`` is at the bound for ``x`` (``P = 0.45``), which no row of B holds: whatever it
    holds, B withholds it (its plan for ``x`` is infinite), so its suppression says nothing of
    its value. Linked to a union that holds ``x`` (A's set), its pair for ``x`` is exempt: the
    union's share of ``x`` is below ``1/l`` (this release alone links ``m`` to ``x`` with
    probability under ``1/l``), and the pair past the bound is counted (``spent``)."""
    b_table = part_table(tmp_path, part_b_rows())
    b_values = ("w", "x")
    b_history = part_history(b_table, {"m": [("x", AT_BOUND)], "g": [("w", BEYOND_CAP)]}, b_values)
    b = plan_part(b_table, b_history, b_values)
    assert sorted(withheld_ids(b)) == ["g", "m"]
    # the same with m holding another value: withheld all the same
    moved = [("m", "v05", 0, 0), *part_b_rows()[1:6], ("b05", "v00", 1, 2)]
    again = plan_part(part_table(tmp_path, moved), b_history, b_values)
    assert sorted(withheld_ids(again)) == ["g", "m"]

    a_table = part_table(tmp_path, part_a_rows("x"))
    a = plan_part(a_table, part_history(a_table, {"f": [("x", BEYOND_CAP)]}, ("x",)), ("x",))
    union = union_of(a, b)
    assert union.counts["x"] == 1 and union.counts["x"] / union.size < 0.5
    linked = relink(b, union)
    assert breach_for(linked, "m", "x") > 0.5  # past the bound: the per-release bound only
    assert linked.plan.spent_pairs >= 1
    rows = linked.plan.suppressed_set.exempt_members
    assert sorted(str(i) for i in linked.table.ids[rows].tolist()) == ["g", "m"]
