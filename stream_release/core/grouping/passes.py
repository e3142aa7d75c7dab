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
carry the margin on the safe side where they are [WFLWX10] Theorem 1's own bound:
:mod:`stream_release.core.privacy.strategy`)
(Wong et al. 2010, Theorem 1 and §6; :mod:`stream_release.core.grouping.tally`).

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

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

import time

import numpy as np
from numba import njit, prange, set_num_threads
from numpy.typing import NDArray

from stream_release.core.grouping.bucketize import GroupingState, bucketize
from stream_release.core.grouping.extent import KernelTable
from stream_release.core.grouping.leftovers import insert_leftovers
from stream_release.core.grouping.mondrian import (
    KERNEL_TURNS,
    PARALLEL_FROM,
    mondrian_leaves,
)
from stream_release.core.grouping.mondrian import compile_parallel as parallel_leaves
from stream_release.core.grouping.tally import GroupRules, Tally, new_tally
from stream_release.core.grouping.threads import ThreadChoice

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
    (suppressed, or not in ``perm``). Passes 1 and 2 run on numba's threads from
    :data:`~stream_release.core.grouping.mondrian.PARALLEL_FROM` rows, each on the count of
    threads that has been fastest (they are called from Python: a parallel kernel inside a
    compiled caller runs on one thread).
    """
    bounds = mondrian_leaves(table, rules, perm)
    n = table.qid.shape[0]
    state = GroupingState(np.full(n, -1, np.int64), np.empty(perm.shape[0], np.int64))
    tally = new_tally(rules.protected.shape[0])
    threads = 1 if perm.shape[0] < PARALLEL_FROM else PASS2_THREADS.pick()
    started = time.perf_counter()
    if threads == 1:
        next_gid, n_left = _bucketize_leaves(table, rules, tally, state, perm, bounds)
    else:
        with KERNEL_TURNS:
            set_num_threads(threads)
            next_gid, n_left = _bucketize_leaves_parallel(
                table, rules, state, perm, bounds, threads
            )
    if perm.shape[0] >= PARALLEL_FROM:
        PASS2_THREADS.record(threads, perm.shape[0], time.perf_counter() - started)
    return _group_leftovers(table, rules, tally, state, perm, next_gid, n_left, window)


def compile_parallel(table: KernelTable, rules: GroupRules) -> None:
    """Passes 1 and 2 of ``table`` on their parallel kernels, on one thread, whatever its
    size: compiles them (or loads them from numba's disk cache) for a warm-up, which a small
    table would otherwise leave to the first release of :data:`PARALLEL_FROM` rows."""
    perm = np.arange(table.qid.shape[0], dtype=np.int64)
    bounds = parallel_leaves(table, rules, perm)
    state = GroupingState(np.full(perm.shape[0], -1, np.int64), np.empty_like(perm))
    with KERNEL_TURNS:
        set_num_threads(1)
        _bucketize_leaves_parallel(table, rules, state, perm, bounds, 1)


PASS2_THREADS = ThreadChoice()
"""One thread or the free cores for pass 2, whichever has bucketized faster: the same groups
either way (:func:`_bucketize_leaves_parallel`)."""


@njit(cache=True, parallel=True)
def _bucketize_leaves_parallel(
    table: KernelTable,
    rules: GroupRules,
    state: GroupingState,
    perm: NDArray[np.int64],
    bounds: NDArray[np.int64],
    n_threads: int,
) -> tuple[int, int]:
    """:func:`_bucketize_leaves` on ``n_threads`` threads, each a block of consecutive leaves
    of about equal rows. A leaf's groups depend only on its own rows, so each is bucketized
    with group ids from 0 and its leftovers in its own stretch of ``state.leftover``; then,
    in leaf order, its ids are moved up by the groups of the leaves before it and its
    leftovers moved down after theirs: the groups and leftovers one thread gives."""
    n_leaves = bounds.shape[0] - 1
    groups = np.zeros(n_leaves, np.int64)
    lefts = np.zeros(n_leaves, np.int64)
    first = np.searchsorted(bounds, bounds[-1] * np.arange(n_threads + 1) // n_threads)
    for t in prange(n_threads):
        tally = new_tally(rules.protected.shape[0])
        for leaf in range(first[t], first[t + 1]):
            lo, hi = bounds[leaf], bounds[leaf + 1]
            own = GroupingState(state.group, state.leftover[lo:hi])
            groups[leaf], lefts[leaf] = bucketize(perm[lo:hi], table, rules, tally, own, 0, 0)
    next_gid = 0
    n_left = 0
    for leaf in range(n_leaves):
        lo, hi = bounds[leaf], bounds[leaf + 1]
        if next_gid > 0:
            for i in range(lo, hi):
                if state.group[perm[i]] >= 0:
                    state.group[perm[i]] += next_gid
        for i in range(lefts[leaf]):  # n_left <= lo: each row moves down, none overwritten
            state.leftover[n_left + i] = state.leftover[lo + i]
        next_gid += groups[leaf]
        n_left += lefts[leaf]
    return next_gid, n_left


@njit(cache=True)
def _group_leftovers(
    table: KernelTable,
    rules: GroupRules,
    tally: Tally,
    state: GroupingState,
    perm: NDArray[np.int64],
    next_gid: int,
    n_left: int,
    window: int,
) -> tuple[NDArray[np.int64], int]:
    """Pass 3 on the ``n_left`` leftovers of pass 2 over the leaves of ``perm``."""
    n = table.qid.shape[0]
    pos = _kd_positions(perm, n)
    if n_left > 0:  # the leftovers bucketized together, then inserted one by one
        rows = _in_kd_order(_ungroup_leftovers(state, n_left), pos)
        next_gid, n_left = bucketize(rows, table, rules, tally, state, next_gid, 0)
        rest = _ungroup_leftovers(state, n_left)
        insert_leftovers(rest, perm, pos, state.group, next_gid, table.sens, rules, window)
    return state.group, next_gid
