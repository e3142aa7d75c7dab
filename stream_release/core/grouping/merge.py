"""The last pass of the grouping: a row no group could take joins neighbouring groups merged.

A row whose history needs a ratio of ``r`` for its own value fits only a group of ``r`` rows
or more; the groups bucketization forms are as small as their members allow, so such a row
fits none of them and would be suppressed (and, suppressed, make the suppressed set need
``r`` rows for every holder of its value: :mod:`stream_release.core.grouping.suppressed_set`).
Here it takes the groups nearest to it in k-d order, one after another, until they and it
form a valid group (Wong et al. 2010, Theorem 1, in the form of :mod:`stream_release.core.grouping.
tally`), within the group-size cap; the union of valid groups plus the row is checked as
a whole, every member's requirements included.

:mod:`stream_release.core.grouping.placer` puts single rows into the nearest group anywhere in the
release instead.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stream_release.core.grouping.requirements import Requirements
from stream_release.core.grouping.tally import Tally, add_row, is_valid, new_tally, reset_tally

__all__ = ["GroupValidity", "merge_leftovers", "renumber"]

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
    """Place each ungrouped row of ``kd_order`` by merging it with its nearest groups:
    O(window + MERGE_GROUPS * cap) per ungrouped row.

    Parameters
    ----------
    group : (n,) group per row, ``-1`` = not grouped
    kd_order : (m,) the grouped and ungrouped eligible rows in k-d order
    sensitive, protected, requirements : as for :func:`~stream_release.core.grouping.partition.
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
    members = _Members(group, kd_order)
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


class _Members:
    """The rows of each group in k-d order, read from ``group`` when first asked for (a
    release has few ungrouped rows, and they look at a few groups each: building every
    group's list took 0.7 s at a million rows); a group set or popped here is as set."""

    def __init__(self, group: NDArray[np.int64], kd_order: NDArray[np.int64]) -> None:
        grouped = kd_order[group[kd_order] >= 0]
        by_group = np.argsort(group[grouped], kind="stable")  # k-d order within a group
        self._rows = grouped[by_group]
        self._ids = group[self._rows]
        self._lists: dict[int, list[int]] = {}

    def __getitem__(self, g: int) -> list[int]:
        rows = self._lists.get(g)
        if rows is None:
            lo, hi = np.searchsorted(self._ids, [g, g + 1])
            rows = self._lists[g] = self._rows[lo:hi].tolist()
        return rows

    def __setitem__(self, g: int, rows: list[int]) -> None:
        self._lists[g] = rows

    def pop(self, g: int) -> list[int]:
        rows = self[g]
        del self._lists[g]
        return rows


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
        self._tally = new_tally(protected.shape[0])

    def valid(self, rows: NDArray[np.int64]) -> bool:
        """Whether ``rows`` form a valid group (a kernel: a leftover row tries up to
        :data:`MERGE_GROUPS` unions, tens of thousands of calls in a release with history)."""
        return bool(
            _valid(
                np.ascontiguousarray(rows, dtype=np.int64),
                self.sensitive,
                self.protected,
                self.req.base,
                self.req.ptr,
                self.req.value,
                self.req.ratio,
                self.min_size,
                self._tally,
            )
        )

    def valid_swaps(self, members: NDArray[np.int64], x: int) -> NDArray[np.bool_]:
        """(len(members),) whether ``members`` without each one and with row ``x`` form a valid
        group: :meth:`valid` of every swap in one call (O(|G|^2) entries)."""
        out = np.zeros(members.shape[0], dtype=np.bool_)
        _valid_swaps(
            np.ascontiguousarray(members, dtype=np.int64), x, self.sensitive, self.protected,
            self.req.base, self.req.ptr, self.req.value, self.req.ratio, self.min_size,
            self._tally, out,
        )  # fmt: skip
        return out


@njit(cache=True)
def _valid_swaps(  # pragma: no cover - jit
    members: NDArray[np.int64],
    x: int,
    sensitive: NDArray[np.int32],
    protected: NDArray[np.bool_],
    base: float,
    ptr: NDArray[np.int64],
    value: NDArray[np.int32],
    ratio: NDArray[np.float64],
    min_size: int,
    tally: Tally,
    out: NDArray[np.bool_],
) -> None:
    """:func:`_valid` of ``members`` with ``x`` in place of each member in turn, into ``out``."""
    trial = np.empty(members.shape[0], np.int64)
    for i in range(members.shape[0]):
        trial[0] = x
        k = 1
        for j in range(members.shape[0]):
            if j != i:
                trial[k] = members[j]
                k += 1
        out[i] = _valid(trial, sensitive, protected, base, ptr, value, ratio, min_size, tally)


@njit(cache=True)
def _valid(  # pragma: no cover - jit
    rows: NDArray[np.int64],
    sensitive: NDArray[np.int32],
    protected: NDArray[np.bool_],
    base: float,
    ptr: NDArray[np.int64],
    value: NDArray[np.int32],
    ratio: NDArray[np.float64],
    min_size: int,
    tally: Tally,
) -> bool:
    """:meth:`GroupValidity.valid` with the passes' tally (:mod:`~stream_release.core.grouping.
    tally`: the rule bucketization holds every group to), zeroed again after."""
    cnt, req, touched = tally
    n_touched = 0
    for r in rows:
        n_touched = add_row(r, sensitive, protected, base, ptr, value, ratio, cnt, req, touched,
                            n_touched)  # fmt: skip
    ok = is_valid(rows.shape[0], min_size, protected, cnt, req, touched, n_touched)
    reset_tally(cnt, req, touched, n_touched)
    return ok


def renumber(group: NDArray[np.int64]) -> NDArray[np.int64]:
    """Group ids ``0..G'-1`` in the order of the old ids (emptied groups dropped)."""
    grouped = group[group >= 0]
    if grouped.size == 0:
        return group
    used = np.flatnonzero(np.bincount(grouped))  # the ids in use, ascending (no sort: O(n))
    if used[-1] == used.size - 1:
        return group
    new_id = np.full(int(used[-1]) + 1, -1, dtype=np.int64)
    new_id[used] = np.arange(used.size)
    out = group.copy()
    out[group >= 0] = new_id[group[group >= 0]]
    return out
