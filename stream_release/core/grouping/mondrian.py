r"""Pass 1 of the grouping: Mondrian-like k-d splitting into QID-local leaves (numba).
Private: the kernels trust their inputs.

``mondrian_leaves``: top-down median splits on the widest normalised attribute, relaxed by
moving the excess rows of an over-represented value across the cut (``_balance``), taken only
when both halves are valid as whole groups (a set can be cut into valid groups only if it is
valid as one group: the per-value counts add up) under ``m = ceil(max(base, min_size))``
where the rows meet it, else under ``base`` (``_split_ratio``: groups of ``m`` rows absorb a
top share of ``1/m``, so a leaf cut down to ``1/base`` left its excess over; on a million
rows of the scale benchmark that was 0.36-0.72 % of each release before any history).
A leaf of at least :data:`STRATIFIED_FROM` rows that no such cut splits is cut value by
value (``_stratified``: each value's lower half by the widest attribute to the left, the
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

from stream_release.core.grouping.extent import KernelTable, extent
from stream_release.core.grouping.tally import GroupRules
from stream_release.core.grouping.threads import ThreadChoice

__all__ = ["STRATIFIED_FROM", "mondrian_leaves"]


@njit(cache=True)
def _hierarchy_cut(
    table: KernelTable, a: int, lo: int, hi: int, size: int, codes: NDArray[np.int64]
) -> int:
    """Threshold at a child boundary of the range's lowest common ancestor, nearest the median.

    ``codes`` are the node's codes on attribute ``a`` as :func:`_code_counts` gives them
    (``size`` rows, codes ``lo..hi``); returns -1 if no boundary splits them. Cutting there
    gives both halves a lower common ancestor (a smaller NCP).
    """
    height, span_lo, span_hi = table.height, table.span_lo, table.span_hi
    level = height[a] - 1
    for h in range(height[a]):
        if span_lo[a, h, lo] == span_lo[a, h, hi]:
            level = h
            break
    if level == 0:
        return -1
    best = -1
    best_gap = size
    c = lo
    while c < hi:
        end = span_hi[a, level - 1, c]  # last leaf of c's child node
        if end >= hi:
            break
        n_left = _at_or_below(codes, size, lo, hi, end)
        if 0 < n_left < size:
            gap = abs(2 * n_left - size)
            if gap < best_gap:
                best_gap = gap
                best = end
        c = end + 1
    return best


@njit(cache=True)
def _code_counts(
    perm: NDArray[np.int64],
    lo: int,
    hi: int,
    qid: NDArray[np.int32],
    a: int,
    c_min: int,
    c_max: int,
) -> NDArray[np.int64]:
    """Attribute ``a``'s codes of rows ``perm[lo:hi]`` (codes ``c_min..c_max``), in the form
    :func:`_at_or_below` reads: when the code range is small (at most 4 times the rows), the
    running count of rows at or below each code (one pass, no sort); else the codes sorted."""
    size = hi - lo
    span = c_max - c_min + 1
    if _running_counts(size, c_min, c_max):
        counts = np.zeros(span, np.int64)
        for i in range(lo, hi):
            counts[qid[perm[i], a] - c_min] += 1
        for c in range(1, span):
            counts[c] += counts[c - 1]
        return counts
    out = np.empty(size, np.int64)
    for i in range(size):
        out[i] = qid[perm[lo + i], a]
    out.sort()
    return out


@njit(cache=True)
def _running_counts(size: int, c_min: int, c_max: int) -> bool:
    """Whether :func:`_code_counts` gives a node's codes as running counts (a code range of
    at most 4 times its ``size`` rows) rather than sorted."""
    return c_max - c_min + 1 <= 4 * size


@njit(cache=True)
def _at_or_below(codes: NDArray[np.int64], size: int, c_min: int, c_max: int, code: int) -> int:
    """How many of the node's ``size`` rows have a code at most ``code``, from
    :func:`_code_counts`' ``codes`` (running counts or sorted codes)."""
    if code < c_min:
        return 0
    if code >= c_max:
        return size
    if _running_counts(size, c_min, c_max):
        return int(codes[code - c_min])
    return int(np.searchsorted(codes, code, side="right"))


@njit(cache=True)
def _nth_code(codes: NDArray[np.int64], size: int, c_min: int, c_max: int, k: int) -> int:
    """The ``k``-th smallest code (0-based) of the node, from :func:`_code_counts`."""
    if _running_counts(size, c_min, c_max):
        return c_min + int(np.searchsorted(codes, k, side="right"))
    return int(codes[k])


@njit(cache=True)
def _allowed(n: int, base: float) -> int:
    """Largest count of one protected value a group of ``n`` rows may hold."""
    return int(np.floor(n / base))


@njit(cache=True)
def _over_cap(cnt: NDArray[np.int64], protected: NDArray[np.bool_], cap: int, size: int) -> int:
    """How many protected values ``cnt`` (V,) holds more than ``cap`` rows of; when the values
    outnumber the node's ``size`` rows, ``size + 1`` instead (more than a scan of the node can
    move: :func:`_balance` then scans every row, a count over the values costing more)."""
    if cnt.shape[0] > size:
        return size + 1
    over = 0
    for v in range(cnt.shape[0]):
        if protected[v] and cnt[v] > cap:
            over += 1
    return over


@njit(cache=True)
def _recount(
    cnt: NDArray[np.int64],
    protected: NDArray[np.bool_],
    cap: int,
    counted: int,
    over: int,
    size: int,
) -> tuple[int, int]:
    """A balance scan's ``(over, counted)`` before its next row: ``over`` values hold more
    than ``counted`` rows; when none does and the cap has fallen below ``counted`` since (or
    nothing was counted yet), they are counted again at ``cap``. The scan stops at
    ``over == 0``: the cap only falls with a move, so no later row would move."""
    if over == 0 and cap != counted:
        return _over_cap(cnt, protected, cap, size), cap
    return over, counted


@njit(cache=True)
def _balance(
    perm: NDArray[np.int64],
    lo: int,
    mid: int,
    hi: int,
    qid: NDArray[np.int32],
    a: int,
    sens: NDArray[np.int32],
    protected: NDArray[np.bool_],
    base: float,
    min_size: int,
    cnt_l: NDArray[np.int64],
    cnt_r: NDArray[np.int64],
) -> tuple[int, bool]:
    """Relaxed cut: move the excess rows of over-represented protected values across ``mid``.

    After a median cut on attribute ``a`` one half may hold more of a value than any valid
    grouping of it allows (``n_s > n / base``). Rows of that value nearest the cut (largest
    code on the left, smallest on the right) are moved to the other half until both halves are
    within their allowance or no move helps. ``cnt_l``, ``cnt_r`` (V,) hold each protected
    value's rows on either side of ``mid`` (:func:`_median_cut` counts them); zeroed on
    return. Returns the new ``mid`` and whether both halves are valid as whole groups (at
    least ``min_size`` rows, every protected count allowed).

    At most 8 rounds, each a scan of either side from the cut outward that stops once no
    value is over the side's cap (:func:`_over_cap`, O(V) when counted): O(rows up to the last
    row moved + V) per round. Scanning whole sides every round read 266M rows on the 1M-row
    scale release (18M rows in its nodes); stopping early read pass 1 on one thread in
    1.9 s instead of 3.0 s, the same leaves.
    """
    size = hi - lo
    for _ in range(8):
        moved = False
        # left -> right; a scan stops once no value is over the cap (:func:`_recount`)
        cap = _allowed(mid - lo, base)
        over, counted = 0, -1  # counted at the first row
        i = mid - 1
        while i >= lo:
            over, counted = _recount(cnt_l, protected, cap, counted, over, size)
            if over == 0:
                break
            v = sens[perm[i]]
            if protected[v] and cnt_l[v] > cap:
                r = perm[i]
                perm[i] = perm[mid - 1]
                perm[mid - 1] = r
                mid -= 1
                cnt_l[v] -= 1
                cnt_r[v] += 1
                if cnt_l[v] == counted:
                    over -= 1
                cap = _allowed(mid - lo, base)
                moved = True
            i -= 1
            if i >= mid:
                i = mid - 1
        # right -> left, the same
        cap = _allowed(hi - mid, base)
        over, counted = 0, -1
        j = mid
        while j < hi:
            over, counted = _recount(cnt_r, protected, cap, counted, over, size)
            if over == 0:
                break
            v = sens[perm[j]]
            if protected[v] and cnt_r[v] > cap:
                r = perm[j]
                perm[j] = perm[mid]
                perm[mid] = r
                mid += 1
                cnt_r[v] -= 1
                cnt_l[v] += 1
                if cnt_r[v] == counted:
                    over -= 1
                cap = _allowed(hi - mid, base)
                moved = True
            j += 1
            if j < mid:
                j = mid
        if not moved:
            break
    n_l = mid - lo
    n_r = hi - mid
    ok = n_l >= max(min_size, 1) and n_r >= max(min_size, 1)
    # over the values or the rows, whichever is fewer (a value absent from the node counts 0
    # on both sides): many values would make a pass over them cost more than the node
    if cnt_l.shape[0] <= hi - lo:
        for v in range(cnt_l.shape[0]):
            if ok and protected[v] and (n_l < cnt_l[v] * base or n_r < cnt_r[v] * base):
                ok = False
            cnt_l[v] = 0
            cnt_r[v] = 0
    else:
        for i in range(lo, hi):
            v = sens[perm[i]]
            if ok and protected[v] and (n_l < cnt_l[v] * base or n_r < cnt_r[v] * base):
                ok = False
            cnt_l[v] = 0
            cnt_r[v] = 0
    return mid, ok


@njit(cache=True)
def _split_ratio(size: int, top: int, base: float, min_size: int) -> float:
    """The ratio both halves of a cut of a node of ``size`` rows must meet, its most frequent
    protected value held by ``top`` rows (:func:`_survey`): ``m = ceil(max(base, k))`` when
    the rows meet it (groups of ``m`` rows, one of each protected value, absorb a share of
    ``1/m``; a leaf whose top share lies between ``1/m`` and ``1/base`` leaves the excess
    over), else ``base``."""
    m = np.ceil(max(base, float(min_size)))
    return m if top * m <= size else base


STRATIFIED_FROM = 1024
"""Leaves of at least this many rows that no cut at one code can split are cut value by value
(:func:`_stratified`): on the first release of the scale benchmark at a million rows, leaves
above 10k rows held 69 % of the rows (up to 282k rows each), each stopped where its top value's
share made every median cut infeasible."""


@njit(cache=True)
def _stratified(
    perm: NDArray[np.int64],
    lo: int,
    hi: int,
    qid: NDArray[np.int32],
    a: int,
    sens: NDArray[np.int32],
    protected: NDArray[np.bool_],
    ratio: float,
    min_size: int,
    cnt: NDArray[np.int64],
    take: NDArray[np.int64],
    tmp: NDArray[np.int64],
) -> tuple[int, bool]:
    """Value-balanced cut of ``perm[lo:hi]`` on attribute ``a``: each value's rows go half to
    each side, the lower codes of the value to the left, so both halves keep the leaf's
    proportions (within one row per value) where no cut at one code does. An odd value's
    extra row goes to the side with more room for it (tightest values first). Reorders
    ``perm[lo:hi]`` (left half first) and returns ``(mid, ok)``: ``ok`` when both halves
    have ``min_size`` rows and every protected count within ``floor(n / ratio)``; ``perm`` is
    left as it was otherwise. ``cnt`` and ``take`` are zeroed scratch arrays of size V,
    zeroed again; ``tmp`` scratch of at least ``hi - lo`` rows."""
    size = hi - lo
    codes = np.empty(size, np.int64)
    for i in range(size):
        codes[i] = qid[perm[lo + i], a]
    order = np.argsort(codes, kind="mergesort")
    for i in range(size):
        cnt[sens[perm[lo + i]]] += 1
    n_left = 0
    n_values = cnt.shape[0]
    for v in range(n_values):
        take[v] = cnt[v] // 2
        n_left += take[v]
    # odd values: the extra row to the side with more room, the tightest values first
    odd = np.empty(n_values, np.int64)
    n_odd = 0
    for v in range(n_values):
        if cnt[v] % 2 == 1:
            odd[n_odd] = v
            n_odd += 1
    weight = np.empty(n_odd, np.float64)
    for k in range(n_odd):
        weight[k] = -cnt[odd[k]]
    ranked = np.argsort(weight, kind="mergesort")
    n_right = size - n_left  # every extra row on the right for now
    for k in range(n_odd):
        v = odd[ranked[k]]
        if not protected[v]:
            continue
        room_l = (n_left + 1) / ratio - (take[v] + 1)
        room_r = n_right / ratio - (cnt[v] - take[v])
        if room_l > room_r:
            take[v] += 1
            n_left += 1
            n_right -= 1
    # the sizes every protected value allows the left half, given its rows there: a tight
    # leaf (top share exactly 1/ratio) needs them exact
    low = max(min_size, 1)
    high = size - max(min_size, 1)
    for v in range(n_values):
        if protected[v] and cnt[v] > 0:
            low = max(low, int(np.ceil(take[v] * ratio - 1e-9)))
            high = min(high, int(np.floor(size - (cnt[v] - take[v]) * ratio + 1e-9)))
    ok = low <= high
    if ok:
        target = min(max(n_left, low), high)
        # move rows of the values with most room (unprotected, then the rarest) across
        key = np.empty(n_values, np.float64)
        for w in range(n_values):
            key[w] = cnt[w] if protected[w] else -1.0
        for v in np.argsort(key, kind="mergesort"):
            if n_left == target:
                break
            if target > n_left:
                m = min(target - n_left, cnt[v] - take[v])
                if protected[v]:
                    m = min(m, int(np.floor(target / ratio + 1e-9)) - take[v])
            else:
                m = min(n_left - target, take[v])
                if protected[v]:
                    m = min(m, int(np.floor((size - target) / ratio + 1e-9)) - cnt[v] + take[v])
                m = -m
            if m * (target - n_left) > 0:
                take[v] += m
                n_left += m
        n_right = size - n_left
        ok = n_left == target
    for v in range(n_values):
        if (
            ok
            and protected[v]
            and cnt[v] > 0
            and (take[v] * ratio > n_left or (cnt[v] - take[v]) * ratio > n_right)
        ):
            ok = False
    if ok:
        li = 0
        ri = 0
        for k in range(size):
            r = perm[lo + order[k]]
            v = sens[r]
            if take[v] > 0:
                take[v] -= 1
                tmp[li] = r
                li += 1
            else:
                codes[ri] = r
                ri += 1
        for i in range(li):
            perm[lo + i] = tmp[i]
        for i in range(ri):
            perm[lo + li + i] = codes[i]
    for v in range(n_values):
        cnt[v] = 0
        take[v] = 0
    return lo + n_left, ok


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
    boundary of the hierarchy (:func:`_hierarchy_cut`), else at the median. Rows with codes up
    to it go first, in order (stable), and ``work.cnt_l``, ``work.cnt_r`` count each protected
    value's rows on either side (for :func:`_balance`); returns how many rows go first, or 0
    (``perm`` untouched, the counts zero) when no code splits the rows. Two passes over the
    rows: their codes counted (:func:`_code_counts`), then the partition."""
    qid, sens = table.qid, table.sens
    size = hi - lo
    codes = _code_counts(perm, lo, hi, qid, a, c_min, c_max)
    threshold = -1
    if table.height[a] > 0:
        threshold = _hierarchy_cut(table, a, c_min, c_max, size, codes)
    if threshold < 0:
        threshold = _nth_code(codes, size, c_min, c_max, (size - 1) // 2)
        if threshold >= c_max:  # everything <= median: cut below it
            threshold = threshold - 1
    n_left = _at_or_below(codes, size, c_min, c_max, threshold)
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
    :func:`_balance`), else value by value (:func:`_stratified`, from
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
        mid, ok = _balance(
            perm, lo, lo + n_left, hi, qid, a, sens, protected, ratio, min_size, cnt_l, cnt_r
        )
        if ok:
            return mid, True
    if size >= STRATIFIED_FROM and width[order[0]] > 0.0:
        # no cut at one code keeps both halves feasible: cut each value in half
        return _stratified(
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
