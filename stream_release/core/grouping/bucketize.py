"""Pass 2 of the grouping: groups formed inside a leaf, Anatomy-style (numba). Private: the
kernels trust their inputs.

``bucketize``: inside each leaf, Anatomy-style (Xiao & Tao 2006): sweep the leaf in k-d
order; a group starts at the next protected row and adds the compatible row (a new value for
protected ones) that grows its QID box least, critical values first, until it is valid. A
group that cannot be completed goes to the leftovers; unprotected rows left over form
groups of ``min_size``.

The whole algorithm is in :mod:`stream_release.core.grouping.passes`.

Notes
-----
Measured on the first release of the scale benchmark's population at a million rows: the
loop that grows a group stays in :func:`bucketize` (split into functions that take the
structs, all inlined, the pass ran 1.2 times slower without history), and
:func:`_value_buckets` is inlined into it (called, the pass ran twice as slow).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stream_release.core.grouping.extent import KernelTable, extent, growth
from stream_release.core.grouping.tally import (
    GroupRules,
    Tally,
    add_row,
    extra_rows,
    is_compatible,
    is_valid,
    reset_tally,
    rows_needed,
)

__all__ = ["CANDIDATES_PER_BUCKET", "GroupingState", "bucketize"]

CANDIDATES_PER_BUCKET = 4
"""Untaken rows per value a group considers when it picks its next member (nearest first)."""


class GroupingState(NamedTuple):
    """The output state of the passes: ``group`` (n,) int64 group id per row (``-1``: not
    grouped, ``-2``: sent to the leftovers, marked while the pass runs) and ``leftover`` (m,)
    int64, the rows sent to the leftovers (the first ``n_left``, which the caller keeps)."""

    group: NDArray[np.int64]
    leftover: NDArray[np.int64]


class _Buckets(NamedTuple):
    """The rows of a segment by value. ``order`` (k,) int64: positions in the segment sorted by
    value, k-d order kept inside a value; ``end``, ``value`` (B,) int64: where each run of one
    value (a bucket) ends in ``order`` and its value; ``of`` (k,) int64: the bucket of each
    position; ``next`` (B,) int64: the first index in ``order`` of each bucket that may be
    untaken; ``left`` (B,) int64: its untaken rows."""

    order: NDArray[np.int64]
    end: NDArray[np.int64]
    value: NDArray[np.int64]
    of: NDArray[np.int64]
    next: NDArray[np.int64]
    left: NDArray[np.int64]


@njit(cache=True, inline="always")
def _value_buckets(vals: NDArray[np.int64]) -> _Buckets:
    """The :class:`_Buckets` of a segment whose positions hold values ``vals`` (k,)."""
    k = vals.shape[0]
    order = np.argsort(vals, kind="mergesort")
    # buckets: runs of equal value in order[], k-d order kept inside; bucket_of[pos]
    b_start = np.empty(k, np.int64)
    b_end = np.empty(k, np.int64)
    b_val = np.empty(k, np.int64)
    bucket_of = np.empty(k, np.int64)
    nb = 0
    for i in range(k):
        v = vals[order[i]]
        if nb == 0 or b_val[nb - 1] != v:
            b_start[nb] = i
            b_val[nb] = v
            nb += 1
        b_end[nb - 1] = i + 1
        bucket_of[order[i]] = nb - 1
    return _Buckets(
        order,
        b_end[:nb],
        b_val[:nb],
        bucket_of,
        b_start[:nb].copy(),
        b_end[:nb] - b_start[:nb],
    )


@njit(cache=True)
def _chunk_rest(
    seg: NDArray[np.int64],
    order: NDArray[np.int64],
    sens: NDArray[np.int32],
    rules: GroupRules,
    state: GroupingState,
    next_gid: int,
    n_left: int,
) -> tuple[int, int]:
    """Unprotected rows still waiting: chunks of ``min_size`` in k-d order; a short tail goes
    to the leftovers, whose insertion pass checks every member's history requirements.
    Returns ``(next_gid, n_left)``."""
    group, leftover, min_size = state.group, state.leftover, rules.min_size
    k = seg.shape[0]
    rest = np.empty(k, np.int64)
    n_rest = 0
    for i in range(k):
        row = seg[order[i]]
        if group[row] == -1 and not rules.protected[sens[row]]:
            rest[n_rest] = order[i]
            n_rest += 1
    rest = np.sort(rest[:n_rest])
    i = 0
    while i < n_rest:
        j = min(i + min_size, n_rest)
        if n_rest - j < min_size:
            j = n_rest  # the tail joins this chunk
        if j - i >= min_size:
            for t in range(i, j):
                group[seg[rest[t]]] = next_gid
            next_gid += 1
        else:
            for t in range(i, j):
                group[seg[rest[t]]] = -2
                leftover[n_left] = seg[rest[t]]
                n_left += 1
        i = j
    return next_gid, n_left


@njit(cache=True, inline="always")
def _any_critical(  # pragma: no cover - jit
    b_val: NDArray[np.int64],
    b_rem: NDArray[np.int64],
    protected: NDArray[np.bool_],
    cnt: NDArray[np.int64],
    m: int,
    rows_after: int,
) -> bool:
    """Whether a protected value the group does not hold yet is critical: its remaining rows
    exceed a 1/m share of the rows left after the group (``c_s m > N - m``)."""
    for bb in range(b_val.shape[0]):
        v = b_val[bb]
        if b_rem[bb] > 0 and protected[v] and cnt[v] == 0 and b_rem[bb] * m > rows_after:
            return True
    return False


@njit(cache=True, inline="always")
def _eligible(  # pragma: no cover - jit
    protected: bool,
    held: int,
    rem: int,
    repeat: bool,
    any_critical: bool,
    m: int,
    rows_after: int,
) -> bool:
    """Whether a bucket's rows may join the group: it has rows left; a protected value the
    group holds already only when repeats are allowed; and, while some value is critical, only
    a critical one (Anatomy's rule)."""
    if rem == 0:
        return False
    if repeat:
        return True
    if protected and held > 0:
        return False
    return not any_critical or (protected and rem * m > rows_after)


@njit(cache=True, inline="always")
def _better(  # pragma: no cover - jit
    extra: int, grow: float, rem: int, best_extra: int, best_growth: float, best_rem: int
) -> bool:
    """Whether a candidate beats the best so far: fewer extra rows needed, then less growth
    of the box, then from a fuller bucket."""
    if extra != best_extra:
        return extra < best_extra
    if grow != best_growth:
        return grow < best_growth
    return rem > best_rem


@njit(cache=True, inline="always")
def _widen(  # pragma: no cover - jit
    row: int,
    qid: NDArray[np.int32],
    lo: NDArray[np.int64],
    hi: NDArray[np.int64],
    extents: NDArray[np.int64],
    height: NDArray[np.int64],
    span_lo: NDArray[np.int64],
    span_hi: NDArray[np.int64],
) -> None:
    """Widen the group's box ``lo..hi`` (and its ``extents``) to hold ``row``."""
    for a in range(lo.shape[0]):
        c = qid[row, a]
        if c < lo[a] or c > hi[a]:
            lo[a] = min(lo[a], c)
            hi[a] = max(hi[a], c)
            extents[a] = extent(a, lo[a], hi[a], height, span_lo, span_hi)


@njit(cache=True, inline="always")
def _emit(  # pragma: no cover - jit
    seg: NDArray[np.int64],
    members: NDArray[np.int64],
    size: int,
    valid: bool,
    group: NDArray[np.int64],
    leftover: NDArray[np.int64],
    next_gid: int,
    n_left: int,
) -> tuple[int, int]:
    """A finished group: its rows get id ``next_gid`` when ``valid``, else go to the
    leftovers (marked ``-2``); returns (next_gid, n_left)."""
    if valid:
        for i in range(size):
            group[seg[members[i]]] = next_gid
        return next_gid + 1, n_left
    for i in range(size):
        group[seg[members[i]]] = -2  # marked: sent to the leftovers
        leftover[n_left] = seg[members[i]]
        n_left += 1
    return next_gid, n_left


@njit(cache=True)
def bucketize(
    seg: NDArray[np.int64],
    table: KernelTable,
    rules: GroupRules,
    tally: Tally,
    state: GroupingState,
    next_gid: int,
    n_left: int,
) -> tuple[int, int]:
    """Form groups from the rows ``seg`` (in k-d order); returns (next_gid, n_left).

    A group starts at the first untaken protected row (a sweep in k-d order) and grows by the
    compatible candidate that enlarges its QID box least, under one rule from Anatomy (Xiao &
    Tao 2006) that keeps the rest feasible: a protected value whose remaining count exceeds a
    1/m share of the rows left after this group (``c_s m > N - m``, m = ceil(ratio); a
    *critical* value) is taken first.
    Rows of failed groups and unprotected rows that cannot reach ``min_size`` are appended to
    ``state.leftover`` (from ``n_left``); grouped rows get ids from ``next_gid`` in
    ``state.group``. ``tally`` is zeroed scratch, zeroed again.
    """
    k = seg.shape[0]
    if k == 0:
        return next_gid, n_left
    qid, sens, _, height, span_lo, span_hi = table
    protected, base, min_size, cap, ex_ptr, ex_val, ex_req = rules
    cnt, req, touched = tally
    group, leftover = state
    d = qid.shape[1]
    vals = np.empty(k, np.int64)
    for i in range(k):
        vals[i] = sens[seg[i]]
    buckets = _value_buckets(vals)
    taken = np.zeros(k, np.bool_)
    remaining = k
    m = int(np.ceil(max(base, float(min_size))))
    members = np.empty(int(cap) + 2, np.int64)
    box = (np.empty(d, np.int64), np.empty(d, np.int64), np.zeros(d, np.int64))
    sweep = 0
    while True:
        while sweep < k and (taken[sweep] or not protected[vals[sweep]]):
            sweep += 1
        if sweep >= k:
            break
        lo, hi, extents = box
        lo[:] = qid[seg[sweep]]  # the box of the group's first row
        hi[:] = qid[seg[sweep]]
        extents[:] = 0
        size = 0
        n_touched = 0
        pos = sweep
        while pos >= 0:  # take the row at pos, then choose the next
            row = seg[pos]
            members[size] = pos
            size += 1
            taken[pos] = True
            buckets.left[buckets.of[pos]] -= 1
            remaining -= 1
            _widen(row, qid, lo, hi, extents, height, span_lo, span_hi)
            n_touched = add_row(
                row, sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req, touched, n_touched
            )
            if size >= cap or is_valid(size, min_size, protected, cnt, req, touched, n_touched):
                break
            rows_after = remaining - max(m - size, 0)  # untaken rows once this group is done
            pos = _best_candidate(
                seg, taken, buckets, size, rows_after, m, table, rules, tally, n_touched, box
            )
        valid = is_valid(size, min_size, protected, cnt, req, touched, n_touched)
        next_gid, n_left = _emit(seg, members, size, valid, group, leftover, next_gid, n_left)
        reset_tally(cnt, req, touched, n_touched)
    return _chunk_rest(seg, buckets.order, sens, rules, state, next_gid, n_left)


@njit(cache=True, inline="always")
def _best_candidate(  # pragma: no cover - jit
    seg: NDArray[np.int64],
    taken: NDArray[np.bool_],
    buckets: _Buckets,
    size: int,
    rows_after: int,
    m: int,
    table: KernelTable,
    rules: GroupRules,
    tally: Tally,
    n_touched: int,
    box: tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]],
) -> int:
    """The position of the row that joins the group next (:func:`bucketize`'s rule), ``-1``
    when none may: first a distinct protected value (Anatomy), only when none fits a repeated
    one (a member whose history needs a ratio above the number of values present could never
    be grouped otherwise); while a value is critical, only a critical one."""
    protected, ex_val = rules.protected, rules.ex_val
    cnt, req, touched = tally
    # a critical value (Anatomy's invariant would break without it) restricts the choice
    any_critical = _any_critical(buckets.value, buckets.left, protected, cnt, m, rows_after)
    need = rows_needed(size + 1, protected, cnt, req, touched, n_touched)
    best = (-1, 0, 0.0, 0)  # position, extra rows, growth, its bucket's rows left
    for attempt in range(2):
        if best[0] >= 0 or (attempt == 1 and ex_val.shape[0] == 0):
            break  # without any history every distinct value fits: no second attempt
        repeat = attempt == 1
        for bb in range(buckets.value.shape[0]):
            v = buckets.value[bb]
            if not _eligible(
                protected[v], cnt[v], buckets.left[bb], repeat, any_critical, m, rows_after
            ):
                continue
            best = _scan_bucket(
                bb, repeat, need, seg, taken, buckets, table, rules, tally, box, best
            )
            if best[0] >= 0 and best[2] == 0.0 and best[1] == 0 and not any_critical:
                break  # nothing beats a row inside the box
    return best[0]


@njit(cache=True, inline="always")
def _scan_bucket(  # pragma: no cover - jit
    bb: int,
    repeat: bool,
    need: float,
    seg: NDArray[np.int64],
    taken: NDArray[np.bool_],
    buckets: _Buckets,
    table: KernelTable,
    rules: GroupRules,
    tally: Tally,
    box: tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]],
    best: tuple[int, int, float, int],
) -> tuple[int, int, float, int]:
    """``best`` after bucket ``bb``'s first :data:`CANDIDATES_PER_BUCKET` untaken rows (in
    k-d order, nearest first): a candidate its own history allows (when the release has
    histories) that beats it (:func:`_better`)."""
    qid, sens, norm, height, span_lo, span_hi = table
    protected, base, _, cap, ex_ptr, ex_val, ex_req = rules
    cnt, req, _ = tally
    lo, hi, extents = box
    best_pos, best_extra, best_growth, best_rem = best
    order, end, first, left = buckets.order, buckets.end, buckets.next, buckets.left
    while first[bb] < end[bb] and taken[order[first[bb]]]:
        first[bb] += 1
    seen = 0
    i = first[bb]
    while i < end[bb] and seen < CANDIDATES_PER_BUCKET:
        p = order[i]
        i += 1
        if taken[p]:
            continue
        seen += 1
        cand = seg[p]
        extra = 0
        if ex_val.shape[0] > 0:  # without any history every distinct value fits
            if not is_compatible(
                cand, sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req, cap, repeat
            ):
                continue  # its own history forbids it; bucket-mates may fit
            extra = extra_rows(cand, need, sens, protected, base, ex_ptr, ex_val, ex_req, cnt, req)
        grow = growth(cand, qid, norm, height, span_lo, span_hi, lo, hi, extents)
        if best_pos < 0 or _better(extra, grow, left[bb], best_extra, best_growth, best_rem):
            best_pos, best_extra, best_growth, best_rem = p, extra, grow, left[bb]
        if grow == 0.0 and extra == 0:
            break  # inside the box, no larger group needed: nothing does better
    return best_pos, best_extra, best_growth, best_rem
