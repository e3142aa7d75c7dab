"""Row helpers the mechanisms share: the exact bytes of each pseudonym, the distinct rows of a
matrix of codes or values.

Pure numpy; every mechanism gets its rows as an encoded table plus one fixed-width pseudonym per
row (:class:`~stream_release.mechanisms.base.Mechanism`).
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from stream_release.errors import InvalidParameter

__all__ = ["distinct_rows", "exact_bytes"]

_Cell = TypeVar("_Cell", bound=np.generic)


def exact_bytes(pseudonyms: NDArray[Any]) -> list[bytes]:
    """Each element's bytes at full width, in order.

    Parameters
    ----------
    pseudonyms : (n,) fixed-width bytes (``S``) array; indexing it (``bytes(arr[i])``) would
        drop trailing NUL bytes, so the rows are cut from the array's buffer instead

    Returns
    -------
    list of n bytes objects, each ``pseudonyms.dtype.itemsize`` long.

    Raises
    ------
    InvalidParameter
        ``pseudonyms`` is not fixed-width bytes.
    """
    if pseudonyms.dtype.kind != "S":
        raise InvalidParameter(
            f"pseudonyms: dtype {pseudonyms.dtype}, need fixed-width bytes (S16 keyed hashes)"
        )
    width = pseudonyms.dtype.itemsize
    raw = np.ascontiguousarray(pseudonyms).tobytes()
    return [raw[i * width : (i + 1) * width] for i in range(pseudonyms.shape[0])]


def distinct_rows(matrix: NDArray[_Cell]) -> tuple[NDArray[_Cell], NDArray[np.int64]]:
    """The distinct rows of ``matrix`` in lexicographic order, and each row's index among them.

    Parameters
    ----------
    matrix : (n, c) array with c >= 1 (codes or values; ``-0.0`` and ``0.0`` are equal rows
        but keep their sign: normalise first where the sign is published)

    Returns
    -------
    distinct : (G, c) the distinct rows, ascending by the first column, then the second, ...
    inverse : (n,) int64, row ``i`` equals ``distinct[inverse[i]]``
    """
    n = matrix.shape[0]
    if n == 0:
        return matrix, np.empty(0, dtype=np.int64)
    order = np.lexsort(matrix.T[::-1])
    ordered = matrix[order]
    new = np.ones(n, dtype=bool)
    new[1:] = np.any(ordered[1:] != ordered[:-1], axis=1)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse
