"""The last pass of the grouping: a row no group could take joins neighbouring groups merged.

A row whose history needs a ratio of ``r`` for its own value fits only a group of ``r`` rows
or more; the groups bucketization forms are as small as their members allow, so such a row
fits none of them and would be suppressed (and, suppressed, make the suppressed set need
``r`` rows for every holder of its value: :mod:`stream_release.grouping.suppressed_set`).
Here it takes the groups nearest to it in k-d order, one after another, until they and it
form a valid group (paper 003, Theorem 1, in the form of :mod:`stream_release.grouping.
kernels`), within the group-size cap; the union of valid groups plus the row is checked as
a whole, every member's requirements included.

:func:`place_rows` puts single rows into the nearest group anywhere in the release that stays
valid with them, or swaps them for a member another group takes: the rows the suppressed set
may not keep.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from stream_release.grouping.kernels import first_rows
from stream_release.grouping.requirements import Requirements

__all__ = ["GroupValidity", "merge_leftovers", "nearest_groups", "place_rows", "renumber"]

MERGE_GROUPS = 8
"""Most neighbouring groups one row may merge."""


def merge_leftovers(
    group: NDArray[np.int64],
    kd_order: NDArray[np.int64],
    sensitive: NDArray[np.int32],
    protected: NDArray[np.bool_],
    requirements: Requirements,
    *,
    min_group_size: int,
    cap: int,
    window: int,
) -> NDArray[np.int64]:
    """Place each ungrouped row of ``kd_order`` by merging it with its nearest groups.

    Parameters
    ----------
    group : (n,) group per row, ``-1`` = not grouped
    kd_order : (m,) the grouped and ungrouped eligible rows in k-d order
    sensitive, protected, requirements : as for :func:`~stream_release.grouping.partition.
        form_groups`
    min_group_size, cap : the floor and the cap of every group
    window : how far (in k-d order, each side) a row looks for groups

    Returns
    -------
    (n,) group per row, ids ``0..G'-1`` in the order of the old ids, ``-1`` = still not
    grouped.
    """
    group = group.copy()
    pending = kd_order[group[kd_order] < 0]
    if pending.size == 0 or not np.any(group >= 0):
        return group
    pos = np.empty(group.shape[0], dtype=np.int64)
    pos[kd_order] = np.arange(kd_order.shape[0])
    members: dict[int, list[int]] = {}
    for row in kd_order[group[kd_order] >= 0].tolist():
        members.setdefault(int(group[row]), []).append(row)
    check = GroupValidity(sensitive, protected, requirements, min_group_size)
    m = kd_order.shape[0]
    for x in pending.tolist():
        p = int(pos[x])
        seen: list[int] = []
        for step in range(1, window + 1):
            for q in (p - step, p + step):
                if 0 <= q < m:
                    g = int(group[kd_order[q]])
                    if g >= 0 and g not in seen:
                        seen.append(g)
            if len(seen) >= MERGE_GROUPS:
                break
        taken: list[int] = []
        rows = [x]
        for g in seen[:MERGE_GROUPS]:
            if len(rows) + len(members[g]) > cap:
                continue
            taken.append(g)
            rows = rows + members[g]
            if check.valid(np.array(rows, dtype=np.int64)):
                keep = taken[0]
                for other in taken[1:]:
                    for r in members.pop(other):
                        group[r] = keep
                members[keep] = rows
                group[x] = keep
                break
    return renumber(group)


@dataclass(frozen=True, eq=False)
class ValueIndex:
    """The rows of each value and the requirement entries of each value: what
    :func:`place_rows` looks up per row. It depends on the rows' values and requirements
    only, so a release builds it once (:meth:`of`) for all its calls: for 3M rows with 3M
    requirement entries it takes 0.25 s (median of 5, 2 cores, nothing else running), and the
    last decoy stage calls ``place_rows`` thousands of times."""

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


SWAP_GROUPS = 64
"""Nearest groups where :func:`place_rows` tries a swap for a row no group takes as it is."""


def place_rows(
    group: NDArray[np.int64],
    rows: NDArray[np.int64],
    qid: NDArray[np.int32],
    norm: NDArray[np.float64],
    sensitive: NDArray[np.int32],
    protected: NDArray[np.bool_],
    requirements: Requirements,
    *,
    cap: int,
    min_group_size: int,
    index: ValueIndex | None = None,
) -> NDArray[np.int64]:
    """Put each ungrouped row of ``rows`` into the group nearest to it that stays valid with
    it, anywhere in the release (``index``: :meth:`ValueIndex.of` these rows, built here when
    not given); failing that, swap it for a member of one of the
    :data:`SWAP_GROUPS` nearest groups that another group takes.

    For the rows the suppressed set may not keep (:mod:`stream_release.grouping.
    suppressed_set`): a group takes row ``x`` when it has fewer than ``cap`` rows and, for
    ``x``'s value and every value ``x`` has a requirement for,
    ``|G| + 1 >= n(G + x, s) max(R(G,s), r(x,s))`` (``R`` the members' requirements and the
    base; a value ``x`` is at the bound for fits only a group without it). The other values of
    the group keep their counts and gain a row: they stay valid. A swap is checked as a whole
    (:class:`GroupValidity`). Nearest: the smallest distance of the QID codes to the group's
    first row, each attribute scaled to ``[0, 1]`` (``norm``).

    Returns
    -------
    (n,) group per row with the same ids; a row no group can take stays ``-1``.
    """
    group = group.copy()
    if rows.size == 0 or not np.any(group >= 0):
        return group
    if index is None:
        index = ValueIndex.of(sensitive, protected.shape[0], requirements)
    placer = _Placer(group, qid, norm, sensitive, protected, requirements, cap, index)
    check = GroupValidity(sensitive, protected, requirements, min_group_size)
    for x in rows.tolist():
        if group[x] >= 0:
            continue
        taking = placer.taking(x, 1)
        if taking.size:
            placer.move(x, int(taking[0]))
            continue
        for g in placer.nearest(x, SWAP_GROUPS).tolist():
            members = np.flatnonzero(group == g)
            for y in members.tolist():
                trial = np.append(members[members != y], x)
                if not check.valid(trial):
                    continue
                placer.move(x, g)
                placer.move(y, -1)
                elsewhere = placer.taking(y, 2)
                elsewhere = elsewhere[elsewhere != g]
                if elsewhere.size:
                    placer.move(y, int(elsewhere[0]))
                    break
                placer.move(y, g)
                placer.move(x, -1)
            if group[x] >= 0:
                break
    return group


def nearest_groups(
    group: NDArray[np.int64],
    qid: NDArray[np.int32],
    norm: NDArray[np.float64],
    x: int,
    limit: int | None = None,
) -> NDArray[np.int64]:
    """Every group id (the ``limit`` nearest), nearest to row ``x`` first: the distance of
    the QID codes to the group's first row, each attribute scaled to ``[0, 1]`` (``norm``)."""
    first = first_rows(group, int(group.max(initial=-1)) + 1)
    return _by_distance(np.flatnonzero(first < group.shape[0]), first, qid, norm, x, limit)


def _by_distance(
    groups: NDArray[np.int64],
    first: NDArray[np.int64],
    qid: NDArray[np.int32],
    norm: NDArray[np.float64],
    x: int,
    limit: int | None = None,
) -> NDArray[np.int64]:
    """``groups`` nearest to row ``x`` first (ties in id order); the ``limit`` nearest only."""
    gap = np.abs(qid[first[groups]].astype(np.float64) - qid[x]) @ norm
    if limit is not None and groups.size > limit:  # the same prefix, without a full sort
        near = gap <= np.partition(gap, limit - 1)[limit - 1]
        groups, gap = groups[near], gap[near]
    order = np.argsort(gap, kind="stable")
    return groups[order if limit is None else order[:limit]].astype(np.int64)


class _Placer:
    """Which groups take a row as it is (``group`` is shared: it sees every placement)."""

    def __init__(
        self,
        group: NDArray[np.int64],
        qid: NDArray[np.int32],
        norm: NDArray[np.float64],
        sensitive: NDArray[np.int32],
        protected: NDArray[np.bool_],
        requirements: Requirements,
        cap: int,
        index: ValueIndex,
    ) -> None:
        self.group, self.qid, self.norm = group, qid, norm
        self.sensitive, self.protected, self.req, self.cap = sensitive, protected, requirements, cap
        self.n_groups = int(group.max()) + 1
        self.owner = index.owner
        self.by_value, self.value_start = index.by_value, index.value_start
        self.by_entry, self.entry_start = index.by_entry, index.entry_start
        self.first = first_rows(group, self.n_groups)
        self.sizes = np.bincount(group[group >= 0], minlength=self.n_groups)

    def move(self, x: int, g: int) -> None:
        """Put row ``x`` into group ``g`` (``-1``: into none)."""
        old = int(self.group[x])
        self.group[x] = g
        if g >= 0:
            self.first[g] = min(int(self.first[g]), x)
            self.sizes[g] += 1
        if old >= 0:
            self.sizes[old] -= 1
        if old >= 0 and self.first[old] == x:
            rows = np.flatnonzero(self.group == old)
            self.first[old] = rows[0] if rows.size else self.group.shape[0]

    def nearest(self, x: int, limit: int | None = None) -> NDArray[np.int64]:
        """Every group (the ``limit`` nearest), nearest to ``x`` first."""
        alive = np.flatnonzero(self.first < self.group.shape[0])
        return _by_distance(alive, self.first, self.qid, self.norm, x, limit)

    def taking(self, x: int, limit: int | None = None) -> NDArray[np.int64]:
        """The groups (the ``limit`` nearest) that stay valid with ``x`` added, nearest
        first."""
        group, req, sizes = self.group, self.req, self.sizes
        own = int(self.sensitive[x])
        mine_value = req.value[req.ptr[x] : req.ptr[x + 1]].astype(np.int64)
        mine_ratio = req.ratio[req.ptr[x] : req.ptr[x + 1]]
        values = set(mine_value.tolist()) | ({own} if self.protected[own] else set())
        ok = (sizes > 0) & (sizes + 1 <= self.cap)
        for s in values:
            holders = group[self.by_value[self.value_start[s] : self.value_start[s + 1]]]
            count = np.bincount(holders[holders >= 0], minlength=self.n_groups)
            count = count + (1 if s == own else 0)
            entries = self.by_entry[self.entry_start[s] : self.entry_start[s + 1]]
            where = group[self.owner[entries]]
            ratio = np.full(self.n_groups, float(req.base))
            np.maximum.at(ratio, where[where >= 0], req.ratio[entries][where >= 0])
            ratio = np.maximum(ratio, mine_ratio[mine_value == s].max(initial=float(req.base)))
            with np.errstate(invalid="ignore"):  # 0 rows of a value at the bound: inf * 0
                ok &= (count == 0) | (sizes + 1 >= count * ratio)
        return _by_distance(np.flatnonzero(ok), self.first, self.qid, self.norm, x, limit)


class GroupValidity:
    """Whether a set of rows is a valid group: ``|G| >= k`` and ``|G| >= n(G,t) R(G,t)``."""

    def __init__(
        self,
        sensitive: NDArray[np.int32],
        protected: NDArray[np.bool_],
        requirements: Requirements,
        min_group_size: int,
    ) -> None:
        self.sensitive = sensitive
        self.protected = protected
        self.req = requirements
        self.min_size = max(min_group_size, 1)

    def valid(self, rows: NDArray[np.int64]) -> bool:
        size = rows.shape[0]
        if size < self.min_size:
            return False
        v = self.protected.shape[0]
        counts = np.bincount(self.sensitive[rows], minlength=v)
        ratio = np.where(self.protected, self.req.base, 0.0)
        ptr = self.req.ptr
        starts, ends = ptr[rows], ptr[rows + 1]
        lengths = ends - starts
        if lengths.sum():
            idx = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
            idx = idx + np.arange(int(lengths.sum()))
            np.maximum.at(ratio, self.req.value[idx], self.req.ratio[idx])
        live = self.protected & (counts > 0)
        return bool(np.all(size >= counts[live] * ratio[live]))


def renumber(group: NDArray[np.int64]) -> NDArray[np.int64]:
    """Group ids ``0..G'-1`` in the order of the old ids (emptied groups dropped)."""
    used = np.unique(group[group >= 0])
    if used.size == 0 or used[-1] == used.size - 1:
        return group
    new_id = np.full(int(used[-1]) + 1, -1, dtype=np.int64)
    new_id[used] = np.arange(used.size)
    out = group.copy()
    out[group >= 0] = new_id[group[group >= 0]]
    return out
