"""The value-balanced cut of a large Mondrian leaf that no cut at one code splits (numba):
each value's rows half to each side (:func:`stratified_cut`,
:mod:`stream_release.core.grouping.mondrian`)."""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

STRATIFIED_FROM = 1024
"""Leaves of at least this many rows that no cut at one code can split are cut value by value
(:func:`stratified_cut`): on the first release of the scale benchmark at a million rows, leaves
above 10k rows held 69 % of the rows (up to 282k rows each), each stopped where its top value's
share made every median cut infeasible."""


@njit(cache=True)
def stratified_cut(
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
    n_left = _halves(cnt, take, protected, ratio, size)
    low, high = _left_sizes(cnt, take, protected, ratio, size, min_size)
    ok = low <= high
    if ok:
        target = min(max(n_left, low), high)
        n_left = _move_to(target, cnt, take, protected, ratio, size, n_left)
        ok = n_left == target and _within_caps(cnt, take, protected, ratio, n_left, size - n_left)
    if ok:
        _place(perm, lo, order, sens, take, tmp, codes)
    cnt[:] = 0
    take[:] = 0
    return lo + n_left, ok


@njit(cache=True)
def _halves(  # pragma: no cover - jit
    cnt: NDArray[np.int64],
    take: NDArray[np.int64],
    protected: NDArray[np.bool_],
    ratio: float,
    size: int,
) -> int:
    """Half of each value's ``cnt`` rows to the left (``take``); an odd value's extra row to
    the side with more room for it, the tightest values first. Returns the left size."""
    n_left = 0
    n_values = cnt.shape[0]
    for v in range(n_values):
        take[v] = cnt[v] // 2
        n_left += take[v]
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
    return n_left


@njit(cache=True)
def _left_sizes(  # pragma: no cover - jit
    cnt: NDArray[np.int64],
    take: NDArray[np.int64],
    protected: NDArray[np.bool_],
    ratio: float,
    size: int,
    min_size: int,
) -> tuple[int, int]:
    """``(low, high)``: the sizes every protected value allows the left half, given its rows
    there (a tight leaf, top share exactly 1/ratio, needs them exact)."""
    low = max(min_size, 1)
    high = size - max(min_size, 1)
    for v in range(cnt.shape[0]):
        if protected[v] and cnt[v] > 0:
            low = max(low, int(np.ceil(take[v] * ratio - 1e-9)))
            high = min(high, int(np.floor(size - (cnt[v] - take[v]) * ratio + 1e-9)))
    return low, high


@njit(cache=True)
def _move_to(  # pragma: no cover - jit
    target: int,
    cnt: NDArray[np.int64],
    take: NDArray[np.int64],
    protected: NDArray[np.bool_],
    ratio: float,
    size: int,
    n_left: int,
) -> int:
    """Move rows across until the left half has ``target`` rows, the values with most room
    first (unprotected, then the rarest); returns the left size reached."""
    n_values = cnt.shape[0]
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
    return n_left


@njit(cache=True)
def _within_caps(  # pragma: no cover - jit
    cnt: NDArray[np.int64],
    take: NDArray[np.int64],
    protected: NDArray[np.bool_],
    ratio: float,
    n_left: int,
    n_right: int,
) -> bool:
    """Whether every protected value's rows on each side are within that side's cap."""
    for v in range(cnt.shape[0]):
        over = take[v] * ratio > n_left or (cnt[v] - take[v]) * ratio > n_right
        if protected[v] and cnt[v] > 0 and over:
            return False
    return True


@njit(cache=True)
def _place(  # pragma: no cover - jit
    perm: NDArray[np.int64],
    lo: int,
    order: NDArray[np.int64],
    sens: NDArray[np.int32],
    take: NDArray[np.int64],
    tmp: NDArray[np.int64],
    codes: NDArray[np.int64],
) -> None:
    """Reorder ``perm[lo:lo + len(order)]``: in code order, each value's first ``take`` rows
    to the left half, the rest after them (``codes`` reused as the right half's scratch;
    ``take`` is used up)."""
    li = 0
    ri = 0
    for k in range(order.shape[0]):
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
