"""How far a group's QID box spreads: the rows as the compiled passes see them, and the NCP
arithmetic of a box (numba). Private: the kernels trust their inputs.

The grouping's passes (:mod:`stream_release.core.grouping.passes`) read the rows through one
:class:`KernelTable` and measure a group by its QID box: per attribute the code range of its
members and the published extent of that range (:func:`extent`), weighted by the attribute's
scale (:func:`growth`).

Notes
-----
The helpers take arrays, not the :class:`KernelTable`: numba takes a reference to every array
of a tuple argument at each call of a function it does not inline (seen in the generated
code), and these run once per candidate row.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = ["KernelTable", "extent", "growth"]


class KernelTable(NamedTuple):
    """The input table of the compiled passes (int-encoded, :mod:`stream_release.core.table`).

    ``qid`` (n, d) int32 codes; ``sens`` (n,) int32 local value codes; ``norm`` (d,) float64
    the scale of one code step per attribute
    (:func:`~stream_release.core.grouping.partition.attribute_scale`); ``height`` (d,) int64,
    ``span_lo``, ``span_hi`` (d, H, C) int64: the levels of each attribute's hierarchy and the
    leaf ranges of its nodes (:func:`~stream_release.core.grouping.partition.hierarchy_spans`).
    """

    qid: NDArray[np.int32]
    sens: NDArray[np.int32]
    norm: NDArray[np.float64]
    height: NDArray[np.int64]
    span_lo: NDArray[np.int64]
    span_hi: NDArray[np.int64]


@njit(cache=True)
def extent(
    a: int,
    lo: int,
    hi: int,
    height: NDArray[np.int64],
    span_lo: NDArray[np.int64],
    span_hi: NDArray[np.int64],
) -> int:
    """Codes covered by the published value of code range ``[lo, hi]``, minus one.

    Numeric and set attributes (``height[a] == 0``) publish the range itself; a hierarchy
    attribute publishes the lowest common ancestor, whose leaves form the code range
    ``span_lo[a, h, c] .. span_hi[a, h, c]`` at its level ``h`` (depth-first leaf order).
    (A precomputed (leaves x leaves) table was measured 3x slower: cache misses.)
    """
    if height[a] == 0:
        return hi - lo
    for h in range(height[a]):
        if span_lo[a, h, lo] == span_lo[a, h, hi]:
            return int(span_hi[a, h, lo] - span_lo[a, h, lo])
    return int(span_hi[a, height[a] - 1, lo] - span_lo[a, height[a] - 1, lo])


@njit(cache=True)
def growth(
    row: int,
    qid: NDArray[np.int32],
    norm: NDArray[np.float64],
    height: NDArray[np.int64],
    span_lo: NDArray[np.int64],
    span_hi: NDArray[np.int64],
    lo: NDArray[np.int64],
    hi: NDArray[np.int64],
    extents: NDArray[np.int64],
) -> float:
    """Growth of the group's NCP (sum over attributes) if ``row`` joins it.

    ``lo``, ``hi`` (d,) are the group's code range per attribute and ``extents[a]`` its current
    :func:`extent` on attribute a (cached by the caller).
    """
    g = 0.0
    for a in range(qid.shape[1]):
        c = qid[row, a]
        if c < lo[a]:
            g += (extent(a, c, hi[a], height, span_lo, span_hi) - extents[a]) * norm[a]
        elif c > hi[a]:
            g += (extent(a, lo[a], c, height, span_lo, span_hi) - extents[a]) * norm[a]
    return g
