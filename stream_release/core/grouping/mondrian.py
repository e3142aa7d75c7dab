r"""Pass 1 of the grouping: Mondrian-like k-d splitting into QID-local leaves (numba).
Private: the kernels trust their inputs.

``mondrian_leaves``: top-down median splits on the widest normalised attribute, relaxed by
moving the excess rows of an over-represented value across the cut (``balance``), taken only
when both halves are valid as whole groups (a set can be cut into valid groups only if it is
valid as one group: the per-value counts add up) under ``m = ceil(max(base, min_size))``
where the rows meet it, else under ``base`` (``_split_ratio``: groups of ``m`` rows absorb a
top share of ``1/m``, so a leaf cut down to ``1/base`` left its excess over; on a million
rows of the scale benchmark that was 0.36-0.72 % of each release before any history).
A leaf of at least :data:`STRATIFIED_FROM` rows that no such cut splits is cut value by
value (``stratified_cut``: each value's lower half by the widest attribute to the left, the
sizes set so that a leaf whose top share is exactly ``1/m`` splits into halves that are):
without it, at a million rows, leaves of up to 282k rows held 69 % of the rows.
Leaves are QID boxes (a value-balanced cut's halves may overlap on its attribute); their
rows are laid out in k-d order in ``perm``.

The whole algorithm is in :mod:`stream_release.core.grouping.passes`.
"""

from __future__ import annotations

import threading
import time
from typing import NamedTuple

import numpy as np
from numba import njit, prange, set_num_threads
from numpy.typing import NDArray

from stream_release.core.grouping.balance import balance
from stream_release.core.grouping.cut_codes import (
    at_or_below,
    code_counts,
    hierarchy_cut,
    nth_code,
)
from stream_release.core.grouping.extent import KernelTable, extent
from stream_release.core.grouping.stratified import STRATIFIED_FROM, stratified_cut
from stream_release.core.grouping.tally import GroupRules
from stream_release.core.grouping.threads import ThreadChoice

__all__ = ["STRATIFIED_FROM", "mondrian_leaves"]


@njit(cache=True)
def _split_ratio(size: int, top: int, base: float, min_size: int) -> float:
    """The ratio both halves of a cut of a node of ``size`` rows must meet, its most frequent
    protected value held by ``top`` rows (:func:`_survey`): ``m = ceil(max(base, k))`` when
    the rows meet it (groups of ``m`` rows, one of each protected value, absorb a share of
    ``1/m``; a leaf whose top share lies between ``1/m`` and ``1/base`` leaves the excess
    over), else ``base``."""
    m = np.ceil(max(base, float(min_size)))
    return m if top * m <= size else base


class _Scratch(NamedTuple):
    """Work arrays of :func:`mondrian_leaves`, reused node after node: ``cnt_l``, ``cnt_r``
    (V,) int64, zeroed between uses; ``tmp`` (m,) int64; ``width`` (d,) float64 and
    ``lo_code``, ``hi_code`` (d,) int64, the node's normalised extent and code range."""

    cnt_l: NDArray[np.int64]
    cnt_r: NDArray[np.int64]
    tmp: NDArray[np.int64]
    width: NDArray[np.float64]
    lo_code: NDArray[np.int64]
    hi_code: NDArray[np.int64]


@njit(cache=True)
def _survey(
    perm: NDArray[np.int64],
    lo: int,
    hi: int,
    qid: NDArray[np.int32],
    sens: NDArray[np.int32],
    protected: NDArray[np.bool_],
    work: _Scratch,
) -> int:
    """One pass over rows ``perm[lo:hi]``: sets ``work.lo_code``, ``work.hi_code`` (d,) to
    their smallest and largest code on each attribute and returns how many rows the most
    frequent protected value holds (``work.cnt_l`` is the zeroed scratch, zeroed again)."""
    lo_code, hi_code, cnt = work.lo_code, work.hi_code, work.cnt_l
    d = qid.shape[1]
    for a in range(d):
        lo_code[a] = qid[perm[lo], a]
        hi_code[a] = lo_code[a]
    top = 0
    for i in range(lo, hi):
        r = perm[i]
        for a in range(d):
            c = qid[r, a]
            if c < lo_code[a]:
                lo_code[a] = c
            elif c > hi_code[a]:
                hi_code[a] = c
        v = sens[r]
        if protected[v]:
            cnt[v] += 1
            if cnt[v] > top:
                top = cnt[v]
    if cnt.shape[0] <= hi - lo:  # over the values or the rows, whichever is fewer
        cnt[:] = 0
    else:
        for i in range(lo, hi):
            cnt[sens[perm[i]]] = 0
    return top


@njit(cache=True)
def _median_cut(
    table: KernelTable,
    perm: NDArray[np.int64],
    lo: int,
    hi: int,
    a: int,
    c_min: int,
    c_max: int,
    work: _Scratch,
    protected: NDArray[np.bool_],
) -> int:
    """Cut ``perm[lo:hi]`` at one code of attribute ``a`` (codes ``c_min..c_max``): at a child
    boundary of the hierarchy (:func:`hierarchy_cut`), else at the median. Rows with codes up
    to it go first, in order (stable), and ``work.cnt_l``, ``work.cnt_r`` count each protected
    value's rows on either side (for :func:`balance`); returns how many rows go first, or 0
    (``perm`` untouched, the counts zero) when no code splits the rows. Two passes over the
    rows: their codes counted (:func:`code_counts`), then the partition."""
    qid, sens = table.qid, table.sens
    size = hi - lo
    codes = code_counts(perm, lo, hi, qid, a, c_min, c_max)
    threshold = -1
    if table.height[a] > 0:
        threshold = hierarchy_cut(table, a, c_min, c_max, size, codes)
    if threshold < 0:
        threshold = nth_code(codes, size, c_min, c_max, (size - 1) // 2)
        if threshold >= c_max:  # everything <= median: cut below it
            threshold = threshold - 1
    n_left = at_or_below(codes, size, c_min, c_max, threshold)
    if n_left == 0 or n_left == size:
        return 0
    # stable partition of perm[lo:hi] by code <= threshold, counting the protected values
    cnt_l, cnt_r, tmp = work.cnt_l, work.cnt_r, work.tmp
    li = lo
    ri = 0
    for i in range(lo, hi):
        r = perm[i]
        v = sens[r]
        if qid[r, a] <= threshold:
            perm[li] = r
            li += 1
            if protected[v]:
                cnt_l[v] += 1
        else:
            tmp[ri] = r
            ri += 1
            if protected[v]:
                cnt_r[v] += 1
    for i in range(ri):
        perm[li + i] = tmp[i]
    return int(n_left)


@njit(cache=True)
def _split_node(
    table: KernelTable,
    rules: GroupRules,
    perm: NDArray[np.int64],
    lo: int,
    hi: int,
    work: _Scratch,
) -> tuple[int, bool]:
    """Cut ``perm[lo:hi]`` into two halves both valid as whole groups: on the widest
    normalised attribute first, at one code and balanced (:func:`_median_cut`,
    :func:`balance`), else value by value (:func:`stratified_cut`, from
    :data:`STRATIFIED_FROM` rows). Returns ``(mid, split)``; ``perm[lo:hi]`` may be reordered
    either way."""
    size = hi - lo
    if not (size >= 2 * rules.min_size and size >= 2):
        return lo, False
    qid, sens, norm, height, span_lo, span_hi = table
    protected, min_size = rules.protected, rules.min_size
    cnt_l, cnt_r, tmp, width, lo_code, hi_code = work
    d = qid.shape[1]
    top = _survey(perm, lo, hi, qid, sens, protected, work)
    for a in range(d):
        width[a] = extent(a, lo_code[a], hi_code[a], height, span_lo, span_hi) * norm[a]
    order = np.argsort(-width)
    ratio = _split_ratio(size, top, rules.base, min_size)
    for oi in range(d):
        a = order[oi]
        if width[a] <= 0.0:
            break
        n_left = _median_cut(table, perm, lo, hi, a, lo_code[a], hi_code[a], work, protected)
        if n_left == 0:
            continue
        mid, ok = balance(
            perm, lo, lo + n_left, hi, qid, a, sens, protected, ratio, min_size, cnt_l, cnt_r
        )
        if ok:
            return mid, True
    if size >= STRATIFIED_FROM and width[order[0]] > 0.0:
        # no cut at one code keeps both halves feasible: cut each value in half
        return stratified_cut(
            perm, lo, hi, qid, order[0], sens, protected, ratio, min_size, cnt_l, cnt_r, tmp
        )
    return lo, False


FRONTIER = 16
"""Subtrees handed to the threads: the top levels are split one level at a time, the nodes of
a level in parallel, until this many nodes are left to split; each is then split to its leaves
by one thread (:func:`_subtree_leaves`). The leaves and ``perm`` are the same as one thread's
depth-first split: a node's cut depends only on its own rows."""


@njit(cache=True)
def _scratch(n_values: int, d: int, tmp: NDArray[np.int64]) -> _Scratch:
    """Fresh work arrays for one thread; ``tmp`` the node's (or subtree's) share of rows."""
    return _Scratch(
        np.zeros(n_values, np.int64),
        np.zeros(n_values, np.int64),
        tmp,
        np.empty(d, np.float64),
        np.empty(d, np.int64),
        np.empty(d, np.int64),
    )


LOCAL_ROWS = 1 << 18
"""A node of at most this many rows is split on a compact copy of its rows' codes and values
(:func:`_local_leaves`). The cuts read ``qid[perm[i]]`` for every row of a node at every
level; once the rows of a node lie scattered over a million-row table, each read is a cache
miss. On the 1M-row scale release (7 QIDs), one thread took 6.9-7.8 s without the copies,
7.4 s with copies from 4k rows, 6.1 s from 16k, 4.4 s from 64k and 3.3 s from 256k (two
threads: 4.1-5.4 s, then 2.2 s); a copy of the whole table (1M) gained nothing: the rows of
a node scatter again as it is cut."""


@njit(cache=True)
def _subtree_leaves(
    table: KernelTable,
    rules: GroupRules,
    perm: NDArray[np.int64],
    lo: int,
    hi: int,
    work: _Scratch,
    leaf_start: NDArray[np.bool_],
) -> None:
    """Split ``perm[lo:hi]`` depth first down to its leaves; marks each leaf's first position
    in ``leaf_start``. Nodes of at most :data:`LOCAL_ROWS` rows go to :func:`_local_leaves`."""
    stack_lo, stack_hi = _stack(hi - lo, rules.min_size)
    stack_lo[0] = lo
    stack_hi[0] = hi
    top = 1
    while top > 0:
        top -= 1
        a = stack_lo[top]
        b = stack_hi[top]
        if b - a <= LOCAL_ROWS:
            _local_leaves(table, rules, perm, a, b, work, leaf_start)
        else:
            top = _cut_or_mark(table, rules, perm, a, b, work, stack_lo, stack_hi, top, leaf_start)


@njit(cache=True)
def _local_leaves(
    table: KernelTable,
    rules: GroupRules,
    perm: NDArray[np.int64],
    lo: int,
    hi: int,
    work: _Scratch,
    leaf_start: NDArray[np.bool_],
) -> None:
    """:func:`_subtree_leaves` of ``perm[lo:hi]`` on a copy of its rows' codes and values, in
    the order of ``perm``: every cut reads values only and moves rows stably, so the leaves
    and the order of ``perm`` are the same as on the whole table."""
    size = hi - lo
    rows = perm[lo:hi].copy()
    local = KernelTable(
        table.qid[rows], table.sens[rows], table.norm, table.height, table.span_lo, table.span_hi
    )
    local_perm = np.arange(size)
    local_start = np.zeros(size, np.bool_)
    stack_lo, stack_hi = _stack(size, rules.min_size)
    stack_lo[0] = 0
    stack_hi[0] = size
    top = 1
    while top > 0:
        top -= 1
        a = stack_lo[top]
        b = stack_hi[top]
        top = _cut_or_mark(
            local, rules, local_perm, a, b, work, stack_lo, stack_hi, top, local_start
        )
    for i in range(size):
        perm[lo + i] = rows[local_perm[i]]
        if local_start[i]:
            leaf_start[lo + i] = True


@njit(cache=True)
def _stack(size: int, min_size: int) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The (lo, hi) stack of a depth-first split of ``size`` rows into leaves of at least
    ``min_size``."""
    stack_lo = np.empty(64 + 2 * size // max(min_size, 1) + 64, np.int64)
    return stack_lo, np.empty_like(stack_lo)


@njit(cache=True)
def _cut_or_mark(
    table: KernelTable,
    rules: GroupRules,
    perm: NDArray[np.int64],
    a: int,
    b: int,
    work: _Scratch,
    stack_lo: NDArray[np.int64],
    stack_hi: NDArray[np.int64],
    top: int,
    leaf_start: NDArray[np.bool_],
) -> int:
    """Cut the node ``perm[a:b]`` and push its halves (left on top), or mark it a leaf;
    returns the stack's new top."""
    mid, split = _split_node(table, rules, perm, a, b, work)
    if not split:
        leaf_start[a] = True
        return top
    stack_lo[top] = mid
    stack_hi[top] = b
    stack_lo[top + 1] = a
    stack_hi[top + 1] = mid
    return top + 2


@njit(cache=True)
def _share_out(
    sizes: NDArray[np.int64], n_threads: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Subtrees shared out over ``n_threads`` by rows, the largest first to the least loaded
    (LPT): returns ``(order, first)``, thread ``t``'s subtrees ``order[first[t]:first[t+1]]``
    (a top cut of 59 / 41 % gave one thread 59 % of the rows when each took a block)."""
    load = np.zeros(n_threads, np.int64)
    owner = np.empty(sizes.shape[0], np.int64)
    for i in np.argsort(-sizes, kind="mergesort"):
        t = np.argmin(load)
        owner[i] = t
        load[t] += sizes[i]
    order = np.argsort(owner, kind="mergesort")
    first = np.zeros(n_threads + 1, np.int64)
    for i in range(sizes.shape[0]):
        first[owner[i] + 1] += 1
    return order, np.cumsum(first)


KERNEL_TURNS = threading.Lock()
"""Python threads take turns in the parallel kernels (passes 1 and 2): the ``workqueue``
threading layer (numba's default without TBB or OpenMP) refuses a parallel kernel launched
from two threads at once."""


PARALLEL_FROM = 20_000
"""Rows from which pass 1 runs on numba's threads. Below, one thread splits depth first (the
same leaves): a parallel launch costs milliseconds, and the suppressed set's protection
regroups small sets hundreds of times per release (at 300k rows, 292 calls took 2.4 s on two
threads)."""


def mondrian_leaves(
    table: KernelTable, rules: GroupRules, perm: NDArray[np.int64]
) -> NDArray[np.int64]:
    """Split ``perm`` (rows to group, reordered in place) into leaves; returns (L+1,) bounds.

    Uses ``rules``' ``protected``, ``base`` and ``min_size``. From :data:`PARALLEL_FROM` rows,
    runs on the cores free to the process when that has been faster than one thread
    (:data:`THREADS`, :data:`FRONTIER`), callers on several Python threads taking turns
    (:data:`KERNEL_TURNS`); below, on the caller's thread. O(n log n): each level of the
    k-d tree sorts its nodes' rows by one attribute (a counting sort for small code ranges).
    """
    if perm.shape[0] < PARALLEL_FROM:
        return _leaves_one_thread(table, rules, perm)
    threads = THREADS.pick()
    started = time.perf_counter()
    if threads == 1:
        bounds = _leaves_one_thread(table, rules, perm)
    else:
        with KERNEL_TURNS:
            set_num_threads(threads)
            bounds = _leaves(table, rules, perm, threads)
    THREADS.record(threads, perm.shape[0], time.perf_counter() - started)
    return bounds


def compile_parallel(
    table: KernelTable, rules: GroupRules, perm: NDArray[np.int64]
) -> NDArray[np.int64]:
    """:func:`mondrian_leaves` on the parallel kernel, on one thread, whatever the size:
    compiles it (or loads it from numba's disk cache). :func:`mondrian_leaves` runs it only
    from :data:`PARALLEL_FROM` rows, so a warm-up on a small table would leave its compilation
    to the first large release."""
    with KERNEL_TURNS:
        set_num_threads(1)
        return _leaves(table, rules, perm, 1)


THREADS = ThreadChoice()
"""One thread or the free cores, whichever splits faster (:mod:`~stream_release.core.grouping.
threads`): the same leaves either way."""


@njit(cache=True)
def _leaves_one_thread(
    table: KernelTable, rules: GroupRules, perm: NDArray[np.int64]
) -> NDArray[np.int64]:
    """:func:`mondrian_leaves` depth first on the caller's thread."""
    n = perm.shape[0]
    leaf_start = np.zeros(n + 1, np.bool_)
    if n > 0:
        work = _scratch(rules.protected.shape[0], table.qid.shape[1], np.empty(n, np.int64))
        _subtree_leaves(table, rules, perm, 0, n, work, leaf_start)
    leaf_start[n] = True
    return np.flatnonzero(leaf_start)


@njit(cache=True, parallel=True)
def _leaves(
    table: KernelTable, rules: GroupRules, perm: NDArray[np.int64], n_threads: int
) -> NDArray[np.int64]:
    """:func:`mondrian_leaves` on ``n_threads`` threads."""
    n = perm.shape[0]
    d = table.qid.shape[1]
    n_values = rules.protected.shape[0]
    tmp = np.empty(n, np.int64)
    leaf_start = np.zeros(n + 1, np.bool_)
    node_lo = np.zeros(1 if n > 0 else 0, np.int64)
    node_hi = np.full(node_lo.shape[0], n, np.int64)
    while 0 < node_lo.shape[0] < FRONTIER:  # one level at a time, its nodes in parallel
        k = node_lo.shape[0]
        mids = np.empty(k, np.int64)
        split = np.zeros(k, np.bool_)
        for i in prange(k):
            lo, hi = node_lo[i], node_hi[i]
            mids[i], split[i] = _split_node(
                table, rules, perm, lo, hi, _scratch(n_values, d, tmp[lo:hi])
            )
        n_split = 0
        for i in range(k):
            if split[i]:
                n_split += 1
            else:
                leaf_start[node_lo[i]] = True
        next_lo = np.empty(2 * n_split, np.int64)
        next_hi = np.empty(2 * n_split, np.int64)
        j = 0
        for i in range(k):
            if split[i]:
                next_lo[j], next_hi[j] = node_lo[i], mids[i]
                next_lo[j + 1], next_hi[j + 1] = mids[i], node_hi[i]
                j += 2
        node_lo, node_hi = next_lo, next_hi
    order, first = _share_out(node_hi - node_lo, n_threads)
    for t in prange(first.shape[0] - 1):  # each thread its share of subtrees, to their leaves
        for j in range(first[t], first[t + 1]):
            lo, hi = node_lo[order[j]], node_hi[order[j]]
            _subtree_leaves(
                table, rules, perm, lo, hi, _scratch(n_values, d, tmp[lo:hi]), leaf_start
            )
    leaf_start[n] = True
    return np.flatnonzero(leaf_start)
