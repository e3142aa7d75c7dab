"""Pass 3 of the grouping: leftover rows inserted into the nearest group that stays valid
(numba). Private: the kernels trust their inputs.

``insert_leftovers``: leftovers are bucketized together
(:func:`~stream_release.core.grouping.bucketize.bucketize`), then each row still left is
inserted into the nearest group (in k-d order) that stays valid with it and within the cap;
a row that fits nowhere is suppressed (``-1``). No pass grows a group past ``cap``.
(:func:`~stream_release.core.grouping.merge.merge_leftovers` then merges groups for the
rows still left.)

The whole algorithm is in :mod:`stream_release.core.grouping.passes`.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stream_release.core.grouping.tally import GroupRules, add_row, is_valid, new_tally, reset_tally

__all__ = ["insert_leftovers"]


@njit(cache=True)
def _members(
    group: NDArray[np.int64], n_groups: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Every group's rows in ``group`` (n,) as a CSR: ``(ptr (G+1,), rows)`` int64."""
    n = group.shape[0]
    g_count = np.zeros(n_groups + 1, np.int64)
    for r in range(n):
        if group[r] >= 0:
            g_count[group[r] + 1] += 1
    g_ptr = np.cumsum(g_count)
    fill = g_ptr[:-1].copy()
    g_rows = np.empty(g_ptr[-1], np.int64)
    for r in range(n):
        g = group[r]
        if g >= 0:
            g_rows[fill[g]] = r
            fill[g] += 1
    return g_ptr, g_rows


@njit(cache=True)
def _fits(
    g: int,
    x: int,
    g_ptr: NDArray[np.int64],
    g_rows: NDArray[np.int64],
    extra_head: NDArray[np.int64],
    extra_next: NDArray[np.int64],
    sens: NDArray[np.int32],
    protected: NDArray[np.bool_],
    base: float,
    min_size: int,
    ex_ptr: NDArray[np.int64],
    ex_val: NDArray[np.int32],
    ex_req: NDArray[np.float64],
    cnt: NDArray[np.int64],
    req: NDArray[np.float64],
    touched: NDArray[np.int64],
    cap: int,
) -> bool:
    """Whether group ``g`` (its members and the rows inserted so far) stays valid with row
    ``x`` and within ``cap`` rows.

    ``g_ptr``, ``g_rows``: the members each group had when the pass began (:func:`_members`);
    ``extra_head`` (G,), ``extra_next`` (n,): linked lists of the rows inserted since (``-1``
    ends one). Takes arrays, not the structs: it runs once per row and group tried
    (:mod:`stream_release.core.grouping.tally`, Notes).
    """
    n_touched = 0
    size = 0
    for i in range(g_ptr[g], g_ptr[g + 1]):
        n_touched = add_row(
            g_rows[i], sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req, touched, n_touched
        )
        size += 1
    r = extra_head[g]
    while r >= 0:
        n_touched = add_row(
            r, sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req, touched, n_touched
        )
        size += 1
        r = extra_next[r]
    n_touched = add_row(
        x, sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req, touched, n_touched
    )
    ok = size + 1 <= cap and is_valid(size + 1, min_size, protected, cnt, req, touched, n_touched)
    reset_tally(cnt, req, touched, n_touched)
    return ok


@njit(cache=True)
def insert_leftovers(
    rows: NDArray[np.int64],
    perm: NDArray[np.int64],
    pos: NDArray[np.int64],
    group: NDArray[np.int64],
    n_groups: int,
    sens: NDArray[np.int32],
    rules: GroupRules,
    window: int,
) -> None:
    """Insert each of ``rows`` into the nearest group in k-d order that stays valid with it and
    within ``cap`` rows; else leave it -1.

    ``perm`` (m,) the rows in k-d order, ``pos`` (n,) each row's index in it; ``group`` (n,)
    group per row (ids ``0..n_groups-1``), updated in place; a row looks ``window`` places
    each side.
    """
    protected, base, min_size, cap, ex_ptr, ex_val, ex_req = rules
    n = group.shape[0]
    cnt, req, touched = new_tally(protected.shape[0])
    g_ptr, g_rows = _members(group, n_groups)
    extra_head = np.full(n_groups, -1, np.int64)
    extra_next = np.full(n, -1, np.int64)
    seen = np.full(n_groups, -1, np.int64)
    m = perm.shape[0]
    for xi in range(rows.shape[0]):
        x = rows[xi]
        p = pos[x]
        done = False
        for step in range(1, window + 1):
            for side in range(2):
                q = p - step if side == 0 else p + step
                if q < 0 or q >= m:
                    continue
                g = group[perm[q]]
                if g < 0 or seen[g] == xi:
                    continue
                seen[g] = xi
                if _fits(
                    g, x, g_ptr, g_rows, extra_head, extra_next, sens, protected, base, min_size,
                    ex_ptr, ex_val, ex_req, cnt, req, touched, cap,
                ):  # fmt: skip
                    group[x] = g
                    extra_next[x] = extra_head[g]
                    extra_head[g] = x
                    done = True
                    break
            if done:
                break
