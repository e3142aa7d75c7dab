r"""Compiled loops of the count-query workload (:mod:`~stream_release.core.utility.queries`).

:func:`factorize_keys` merges rows with identical QIDs; :func:`scan_combos` sums the actual
(and, for ``anatomy``, the estimated) count of each query over the merged rows of its value;
:func:`scan_groups` sums the ``generalized`` estimate over the groups holding its value. The
indexes they read are built by :mod:`~stream_release.core.utility.query_index`.

The loops are single-threaded and release the GIL (``nogil``): safe under fork and concurrent
callers. They trust their inputs (STYLE.md, "Validation and errors").
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

Index = int | np.integer[Any]
"""A position or a code: a Python int or a numpy integer."""


@njit(cache=True)
def factorize_keys(  # pragma: no cover - jit
    keys: NDArray[Any],
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Codes of int64 ``keys`` in order of first appearance, and each code's first index
    (Fibonacci-hashed open addressing; the table doubles when half full)."""
    n = keys.shape[0]
    bits = 10
    table = np.full(1 << bits, -1, dtype=np.int64)
    codes = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    n_unique = 0
    for r in range(n):
        key = keys[r]
        mask = (1 << bits) - 1
        idx = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits))
        while True:
            u = table[idx]
            if u < 0:
                table[idx] = n_unique
                first[n_unique] = r
                codes[r] = n_unique
                n_unique += 1
                break
            if keys[first[u]] == key:
                codes[r] = u
                break
            idx = (idx + 1) & mask
        if 2 * n_unique > (1 << bits):
            bits += 1
            mask = (1 << bits) - 1
            table = np.full(1 << bits, -1, dtype=np.int64)
            for v in range(n_unique):
                h = np.uint64(keys[first[v]]) * np.uint64(0x9E3779B97F4A7C15)
                idx = np.int64(h >> np.uint64(64 - bits))
                while table[idx] >= 0:
                    idx = (idx + 1) & mask
                table[idx] = v
    return codes, first[:n_unique].copy()


# The kernels run with fastmath (sums may be reassociated, so results can differ from a
# sequential sum in the last bits) and error_model="numpy" (no ZeroDivisionError branch; no
# divisor here is ever 0): both are needed for LLVM to vectorize the inner loops.
_kernel = njit(cache=True, fastmath=True, error_model="numpy", nogil=True)


@_kernel
def scan_combos(  # pragma: no cover
    attrs: NDArray[Any],
    starts: NDArray[Any],
    ends: NDArray[Any],
    values: NDArray[Any],
    ptr: NDArray[Any],
    codes: NDArray[Any],
    actual: NDArray[Any],
    weight: NDArray[Any],
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Per query: sums of ``actual`` and ``weight`` over the merged rows of its value whose
    QIDs fall in every range. ``codes`` (d, K) int32; ``attrs`` has 1 to 3 columns (a missing
    one repeats the first: the same test twice)."""
    m = values.shape[0]
    qd = attrs.shape[1]
    act = np.zeros(m, dtype=np.float64)
    est = np.zeros(m, dtype=np.float64)
    for q in range(m):
        s = values[q]
        t1 = min(1, qd - 1)
        t2 = min(2, qd - 1)
        act[q], est[q] = _sum_inside(
            actual,
            weight,
            codes,
            ptr[s],
            ptr[s + 1],
            attrs[q, 0],
            np.int32(starts[q, 0]),
            np.int32(ends[q, 0]),
            attrs[q, t1],
            np.int32(starts[q, t1]),
            np.int32(ends[q, t1]),
            attrs[q, t2],
            np.int32(starts[q, t2]),
            np.int32(ends[q, t2]),
        )
    return act, est


@_kernel
def _sum_inside(  # pragma: no cover
    actual: NDArray[Any],
    weight: NDArray[Any],
    codes: NDArray[Any],
    p0: Index,
    p1: Index,
    j0: Index,
    a0: Index,
    b0: Index,
    j1: Index,
    a1: Index,
    b1: Index,
    j2: Index,
    a2: Index,
    b2: Index,
) -> tuple[float, float]:
    c0 = codes[j0, p0:p1]
    c1 = codes[j1, p0:p1]
    c2 = codes[j2, p0:p1]
    w_act = actual[p0:p1]
    w_est = weight[p0:p1]
    a = 0.0
    e = 0.0
    for i in range(p1 - p0):
        inside = (
            (c0[i] >= a0)
            & (c0[i] <= b0)
            & (c1[i] >= a1)
            & (c1[i] <= b1)
            & (c2[i] >= a2)
            & (c2[i] <= b2)
        )
        f = 1.0 if inside else 0.0
        a += w_act[i] * f
        e += w_est[i] * f
    return a, e


@_kernel
def _popcount(  # pragma: no cover - jit
    x: np.uint64,
) -> np.uint64:
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


@_kernel
def scan_groups(  # pragma: no cover - jit
    attrs: NDArray[Any],
    starts: NDArray[Any],
    ends: NDArray[Any],
    values: NDArray[Any],
    ptr: NDArray[Any],
    group: NDArray[Any],
    count: NDArray[Any],
    lo: NDArray[Any],
    hi: NDArray[Any],
    kind: NDArray[Any],
    mask_row: NDArray[Any],
    masks: NDArray[Any],
    set_ptr: NDArray[Any],
    set_codes: NDArray[Any],
) -> NDArray[np.float64]:
    """Per query: ``sum_G n(G, s) prod_t |V_t(G) ∩ R_t| / |V_t(G)|`` over the groups holding s.
    ``lo``, ``hi`` (d, K) int32 code bounds of each entry's group; ``kind`` (d,) 0 interval,
    1 set as a bit mask (``masks[mask_row[j]]``), 2 set as CSR (``set_ptr``, ``set_codes``)."""
    m = values.shape[0]
    qd = attrs.shape[1]
    est = np.zeros(m, dtype=np.float64)
    for q in range(m):
        s = values[q]
        intervals = True
        for t in range(qd):
            if kind[attrs[q, t]] != 0:
                intervals = False
        if intervals:
            # A missing 2nd/3rd attribute repeats the first with its full range: a factor 1.
            t1 = min(1, qd - 1)
            t2 = min(2, qd - 1)
            a1 = np.int32(starts[q, t1]) if qd > 1 else np.int32(-2147483647)
            b1 = np.int32(ends[q, t1]) if qd > 1 else np.int32(2147483647)
            a2 = np.int32(starts[q, t2]) if qd > 2 else np.int32(-2147483647)
            b2 = np.int32(ends[q, t2]) if qd > 2 else np.int32(2147483647)
            est[q] = _interval_estimate(
                count,
                lo,
                hi,
                ptr[s],
                ptr[s + 1],
                attrs[q, 0],
                np.int32(starts[q, 0]),
                np.int32(ends[q, 0]),
                attrs[q, t1],
                a1,
                b1,
                attrs[q, t2],
                a2,
                b2,
            )
        else:
            est[q] = _mixed_estimate(
                attrs[q],
                starts[q],
                ends[q],
                ptr[s],
                ptr[s + 1],
                group,
                count,
                lo,
                hi,
                kind,
                mask_row,
                masks,
                set_ptr,
                set_codes,
            )
    return est


@_kernel
def _interval_estimate(  # pragma: no cover
    count: NDArray[Any],
    lo: NDArray[Any],
    hi: NDArray[Any],
    p0: Index,
    p1: Index,
    j0: Index,
    a0: Index,
    b0: Index,
    j1: Index,
    a1: Index,
    b1: Index,
    j2: Index,
    a2: Index,
    b2: Index,
) -> float:
    """``sum_k count[k] prod_t overlap_t / width_t`` for three interval attributes."""
    l0 = lo[j0, p0:p1]
    h0 = hi[j0, p0:p1]
    l1 = lo[j1, p0:p1]
    h1 = hi[j1, p0:p1]
    l2 = lo[j2, p0:p1]
    h2 = hi[j2, p0:p1]
    c = count[p0:p1]
    total = 0.0
    for i in range(p1 - p0):
        x0 = max(min(b0, h0[i]) - max(a0, l0[i]) + 1, 0)
        x1 = max(min(b1, h1[i]) - max(a1, l1[i]) + 1, 0)
        x2 = max(min(b2, h2[i]) - max(a2, l2[i]) + 1, 0)
        inside = np.float64(x0) * np.float64(x1) * np.float64(x2)
        width = (
            np.float64(h0[i] - l0[i] + 1)
            * np.float64(h1[i] - l1[i] + 1)
            * np.float64(h2[i] - l2[i] + 1)
        )
        total += c[i] * inside / width
    return total


@_kernel
def _mixed_estimate(  # pragma: no cover - jit
    attrs: NDArray[Any],
    starts: NDArray[Any],
    ends: NDArray[Any],
    p0: Index,
    p1: Index,
    group: NDArray[Any],
    count: NDArray[Any],
    lo: NDArray[Any],
    hi: NDArray[Any],
    kind: NDArray[Any],
    mask_row: NDArray[Any],
    masks: NDArray[Any],
    set_ptr: NDArray[Any],
    set_codes: NDArray[Any],
) -> float:
    """The same sum when a queried attribute is a set: one pass per attribute."""
    n = p1 - p0
    share = count[p0:p1].copy()
    for t in range(attrs.shape[0]):
        j = attrs[t]
        a = starts[t]
        b = ends[t]
        if kind[j] == 0:
            lo_j = lo[j, p0:p1]
            hi_j = hi[j, p0:p1]
            for i in range(n):
                overlap = min(b, hi_j[i]) - max(a, lo_j[i]) + 1
                share[i] *= max(overlap, 0) / (hi_j[i] - lo_j[i] + 1)
        elif kind[j] == 1:
            upper = ~np.uint64(0) if b >= 63 else (np.uint64(1) << np.uint64(b + 1)) - np.uint64(1)
            window = upper & ~((np.uint64(1) << np.uint64(a)) - np.uint64(1))
            mask_j = masks[mask_row[j], p0:p1]
            for i in range(n):
                share[i] *= np.float64(_popcount(mask_j[i] & window)) / np.float64(
                    _popcount(mask_j[i])
                )
        else:
            for i in range(n):
                g = group[p0 + i]
                first = set_ptr[j, g]
                last = set_ptr[j, g + 1]
                inside = 0
                for p in range(first, last):
                    if set_codes[p] >= a and set_codes[p] <= b:
                        inside += 1
                share[i] *= inside / (last - first)
    return float(share.sum())
