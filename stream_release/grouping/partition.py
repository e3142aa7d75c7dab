"""Form the groups of one release: the public entry point of the grouping.

The group-size constraint (paper 003, Theorem 1 and §6) arrives as a base ratio plus the
per-individual requirements that exceed it (:class:`Requirements`); the compiled passes are
in :mod:`stream_release.grouping.kernels`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from stream_release.grouping.kernels import group_rows
from stream_release.table import EncodedTable


@dataclass(frozen=True, eq=False)
class Requirements:
    """Ratios required of a release's (row, value) pairs: ``base`` for every protected value
    with no history, and a CSR over rows of the pairs that need more.

    ``ptr`` (n+1,) int64; ``value`` (m,) int32 local value codes (protected and present in the
    release); ``ratio`` (m,) float64 > base, ``inf`` = the row may not share a group with it.
    """

    base: float
    ptr: NDArray[np.int64]
    value: NDArray[np.int32]
    ratio: NDArray[np.float64]

    @classmethod
    def uniform(cls, base: float, n: int) -> Requirements:
        return cls(base, np.zeros(n + 1, np.int64), np.zeros(0, np.int32), np.zeros(0))

    def own_value_ratio(self, sensitive: NDArray[np.int32]) -> NDArray[np.float64]:
        """(n,) ratio each row requires for its own value (``base`` when no history)."""
        own = np.full(sensitive.shape[0], self.base)
        rows = np.repeat(np.arange(sensitive.shape[0]), np.diff(self.ptr))
        hit = self.value == sensitive[rows]
        own[rows[hit]] = np.maximum(own[rows[hit]], self.ratio[hit])
        return own


def form_groups(
    table: EncodedTable,
    protected: NDArray[np.bool_],
    requirements: Requirements,
    *,
    min_group_size: int,
    eligible: NDArray[np.bool_],
    max_group_factor: float = 4.0,
    insertion_window: int = 32,
) -> NDArray[np.int64]:
    """Group the ``eligible`` rows of ``table`` so that every group is valid.

    Parameters
    ----------
    table : the encoded release
    protected : (V,) bool over ``table.sensitive_values``
    requirements : base ratio and per-row exceptions
    min_group_size : k-anonymity floor, >= 1
    eligible : (n,) bool; other rows are suppressed
    max_group_factor : a group is never grown beyond this multiple of ``max(base, k)`` rows
    insertion_window : how far (in k-d order) a leftover row looks for a group to join

    Returns
    -------
    (n,) int64 group id per row, ``0..G-1`` in k-d order; ``-1`` = suppressed.
    """
    sizes = np.array([a.size for a in table.attributes], dtype=np.float64)
    norm = np.where(sizes > 1, 1.0 / np.maximum(sizes - 1, 1), 0.0)
    cap = math.ceil(max(requirements.base, min_group_size) * max_group_factor)
    perm = np.flatnonzero(eligible).astype(np.int64)
    group, _ = group_rows(
        np.ascontiguousarray(table.qid),
        np.ascontiguousarray(table.sensitive),
        np.ascontiguousarray(protected, dtype=np.bool_),
        float(requirements.base),
        int(min_group_size),
        int(cap),
        norm,
        requirements.ptr,
        requirements.value,
        requirements.ratio,
        perm,
        int(insertion_window),
    )
    return group
