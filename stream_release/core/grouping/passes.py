r"""The compiled grouping: its three passes in order (numba). Private: they trust their inputs.

Vocabulary (all arrays int-encoded, see :mod:`stream_release.core.table`):

``qid`` (n, d) int32, ``sens`` (n,) int32 local value codes, ``protected`` (V,) bool,
``base`` the ratio required of a pair with no history, ``ex_ptr/ex_val/ex_req`` a CSR over rows
of the pairs (row, value) whose required ratio exceeds ``base`` (``inf`` = may never share a
group with that value), ``min_size`` the k-anonymity floor. The input table travels as one
:class:`~stream_release.core.grouping.extent.KernelTable`, the requirement and exemption arrays
as :class:`~stream_release.core.grouping.tally.GroupRules`, the output state as
:class:`~stream_release.core.grouping.bucketize.GroupingState`.

A group G is *valid* iff ``|G| >= min_size`` and, for every protected value t present,
``|G| >= n(G,t) * R(G,t)`` with ``R(G,t) = max(base, max_{o in G} req(o,t))`` (the ratios
carry the margin on the safe side where they are Theorem 1's own bound:
:mod:`stream_release.core.privacy.strategy`)
(Wong et al. 2010, Theorem 1 and §6, in the engineering form of the research digest §4;
:mod:`stream_release.core.grouping.tally`).

Algorithm (three passes, each QID-local):

1. ``mondrian_leaves`` (:mod:`stream_release.core.grouping.mondrian`): top-down median splits
   on the widest normalised attribute, relaxed by moving the excess rows of an
   over-represented value across the cut, taken only when both halves are valid as whole
   groups; a large leaf no such cut splits is cut value by value. Leaves are QID boxes; their
   rows are laid out in k-d order in ``perm``.
2. ``bucketize`` (:mod:`stream_release.core.grouping.bucketize`): inside each leaf,
   Anatomy-style (Xiao & Tao 2006): sweep the leaf in k-d order; a group starts at the next
   protected row and adds the compatible row (a new value for protected ones) that grows its
   QID box least, critical values first, until it is valid. A group that cannot be completed
   goes to the leftovers; unprotected rows left over form groups of ``min_size``.
3. ``insert_leftovers`` (:mod:`stream_release.core.grouping.leftovers`): leftovers are
   bucketized together, then each row still left is inserted into the nearest group (in k-d
   order) that stays valid with it and within the cap; a row that fits nowhere is suppressed
   (``-1``). No pass grows a group past ``cap``.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stream_release.core.grouping.bucketize import GroupingState, bucketize
from stream_release.core.grouping.extent import KernelTable
from stream_release.core.grouping.leftovers import insert_leftovers
from stream_release.core.grouping.mondrian import mondrian_leaves
from stream_release.core.grouping.tally import GroupRules, Tally, new_tally

__all__ = ["group_rows"]


@njit(cache=True)
def _bucketize_leaves(
    table: KernelTable,
    rules: GroupRules,
    tally: Tally,
    state: GroupingState,
    perm: NDArray[np.int64],
    bounds: NDArray[np.int64],
) -> tuple[int, int]:
    """Pass 2 on every leaf ``perm[bounds[i]:bounds[i+1]]``; returns ``(next_gid, n_left)``."""
    next_gid = 0
    n_left = 0
    for leaf in range(bounds.shape[0] - 1):
        next_gid, n_left = bucketize(
            perm[bounds[leaf] : bounds[leaf + 1]], table, rules, tally, state, next_gid, n_left
        )
    return next_gid, n_left


@njit(cache=True)
def _kd_positions(perm: NDArray[np.int64], n: int) -> NDArray[np.int64]:
    """(n,) int64 each row's index in ``perm`` (k-d order); ``-1`` for a row not in it."""
    pos = np.full(n, -1, np.int64)
    for i in range(perm.shape[0]):
        pos[perm[i]] = i
    return pos


@njit(cache=True)
def _ungroup_leftovers(state: GroupingState, n_left: int) -> NDArray[np.int64]:
    """The first ``n_left`` rows of ``state.leftover`` (a copy), their group reset to ``-1``."""
    rows = state.leftover[:n_left].copy()
    for i in range(n_left):
        state.group[rows[i]] = -1
    return rows


@njit(cache=True)
def _in_kd_order(rows: NDArray[np.int64], pos: NDArray[np.int64]) -> NDArray[np.int64]:
    """``rows`` sorted by their index in k-d order (``pos``, :func:`_kd_positions`)."""
    keys = np.empty(rows.shape[0], np.int64)
    for i in range(rows.shape[0]):
        keys[i] = pos[rows[i]]
    return rows[np.argsort(keys)]


def group_rows(
    table: KernelTable, rules: GroupRules, perm: NDArray[np.int64], window: int
) -> tuple[NDArray[np.int64], int]:
    """All three passes, O(m log m) plus O(window) per row left over by the first two.
    ``perm`` (m,) int64: the rows to group (reordered in place);
    ``window``: how far (in k-d order, each side) a leftover row looks for a group.

    Returns ``(group, n_groups)``: (n,) int64 group id per row, ``-1`` = not grouped
    (suppressed, or not in ``perm``). Pass 1 runs on numba's threads (it is called from
    Python: a parallel kernel inside a compiled caller runs on one thread).
    """
    bounds = mondrian_leaves(table, rules, perm)
    return _group_leaves(table, rules, perm, bounds, window)


@njit(cache=True)
def _group_leaves(
    table: KernelTable,
    rules: GroupRules,
    perm: NDArray[np.int64],
    bounds: NDArray[np.int64],
    window: int,
) -> tuple[NDArray[np.int64], int]:
    """Passes 2 and 3 on the leaves ``perm[bounds[i]:bounds[i+1]]`` of pass 1."""
    n = table.qid.shape[0]
    state = GroupingState(np.full(n, -1, np.int64), np.empty(perm.shape[0], np.int64))
    tally = new_tally(rules.protected.shape[0])
    next_gid, n_left = _bucketize_leaves(table, rules, tally, state, perm, bounds)
    pos = _kd_positions(perm, n)
    if n_left > 0:  # the leftovers bucketized together, then inserted one by one
        rows = _in_kd_order(_ungroup_leftovers(state, n_left), pos)
        next_gid, n_left = bucketize(rows, table, rules, tally, state, next_gid, 0)
        rest = _ungroup_leftovers(state, n_left)
        insert_leftovers(rest, perm, pos, state.group, next_gid, table.sens, rules, window)
    return state.group, next_gid
