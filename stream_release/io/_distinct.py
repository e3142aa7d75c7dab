"""Whether byte strings are all distinct: one compiled pass with an open-addressing hash set.

A snapshot's ids must be distinct. pyarrow's ``dictionary_encode`` of a million distinct ids
takes 0.2 s, a Python ``set`` of them 0.24 s; this pass over their bytes 0.09 s (ids
``p0`` .. ``p999999``, best of 3). Only the answer is needed in the normal case: a column
with a repeated id is then factorized as any other, and the error names both rows.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = ["all_distinct"]

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def all_distinct(data: NDArray[np.uint8], offsets: NDArray[np.integer]) -> bool:
    """Whether the strings ``data[offsets[i]:offsets[i + 1]]`` are pairwise different.

    ``offsets`` (n + 1,) non-decreasing, within ``data`` (pyarrow's binary or string layout).
    """
    return bool(_all_distinct(data, offsets.astype(np.int64, copy=False)))


@njit(cache=True, nogil=True)
def _all_distinct(data: Any, offsets: Any) -> bool:  # pragma: no cover - jit
    n = offsets.shape[0] - 1
    bits = 1
    while (1 << bits) < 2 * n:
        bits += 1
    mask = (1 << bits) - 1
    table = np.full(1 << bits, -1, np.int64)
    for i in range(n):
        lo, hi = offsets[i], offsets[i + 1]
        h = _FNV_OFFSET
        for k in range(lo, hi):  # FNV-1a
            h = (h ^ np.uint64(data[k])) * _FNV_PRIME
        slot = np.int64(h & np.uint64(mask))
        while table[slot] >= 0:
            j = table[slot]
            a, b = offsets[j], offsets[j + 1]
            if b - a == hi - lo:
                same = True
                for k in range(hi - lo):
                    if data[a + k] != data[lo + k]:
                        same = False
                        break
                if same:
                    return False
            slot = (slot + 1) & mask
        table[slot] = i
    return True
