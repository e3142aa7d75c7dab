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
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stream_release.core.grouping.merge import GroupValidity
from stream_release.core.grouping.placer_index import (
    LOCAL_GROUPS,
    GroupTree,
    Members,
    Refusals,
    ValueCounts,
    ValueIndex,
)
from stream_release.core.grouping.requirements import Requirements

__all__ = ["Placer", "WorkBudget", "first_rows"]

SCAN_GROUPS = 8192
"""Up to this many group ids a search scans every group at once instead of asking the tree
first: the same answer (the tree's is the exhaustive one), and a scan of a few thousand
groups in one kernel costs less than a tree query from Python (about 0.15 ms)."""
SWAP_GROUPS = 64
"""Nearest groups where a row no group takes as it is is tried in a swap."""


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
        when an earlier search for the same values (``key``) tells (:class:`Refusals`)."""
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
        self.members = Members(group, capacity)
        self.tree = GroupTree(placer.qid, placer.norm, self.first, capacity)
        self.values = ValueCounts(
            self.members, placer.sensitive, placer.req, index, capacity, placer.protected.size
        )
        self.refusals = Refusals(capacity)
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
