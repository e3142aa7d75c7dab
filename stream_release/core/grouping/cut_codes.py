"""The codes of one Mondrian node on one attribute, counted without sorting them (numba):
running counts over the node's code range (a sorted copy when the range is wide), the median,
the count at or below a code, and the cut a hierarchy allows
(:mod:`stream_release.core.grouping.mondrian`)."""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stream_release.core.grouping.extent import KernelTable


@njit(cache=True)
def hierarchy_cut(
    table: KernelTable, a: int, lo: int, hi: int, size: int, codes: NDArray[np.int64]
) -> int:
    """Threshold at a child boundary of the range's lowest common ancestor, nearest the median.

    ``codes`` are the node's codes on attribute ``a`` as :func:`code_counts` gives them
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
        n_left = at_or_below(codes, size, lo, hi, end)
        if 0 < n_left < size:
            gap = abs(2 * n_left - size)
            if gap < best_gap:
                best_gap = gap
                best = end
        c = end + 1
    return best


@njit(cache=True)
def code_counts(
    perm: NDArray[np.int64],
    lo: int,
    hi: int,
    qid: NDArray[np.int32],
    a: int,
    c_min: int,
    c_max: int,
) -> NDArray[np.int64]:
    """Attribute ``a``'s codes of rows ``perm[lo:hi]`` (codes ``c_min..c_max``), in the form
    :func:`at_or_below` reads: when the code range is small (at most 4 times the rows), the
    running count of rows at or below each code (one pass, no sort); else the codes sorted."""
    size = hi - lo
    span = c_max - c_min + 1
    if running_counts(size, c_min, c_max):
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
def running_counts(size: int, c_min: int, c_max: int) -> bool:
    """Whether :func:`code_counts` gives a node's codes as running counts (a code range of
    at most 4 times its ``size`` rows) rather than sorted."""
    return c_max - c_min + 1 <= 4 * size


@njit(cache=True)
def at_or_below(codes: NDArray[np.int64], size: int, c_min: int, c_max: int, code: int) -> int:
    """How many of the node's ``size`` rows have a code at most ``code``, from
    :func:`code_counts`' ``codes`` (running counts or sorted codes)."""
    if code < c_min:
        return 0
    if code >= c_max:
        return size
    if running_counts(size, c_min, c_max):
        return int(codes[code - c_min])
    return int(np.searchsorted(codes, code, side="right"))


@njit(cache=True)
def nth_code(codes: NDArray[np.int64], size: int, c_min: int, c_max: int, k: int) -> int:
    """The ``k``-th smallest code (0-based) of the node, from :func:`code_counts`."""
    if running_counts(size, c_min, c_max):
        return c_min + int(np.searchsorted(codes, k, side="right"))
    return int(codes[k])
