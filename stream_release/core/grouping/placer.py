"""Single rows put into the existing groups of a release: the rows the suppressed set may not
keep (:mod:`stream_release.core.grouping.suppressed_set`).

:class:`Placer` puts each row into the group nearest to it, anywhere in the release, that
stays valid with it, or swaps it for a member another group takes. The suppressed set calls
it thousands of times per release, each time on a grouping that differs from the last in a
few rows, so it keeps its state between calls and brings it up to date with the rows that
changed: the members of every group, the count ``n(G, s)`` and the largest requirement
``R(G, s)`` of every group for the values it was asked about, and a k-d tree of the groups'
first rows. A row looks at its nearest groups in the tree first and at every group only when
none of those is sure to be the answer, so the result is the one an exhaustive search gives
(nearest first, ties in id order) at a cost that no longer grows with the release.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray
from scipy.spatial import cKDTree

from stream_release.core.grouping.layout import rows_by_group
from stream_release.core.grouping.merge import GroupValidity
from stream_release.core.grouping.requirements import Requirements

__all__ = ["Placer", "ValueIndex", "WorkBudget", "first_rows"]

SCAN_GROUPS = 8192
"""Up to this many group ids a search scans every group at once instead of asking the tree
first: the same answer (the tree's is the exhaustive one), and a scan of a few thousand
groups in one kernel costs less than a tree query from Python (about 0.15 ms)."""
SWAP_GROUPS = 64
"""Nearest groups where a row no group takes as it is is tried in a swap."""
LOCAL_GROUPS = (32, 256)
"""How many of the nearest groups (k-d tree) a row checks, one round after another, before it
checks every group: a nearby group that takes the row is the answer when it is nearer than
every group the round left out."""
TIE_MARGIN = 8
"""Groups past the ``k``-th a tree query also returns: when the last of them is farther than
the ``k``-th (beyond the tolerance), they hold every group within its distance and the ball
query is not needed (one tree walk instead of two)."""
TOLERANCE = 1e-9
"""Margin between the tree's distances and the exact ones (both sum at most d terms of
``[0, 1]``): the groups a row checks are those the tree puts within its radius plus this, so
that every group left out is farther than the radius by the exact distance too."""
VALUE_BYTES = 256 * 2**20
"""Memory for the per-group counts and requirements of values (16 bytes a group and value);
past it the least recently asked values are given up, :data:`MIN_VALUES` kept at least."""
MIN_VALUES = 16
STALE_GROUPS = 16384
"""Groups whose first row moved since the tree was built, checked one by one, before the tree
is built again."""
REMEMBERED_CHANGES = 4096
"""Least number of group changes after a search of every group during which what it found is
remembered (:class:`_Refusals`; a quarter of the groups when more)."""
REBUILD_WORK = 4
"""The tree is also built again once the moved groups checked one by one since it was built
add up to this many times the groups it holds (plus :data:`LOCAL_GROUPS`' last round): about
what a new tree costs. A tree built while most groups were empty would otherwise leave
thousands of groups to be checked one by one at every call (measured: a 3-release plan on
Adult that took 1 s under most keys took over 300 s under some, 2,775 moved groups checked per
call against a tree of 205)."""


SWAP_WORK = 1
"""Members a release may try in swaps, per row of the release (:class:`WorkBudget`)."""
SEARCH_WORK = 1 / 4
"""Searches for another group for a swapped member (each a k-d tree query, about 0.2 ms), per
row of the release."""
REGROUP_WORK = 1
"""Rows a release may group again around rows no group takes, per row of the release."""


@dataclass(eq=False)
class WorkBudget:
    """The work a release may spend on its rows that no group takes as they are: members tried
    in a swap (:meth:`Placer.place`) and rows grouped again around a row
    (:func:`~stream_release.core.grouping.partition.place_in_groups`), each at most a few
    times the release's rows. Without it, a release whose histories leave thousands of rows
    over (a panel under geometric alpha = 3: a quarter of its rows) tried 384 swaps and three
    regroupings of up to 64 groups for each, most in vain: 437 s where the release before took
    0.4 s. With it, those passes cost O(n) searches whatever the history; the rows the
    budget no longer reaches (its swaps, its searches for a swapped member's other group, or its
    regrouped rows spent) go on to the next steps (grouped among themselves, placed into
    groups up to the wide cap, else suppressed), as the rows the passes could not place did."""

    swaps: int
    regroup: int
    searches: int

    @classmethod
    def for_rows(cls, n: int) -> WorkBudget:
        """The budget of a release of ``n`` rows."""
        return cls(SWAP_WORK * n, REGROUP_WORK * n, math.ceil(SEARCH_WORK * n))

    def spend_search(self) -> bool:
        """Whether one more search for a swapped member's group may be made (spent if so);
        once there are none, no swap is tried any more."""
        if self._spend("searches", 1):
            return True
        self.swaps = 0
        return False

    def spend_swaps(self, members: int) -> bool:
        """Whether ``members`` more may be tried in a swap (spent if so)."""
        return self._spend("swaps", members)

    def spend_regroup(self, rows: int) -> bool:
        """Whether ``rows`` more may be grouped again (spent if so)."""
        return self._spend("regroup", rows)

    def _spend(self, kind: str, amount: int) -> bool:
        """Take ``amount`` of ``kind`` if that much is left; else none is left of it."""
        left: int = getattr(self, kind)
        setattr(self, kind, left - amount if amount <= left else 0)
        return amount <= left


@dataclass(frozen=True, eq=False)
class ValueIndex:
    """The rows of each value and the requirement entries of each value. It depends on the
    rows' values and requirements only, so a release builds it once (:meth:`of`): for 3M rows
    with 3M requirement entries it takes 0.25 s (median of 5, 2 cores, nothing else
    running)."""

    owner: NDArray[np.int64]
    by_value: NDArray[np.int64]
    value_start: NDArray[np.int64]
    by_entry: NDArray[np.int64]
    entry_start: NDArray[np.int64]

    @classmethod
    def of(
        cls, sensitive: NDArray[np.int32], n_values: int, requirements: Requirements
    ) -> ValueIndex:
        n = sensitive.shape[0]
        by_value = np.argsort(sensitive, kind="stable")
        by_entry = np.argsort(requirements.value, kind="stable")
        return cls(
            np.repeat(np.arange(n, dtype=np.int64), np.diff(requirements.ptr)),
            by_value,
            np.searchsorted(sensitive[by_value], np.arange(n_values + 1)),
            by_entry,
            np.searchsorted(requirements.value[by_entry], np.arange(n_values + 1)),
        )


class Placer:
    """Puts ungrouped rows into a release's groups (:meth:`place`), call after call.

    A group takes row ``x`` when it has fewer than ``cap`` rows and, for ``x``'s value and
    every value ``x`` has a requirement for, ``|G| + 1 >= n(G + x, s) max(R(G,s), r(x,s))``
    (``R`` the members' requirements and the base; a value ``x`` is at the bound for fits
    only a group without it). The other values of the group keep their counts and gain a
    row: they stay valid. A swap is checked as a whole (:class:`~stream_release.core.grouping.
    merge.GroupValidity`). Nearest: the smallest distance of the QID codes to the group's first
    row, each attribute scaled to ``[0, 1]`` (``norm``); ties in id order.
    """

    def __init__(
        self,
        qid: NDArray[np.int32],
        norm: NDArray[np.float64],
        sensitive: NDArray[np.int32],
        protected: NDArray[np.bool_],
        requirements: Requirements,
        *,
        cap: int,
        min_group_size: int,
    ) -> None:
        self.qid, self.norm, self.sensitive = qid, norm, sensitive
        self.protected, self.req, self.cap = protected, requirements, cap
        self.check = GroupValidity(sensitive, protected, requirements, min_group_size)
        self._index: ValueIndex | None = None
        self._state: _State | None = None

    def place(
        self,
        group: NDArray[np.int64],
        rows: NDArray[np.int64],
        budget: WorkBudget | None = None,
    ) -> NDArray[np.int64]:
        """``group`` with each ungrouped row of ``rows`` put into the group nearest to it that
        stays valid with it; failing that, swapped for a member of one of the
        :data:`SWAP_GROUPS` nearest groups that another group takes, while the ``budget``
        lasts. Same ids; a row no group can take stays ``-1``. ``group`` itself is not
        changed. O(rows) nearest-group searches (each a k-d tree query, or a scan of the
        groups when the tree's neighbourhood cannot tell), plus the swaps' searches, at most
        the budget's."""
        if rows.size == 0 or not np.any(group >= 0):
            return group.copy()
        state = self._sync(group)
        elsewhere: dict[int, NDArray[np.int64]] = {}
        """Each member's two nearest groups that take it, while no row moves."""
        seen = state.version
        for x in rows.tolist():
            if state.group[x] >= 0:
                continue
            if state.version != seen:
                elsewhere.clear()
                seen = state.version
            taking = self._taking(state, x, 1)
            if taking.size:
                state.move(x, int(taking[0]))
                continue
            if budget is not None and budget.swaps == 0:
                continue
            for g in self._nearest(state, x, SWAP_GROUPS).tolist():
                members = state.members.of(g)
                if budget is not None and not budget.spend_swaps(members.shape[0]):
                    break
                for y in members[self.check.valid_swaps(members, x)].tolist():
                    # the nearest group other than g that takes y is the same whether x has
                    # taken y's place in g or not (only g differs, and two are asked for), so
                    # the swap is tried without moving a row, and the answer kept for y
                    near = elsewhere.get(y)
                    if near is None:
                        if budget is not None and not budget.spend_search():
                            break
                        near = elsewhere[y] = self._taking(state, y, 2)
                    near = near[near != g]
                    if near.size:
                        state.move(x, g)
                        state.move(y, int(near[0]))
                        break
                if state.group[x] >= 0:
                    break
        return state.group.copy()

    def nearest(
        self, group: NDArray[np.int64], x: int, limit: int
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The ``limit`` groups of ``group`` with rows nearest to row ``x``, nearest first
        (ties in id order), and their rows."""
        state = self._sync(group)
        near = self._nearest(state, x, limit)
        rows = [state.members.of(g) for g in near.tolist()]
        return near, np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)

    def _sync(self, group: NDArray[np.int64]) -> _State:
        """The state brought to ``group``: row by row when few rows differ, else built anew."""
        n_groups = int(group.max()) + 1
        state = self._state
        if state is not None and n_groups <= state.capacity:
            changed = np.flatnonzero(state.group != group)
            if changed.size <= max(65536, group.shape[0] // 8):
                for x in changed.tolist():
                    state.move(x, int(group[x]))
                state.members.compact()
                return state
        if self._index is None:
            self._index = ValueIndex.of(self.sensitive, self.protected.shape[0], self.req)
        capacity = n_groups + max(1024, n_groups // 8)  # room for the ids new groups take
        self._state = _State(group.copy(), capacity, self, self._index)
        return self._state

    def _taking(self, state: _State, x: int, limit: int) -> NDArray[np.int64]:
        """The ``limit`` nearest groups that stay valid with ``x`` added, nearest first."""
        req = self.req
        own = int(self.sensitive[x])
        lo, hi = int(req.ptr[x]), int(req.ptr[x + 1])
        base = float(req.base)
        largest: dict[int, float] = {own: base} if self.protected[own] else {}
        for value, ratio in zip(req.value[lo:hi].tolist(), req.ratio[lo:hi].tolist(), strict=True):
            largest[value] = max(ratio, largest.get(value, base))
        values = sorted(largest)
        slots = state.values.slots(values)
        added = [1 if s == own else 0 for s in values]
        plus = np.array(added, dtype=np.int64)
        mine = np.array([largest[s] for s in values], dtype=np.float64)
        key = (*values, -1, *added)
        return self._search(state, x, limit, self.cap, slots, plus, mine, key)

    def _nearest(self, state: _State, x: int, limit: int) -> NDArray[np.int64]:
        """The ``limit`` nearest groups with rows, nearest first."""
        none = np.zeros(0, dtype=np.int64)
        return self._search(state, x, limit, state.n + 1, none, none, np.zeros(0))

    def _search(
        self,
        state: _State,
        x: int,
        limit: int,
        cap: int,
        slots: NDArray[np.int64],
        plus: NDArray[np.int64],
        mine: NDArray[np.float64],
        key: tuple[int, ...] = (),
    ) -> NDArray[np.int64]:
        """The ``limit`` nearest groups that take ``x`` (:func:`_nearest_taking`): among the
        nearest in the tree while the answer is sure (past :data:`SCAN_GROUPS` groups), else
        among every group; among fewer
        when an earlier search for the same values (``key``) tells (:class:`_Refusals`)."""
        values = state.values
        known = state.refusals.candidates(key, mine) if key else None
        if known is None and state.sizes.shape[0] > SCAN_GROUPS:
            for k in LOCAL_GROUPS:
                near = state.tree.around(x, max(k, 2 * limit), state.sizes)
                if near is None:
                    break
                candidates, radius = near
                found, gap = _nearest_taking(
                    candidates, state.anchor, state.sizes, self.qid[x], self.norm, cap,
                    slots, plus, mine, values.counts, values.ratios, limit,
                )  # fmt: skip
                if found.size == limit and gap[-1] <= radius:
                    return found
        if known is None:
            found, _ = _nearest_taking_every(
                state.anchor, state.sizes, self.qid[x], self.norm, cap,
                slots, plus, mine, values.counts, values.ratios, limit,
            )  # fmt: skip
        else:
            found, _ = _nearest_taking(
                known, state.anchor, state.sizes, self.qid[x], self.norm, cap,
                slots, plus, mine, values.counts, values.ratios, limit,
            )  # fmt: skip
        if found.size < limit and key:
            state.refusals.keep(key, mine, found)
        return found


@njit(cache=True)
def _nearest_taking(  # pragma: no cover - jit
    groups: NDArray[np.int64],
    anchor: NDArray[Any],
    sizes: NDArray[Any],
    point: NDArray[Any],
    norm: NDArray[np.float64],
    cap: int,
    slots: NDArray[Any],
    plus: NDArray[Any],
    mine: NDArray[Any],
    counts: NDArray[Any],
    ratios: NDArray[Any],
    limit: int,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """The ``limit`` nearest of ``groups`` (in id order) that take the row at ``point`` (its
    QID codes), nearest first (ties in id order), and their distances (to the group's
    ``anchor``, its first row's codes; summed in attribute order). A group takes it with rows,
    fewer than ``cap``, and for each value ``j`` (``counts``/``ratios`` row ``slots[j]``:
    ``n(G, s)`` and ``R(G, s)``) ``c = n(G, s) + plus[j]`` is 0 or
    ``|G| + 1 >= c max(R(G, s), mine[j])``."""
    best = np.full(limit, -1, np.int64)
    best_gap = np.full(limit, np.inf)
    found = 0
    for i in range(groups.shape[0]):
        g = groups[i]
        size = sizes[g]
        if size == 0 or size + 1 > cap:
            continue
        ok = True
        for j in range(slots.shape[0]):
            c = counts[slots[j], g] + plus[j]
            if c == 0:
                continue
            ratio = max(ratios[slots[j], g], mine[j])
            if not size + 1 >= c * ratio:
                ok = False
                break
        if ok:
            found = _offer(g, _gap(anchor, g, point, norm), best, best_gap, found)
    return best[:found], best_gap[:found]


@njit(cache=True)
def _nearest_taking_every(  # pragma: no cover - jit
    anchor: NDArray[Any],
    sizes: NDArray[Any],
    point: NDArray[Any],
    norm: NDArray[np.float64],
    cap: int,
    slots: NDArray[Any],
    plus: NDArray[Any],
    mine: NDArray[Any],
    counts: NDArray[Any],
    ratios: NDArray[Any],
    limit: int,
) -> tuple[NDArray[np.int64], NDArray[np.float64]]:
    """:func:`_nearest_taking` over every group: the condition checked value by value over
    all groups at once (loops without branches, which the compiler vectorizes: 2-3 times
    faster than group by group on 225,000 groups), then the distances of those that take the
    row."""
    taking = np.empty(sizes.shape[0], np.bool_)
    for g in range(sizes.shape[0]):
        taking[g] = (sizes[g] > 0) & (sizes[g] + 1 <= cap)
    for j in range(slots.shape[0]):
        count, largest, add, ratio = counts[slots[j]], ratios[slots[j]], plus[j], mine[j]
        for g in range(sizes.shape[0]):
            c = count[g] + add
            taking[g] &= (c == 0) | (sizes[g] + 1 >= c * max(largest[g], ratio))
    best = np.full(limit, -1, np.int64)
    best_gap = np.full(limit, np.inf)
    found = 0
    for g in range(sizes.shape[0]):
        if taking[g]:
            found = _offer(g, _gap(anchor, g, point, norm), best, best_gap, found)
    return best[:found], best_gap[:found]


@njit(cache=True, inline="always")
def _gap(  # pragma: no cover - jit
    anchor: NDArray[Any], g: int, point: NDArray[Any], norm: NDArray[np.float64]
) -> float:
    """The distance of the row at ``point`` to group ``g``'s anchor (attribute order)."""
    gap = 0.0
    for a in range(point.shape[0]):
        gap += abs(float(anchor[g, a]) - float(point[a])) * norm[a]
    return gap


@njit(cache=True, inline="always")
def _offer(  # pragma: no cover - jit
    g: int, gap: float, best: NDArray[np.int64], best_gap: NDArray[np.float64], found: int
) -> int:
    """Group ``g`` at distance ``gap`` put among the nearest ``best`` (``found`` of them so
    far, nearest first; a tie goes after the groups offered before); the new count."""
    limit: int = best.shape[0]
    if found == limit and gap >= best_gap[limit - 1]:
        return found
    at = min(found, limit - 1)
    while at > 0 and best_gap[at - 1] > gap:
        best[at] = best[at - 1]
        best_gap[at] = best_gap[at - 1]
        at -= 1
    best[at] = g
    best_gap[at] = gap
    return min(found + 1, limit)


@njit(cache=True)
def first_rows(group: NDArray[np.int64], n_groups: int) -> NDArray[np.int64]:
    """(n_groups,) the first row of each group id (``n`` for an id without rows)."""
    n = group.shape[0]
    first = np.full(n_groups, n, np.int64)
    for r in range(n - 1, -1, -1):
        g = group[r]
        if g >= 0:
            first[g] = r
    return first


class _State:
    """A grouping with what :class:`Placer` looks up kept current as rows move."""

    def __init__(
        self, group: NDArray[np.int64], capacity: int, placer: Placer, index: ValueIndex
    ) -> None:
        self.group, self.capacity = group, capacity
        self.n = group.shape[0]
        self.first = first_rows(group, capacity)
        # the first row's codes of each group, in one block: a scan of every group reads them
        # in order instead of from rows all over the table
        self.anchor = placer.qid[np.minimum(self.first, self.n - 1)]
        self.qid = placer.qid
        self.sizes = np.bincount(group[group >= 0], minlength=capacity)
        self.members = _Members(group, capacity)
        self.tree = _GroupTree(placer.qid, placer.norm, self.first, capacity)
        self.values = _ValueCounts(
            self.members, placer.sensitive, placer.req, index, capacity, placer.protected.size
        )
        self.refusals = _Refusals(capacity)
        self.version = 0
        """Rows moved so far: what was looked up at one version holds until the next."""

    def move(self, x: int, g: int) -> None:
        """Put row ``x`` into group ``g`` (``-1``: into none)."""
        old = int(self.group[x])
        if old == g:
            return
        self.version += 1
        self.group[x] = g
        if g >= 0:
            self.members.add(x, g)
            self.sizes[g] += 1
            if x < self.first[g]:
                self.first[g] = x
                self.anchor[g] = self.qid[x]
                self.tree.touch(g)
        if old >= 0:
            self.sizes[old] -= 1
            if self.first[old] == x:
                rows = self.members.of(old)
                self.first[old] = rows[0] if rows.size else self.n
                if rows.size:
                    self.anchor[old] = self.qid[rows[0]]
                self.tree.touch(old)
        self.values.moved(x, old, g)
        self.refusals.changed(old, g)


class _Members:
    """The rows of each group: the grouping's rows sorted by group when built, plus the rows
    moved in since (a row that left is dropped when read)."""

    def __init__(self, group: NDArray[np.int64], capacity: int) -> None:
        self.group = group
        self._build(capacity)

    def _build(self, capacity: int) -> None:
        self.order, self.start = rows_by_group(self.group, capacity)
        self.added: dict[int, list[int]] = {}
        self.n_added = 0

    def add(self, x: int, g: int) -> None:
        self.added.setdefault(g, []).append(x)
        self.n_added += 1

    def of(self, g: int) -> NDArray[np.int64]:
        """The rows of group ``g``, in row order."""
        rows = self.order[self.start[g] : self.start[g + 1]]
        extra = self.added.get(g)
        if extra:
            rows = np.union1d(rows, np.array(extra, dtype=np.int64))
        mine: NDArray[np.int64] = rows[self.group[rows] == g]
        return mine

    def compact(self) -> None:
        """Sorted again once the rows moved in are many."""
        if self.n_added > max(65536, self.group.shape[0] // 8):
            self._build(self.start.shape[0] - 1)


class _ValueCounts:
    """``counts[slot(s)]`` = ``n(G, s)`` and ``ratios[slot(s)]`` = ``R(G, s)`` (the largest
    requirement of the members for ``s``, at least the base) of every group, for the values
    asked about (the least recently asked given up past the slots :data:`VALUE_BYTES`
    allows), kept as rows move."""

    def __init__(
        self,
        members: _Members,
        sensitive: NDArray[np.int32],
        requirements: Requirements,
        index: ValueIndex,
        capacity: int,
        n_values: int,
    ) -> None:
        self.members, self.group = members, members.group
        self.sensitive, self.req, self.index = sensitive, requirements, index
        n_slots = max(1, min(n_values, max(MIN_VALUES, VALUE_BYTES // (16 * capacity))))
        self.counts = np.empty((n_slots, capacity), dtype=np.int64)
        self.ratios = np.empty((n_slots, capacity), dtype=np.float64)
        self.slot_of: OrderedDict[int, int] = OrderedDict()

    def slot(self, s: int, keep: Sequence[int] = ()) -> int:
        """The row of value ``s`` in ``counts`` and ``ratios``, filled when new (giving up a
        value not in ``keep``)."""
        hit = self.slot_of.get(s)
        if hit is not None:
            self.slot_of.move_to_end(s)
            return hit
        if len(self.slot_of) < self.counts.shape[0]:
            at = len(self.slot_of)
        else:
            gone = next((v for v in self.slot_of if v not in keep), None)
            if gone is None:  # every slot is asked for at once: one more
                at = self.counts.shape[0]
                self.counts = np.vstack([self.counts, np.empty_like(self.counts[:1])])
                self.ratios = np.vstack([self.ratios, np.empty_like(self.ratios[:1])])
            else:
                at = self.slot_of.pop(gone)
        index, group = self.index, self.group
        holders = group[index.by_value[index.value_start[s] : index.value_start[s + 1]]]
        capacity = self.counts.shape[1]
        self.counts[at] = np.bincount(holders[holders >= 0], minlength=capacity)
        entries = index.by_entry[index.entry_start[s] : index.entry_start[s + 1]]
        where = group[index.owner[entries]]
        self.ratios[at] = float(self.req.base)
        np.maximum.at(self.ratios[at], where[where >= 0], self.req.ratio[entries][where >= 0])
        self.slot_of[s] = at
        return at

    def slots(self, values: Sequence[int]) -> NDArray[np.int64]:
        """:meth:`slot` of each of ``values`` (none given up for another)."""
        return np.array([self.slot(s, values) for s in values], dtype=np.int64)

    def moved(self, x: int, old: int, new: int) -> None:
        """Row ``x`` went from group ``old`` to ``new`` (``group`` already says so)."""
        at = self.slot_of.get(int(self.sensitive[x]))
        if at is not None:
            if old >= 0:
                self.counts[at, old] -= 1
            if new >= 0:
                self.counts[at, new] += 1
        lo, hi = int(self.req.ptr[x]), int(self.req.ptr[x + 1])
        for t, r in zip(
            self.req.value[lo:hi].tolist(), self.req.ratio[lo:hi].tolist(), strict=True
        ):
            at = self.slot_of.get(t)
            if at is None:
                continue
            if new >= 0 and r > self.ratios[at, new]:
                self.ratios[at, new] = r
            if old >= 0 and r >= self.ratios[at, old]:
                self.ratios[at, old] = self._largest(old, t)

    def _largest(self, g: int, t: int) -> float:
        """``R(g, t)`` from the members' requirements."""
        req = self.req
        return _largest_ratio(self.members.of(g), req.ptr, req.value, req.ratio, t, req.base)


@njit(cache=True)
def _largest_ratio(  # pragma: no cover - jit
    rows: NDArray[np.int64],
    ptr: NDArray[np.int64],
    value: NDArray[Any],
    ratio: NDArray[np.float64],
    t: int,
    base: float,
) -> float:
    """The largest requirement of ``rows`` for value ``t``, at least ``base``: O(their
    entries)."""
    largest = base
    for r in rows:
        for e in range(ptr[r], ptr[r + 1]):
            if value[e] == t and ratio[e] > largest:
                largest = ratio[e]
    return largest


class _GroupTree:
    """A k-d tree of the groups' first rows (QID codes scaled by ``norm``; L1 distance), and
    the groups whose first row moved since it was built (``first`` is the state's, kept
    current by it)."""

    def __init__(
        self,
        qid: NDArray[np.int32],
        norm: NDArray[np.float64],
        first: NDArray[np.int64],
        capacity: int,
    ) -> None:
        self.qid, self.norm, self.first = qid, norm, first
        self.stale = np.zeros(capacity, dtype=np.bool_)
        self._build()

    def _build(self) -> None:
        self.groups = np.flatnonzero(self.first < self.qid.shape[0])
        self.tree = cKDTree(self.qid[self.first[self.groups]].astype(np.float64) * self.norm)
        self.stale[:] = False
        self.moved = np.empty(64, dtype=np.int64)
        """The groups whose first row moved since the build: the first :attr:`n_moved`."""
        self.n_moved = 0
        self.checked = 0
        """Moved groups checked one by one since the build (:data:`REBUILD_WORK`)."""

    def touch(self, g: int) -> None:
        """Group ``g``'s first row moved (or the group emptied or filled)."""
        if not self.stale[g]:
            self.stale[g] = True
            if self.n_moved == self.moved.shape[0]:
                self.moved = np.concatenate([self.moved, np.empty_like(self.moved)])
            self.moved[self.n_moved] = g
            self.n_moved += 1

    def around(
        self, x: int, k: int, sizes: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], float] | None:
        """The groups with rows within the distance ``r`` of the ``k``-th nearest in the tree
        (ties included) and those whose first row moved, in id order, and ``r``: every group
        left out is farther than ``r``. ``None`` when the tree holds ``k`` groups or fewer."""
        worth = REBUILD_WORK * (self.groups.size + LOCAL_GROUPS[-1])
        if self.n_moved > STALE_GROUPS or self.checked > worth:
            self._build()
        if self.groups.size <= k:
            return None
        point = self.qid[x].astype(np.float64) * self.norm
        gap, index = self.tree.query(point, k=k + TIE_MARGIN, p=1)
        radius = float(gap[k - 1])
        if gap[-1] > radius + TOLERANCE:  # every group within the radius is among these
            at = index[gap <= radius + TOLERANCE]
        else:  # ties past the margin: the ball itself
            at = self.tree.query_ball_point(point, radius + TOLERANCE, p=1, return_sorted=False)
        near = self.groups[np.asarray(at, dtype=np.int64)]
        near = near[~self.stale[near]]
        if self.n_moved:  # stale, so none of them is in near already
            self.checked += self.n_moved
            near = np.concatenate([near, self.moved[: self.n_moved]])
        near.sort()
        return near[sizes[near] > 0], radius


class _Refusals:
    """The groups that take a row, remembered from searches of every group that found fewer
    than they asked for, so that a later search for the same values asks only those groups
    and the groups that changed since.

    A search of every group that found fewer than its ``limit`` found every group that takes
    a row of its values (``plus``) and requirements (``mine``). A group that did not change
    since (no row moved in or out: its size, counts and largest requirements are the same)
    takes a row of the same values with requirements at least as large (``mine`` only makes
    the condition harder) only if it took the first; so the groups that take the later row
    are among those found and those changed, and the search over them (in id order) gives
    what a search of every group gives.
    """

    def __init__(self, capacity: int) -> None:
        self.limit = max(REMEMBERED_CHANGES, capacity // 4)
        """Changes remembered; past them the searches are forgotten."""
        self.log: list[int] = []
        self.kept: dict[tuple[int, ...], tuple[NDArray[np.float64], NDArray[np.int64], int]] = {}

    def changed(self, old: int, new: int) -> None:
        """A row moved from group ``old`` to ``new`` (``-1``: none)."""
        if len(self.log) >= self.limit:
            self.log.clear()
            self.kept.clear()
        if old >= 0:
            self.log.append(old)
        if new >= 0:
            self.log.append(new)

    def candidates(
        self, key: tuple[int, ...], mine: NDArray[np.float64]
    ) -> NDArray[np.int64] | None:
        """The groups, in id order, among which are those that take a row of the values
        ``key`` names with requirements ``mine`` (``None``: no remembered search tells)."""
        hit = self.kept.get(key)
        if hit is None or np.any(mine < hit[0]):
            return None
        _, found, at = hit
        if len(self.log) == at:
            return found
        return np.union1d(found, np.array(self.log[at:], dtype=np.int64))

    def keep(
        self, key: tuple[int, ...], mine: NDArray[np.float64], found: NDArray[np.int64]
    ) -> None:
        """A search found ``found``, fewer than it asked for, among every group that may take
        a row of the values ``key`` names with requirements ``mine``."""
        self.kept[key] = (mine.copy(), found, len(self.log))
