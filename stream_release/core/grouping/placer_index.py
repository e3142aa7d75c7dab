"""What :class:`~stream_release.core.grouping.placer.Placer` keeps between its calls, each
kept current as rows move: the rows of each value and requirement (:class:`ValueIndex`), the
members of every group (:class:`Members`), the count ``n(G, s)`` and the largest requirement
``R(G, s)`` of every group for the values asked about (:class:`ValueCounts`), a k-d tree of the
groups' first rows (:class:`GroupTree`) and what a search of every group found
(:class:`Refusals`)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray
from scipy.spatial import cKDTree

from stream_release.core.grouping.layout import rows_by_group
from stream_release.core.grouping.requirements import Requirements

__all__ = ["GroupTree", "Members", "Refusals", "ValueCounts", "ValueIndex"]

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
remembered (:class:`Refusals`; a quarter of the groups when more)."""
REBUILD_WORK = 4
"""The tree is also built again once the moved groups checked one by one since it was built
add up to this many times the groups it holds (plus :data:`LOCAL_GROUPS`' last round): about
what a new tree costs. A tree built while most groups were empty would otherwise leave
thousands of groups to be checked one by one at every call (measured: a 3-release plan on
Adult that took 1 s under most keys took over 300 s under some, 2,775 moved groups checked per
call against a tree of 205)."""


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


class Members:
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


class ValueCounts:
    """``counts[slot(s)]`` = ``n(G, s)`` and ``ratios[slot(s)]`` = ``R(G, s)`` (the largest
    requirement of the members for ``s``, at least the base) of every group, for the values
    asked about (the least recently asked given up past the slots :data:`VALUE_BYTES`
    allows), kept as rows move."""

    def __init__(
        self,
        members: Members,
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


class GroupTree:
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


class Refusals:
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
