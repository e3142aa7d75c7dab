"""The ratios a release requires of its (row, value) pairs (Wong et al. 2010, Theorem 1 and §6).

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["Requirements", "csr_rows"]


@dataclass(frozen=True, eq=False)
class Requirements:
    """Ratios required of a release's (row, value) pairs: ``base`` for every protected value
    with no history, and a CSR over rows of the pairs that need more.

    ``ptr`` (n+1,) int64; ``value`` (m,) int32 local value codes (protected and present in the
    release); ``ratio`` (m,) float64 > base, ``inf`` = the row may not share a group with it.
    ``least_ptr`` (n+1,), ``least_value`` (h,), ``least`` (h,): [WFLWX10] Theorem 1's ratio of
    *every* (row, protected value present) pair with history, also those the strategy plans at the
    base (``None``: no history). The suppressed set needs these, not the plan.
    """

    base: float
    ptr: NDArray[np.int64]
    value: NDArray[np.int32]
    ratio: NDArray[np.float64]
    least_ptr: NDArray[np.int64] | None = None
    least_value: NDArray[np.int32] | None = None
    least: NDArray[np.float64] | None = None

    @classmethod
    def uniform(cls, base: float, n: int) -> Requirements:
        return cls(base, np.zeros(n + 1, np.int64), np.zeros(0, np.int32), np.zeros(0))

    def take(self, rows: NDArray[np.int64]) -> Requirements:
        """The requirements of ``rows`` (row ``i`` for ``rows[i]``): the same ratios for a
        table restricted to them."""
        ptr, at = csr_rows(self.ptr, rows)
        least: tuple[NDArray[Any] | None, ...] = (None, None, None)
        if self.least_ptr is not None and self.least_value is not None and self.least is not None:
            least_ptr, least_at = csr_rows(self.least_ptr, rows)
            least = (least_ptr, self.least_value[least_at], self.least[least_at])
        return Requirements(self.base, ptr, self.value[at], self.ratio[at], *least)

    def theorem_1(
        self,
    ) -> tuple[NDArray[np.int64], NDArray[np.int32], NDArray[np.float64]]:
        """``(ptr, value, ratio)``: [WFLWX10] Theorem 1's ratio of every pair with history, as a CSR
        over rows (empty when the release has no history)."""
        if self.least_ptr is None or self.least_value is None or self.least is None:
            n = self.ptr.shape[0] - 1
            return np.zeros(n + 1, np.int64), np.zeros(0, np.int32), np.zeros(0)
        return self.least_ptr, self.least_value, self.least

    def own_value_ratio(self, sensitive: NDArray[np.int32]) -> NDArray[np.float64]:
        """(n,) ratio each row requires for its own value (``base`` when no history)."""
        own = np.full(sensitive.shape[0], self.base)
        rows = np.repeat(np.arange(sensitive.shape[0]), np.diff(self.ptr))
        hit = self.value == sensitive[rows]
        own[rows[hit]] = np.maximum(own[rows[hit]], self.ratio[hit])
        return own


def csr_rows(
    ptr: NDArray[np.int64], rows: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """``rows`` of a CSR over rows (``ptr``), row ``i`` for ``rows[i]``: the new ``ptr`` and
    where each of its entries stands in the whole. (The history's ``gather_rows`` does the
    same, but ``core`` may not import ``history``.)"""
    counts = ptr[rows + 1] - ptr[rows]
    out = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=out[1:])
    return out, np.repeat(ptr[rows] - out[:-1], counts) + np.arange(int(out[-1]))
