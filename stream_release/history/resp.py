"""The commit's ``MSET`` commands written straight into the Redis protocol (RESP2).

A commit of a million individuals sets a million keys. Through redis-py each key and each
history is a Python ``bytes`` argument, and its pipeline packs every command of the
transaction into one more copy before it sends the first byte: at 1M rows, 0.6 s and, with
the arguments, about 400 MiB at the commit's peak (tracemalloc, the worker's cut). Here one
``MSET`` of up to :data:`~stream_release.history.redis_store.CHUNK` keys is written from the
keys' bytes (:meth:`~stream_release.history.keys.RedisKeys.individual_codes`) and the
histories' packed entries by one compiled loop, sent, and dropped before the next.

RESP2, as Redis reads a command (https://redis.io/docs/latest/develop/reference/protocol-spec/):
an array ``*<count>\\r\\n`` of bulk strings ``$<length>\\r\\n<bytes>\\r\\n``, the command name
first.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

__all__ = ["mset_command"]


def mset_command(
    keys: NDArray[np.uint8],
    rows: NDArray[np.int64],
    indptr: NDArray[np.int64],
    data: NDArray[np.uint8],
    item_size: int,
) -> NDArray[np.uint8]:
    """``MSET key value ...`` for the individuals ``rows`` (at least one), as RESP2 bytes.

    Parameters
    ----------
    keys : (n, width) uint8, each individual's key (:meth:`RedisKeys.individual_codes`)
    rows : (m,) int64, the individuals to set, in the order of the command
    indptr : (n + 1,) int64, individual ``i``'s entries are ``indptr[i]:indptr[i + 1]``
    data : (indptr[-1] * item_size,) uint8, the entries' bytes
    item_size : bytes per entry

    Raises
    ------
    ValueError
        No rows, a row outside ``keys``, or arrays of lengths that do not fit together.
    """
    if keys.ndim != 2 or rows.ndim != 1 or indptr.shape != (keys.shape[0] + 1,):
        raise ValueError(
            f"keys {keys.shape}, rows {rows.shape} and indptr {indptr.shape} do not fit: "
            "one key per individual and indptr one longer"
        )
    if rows.size == 0 or rows.min() < 0 or rows.max() >= keys.shape[0]:
        raise ValueError(f"rows must name between 1 and all of the {keys.shape[0]} keys")
    if indptr[0] != 0 or np.any(np.diff(indptr) < 0) or data.size != indptr[-1] * item_size:
        raise ValueError(
            f"indptr must start at 0 and not decrease, and data hold {item_size} bytes per "
            f"entry: {data.size} bytes for {indptr[-1]} entries"
        )
    return _mset(np.ascontiguousarray(keys), rows, indptr, data, item_size)


@njit(cache=True)
def _digits(value: int) -> int:  # pragma: no cover - jit
    """Decimal digits of ``value`` >= 0."""
    count = 1
    while value >= 10:
        value //= 10
        count += 1
    return count


@njit(cache=True)
def _header(out: NDArray[Any], at: int, mark: int, value: int) -> int:  # pragma: no cover - jit
    """``<mark><value>\\r\\n`` written at ``at``; the offset after it."""
    out[at] = mark
    width = _digits(value)
    for i in range(width):
        out[at + width - i] = 48 + value % 10
        value //= 10
    at += width + 1
    out[at] = 13
    out[at + 1] = 10
    return at + 2


@njit(cache=True)
def _mset(  # pragma: no cover - jit
    keys: NDArray[Any],
    rows: NDArray[Any],
    indptr: NDArray[Any],
    data: NDArray[Any],
    item_size: int,
) -> NDArray[np.uint8]:
    width = keys.shape[1]
    m = rows.shape[0]
    size = 1 + _digits(2 * m + 1) + 2 + 4 + 6  # *<count>\r\n $4\r\n MSET\r\n
    per_key = 1 + _digits(width) + 2 + width + 2
    for i in range(m):
        length = (indptr[rows[i] + 1] - indptr[rows[i]]) * item_size
        size += per_key + 1 + _digits(length) + 2 + length + 2
    out = np.empty(size, np.uint8)
    at = _header(out, 0, 42, 2 * m + 1)  # '*'
    at = _header(out, at, 36, 4)  # '$'
    for c in (77, 83, 69, 84):  # MSET
        out[at] = c
        at += 1
    out[at] = 13
    out[at + 1] = 10
    at += 2
    for i in range(m):
        r = rows[i]
        at = _header(out, at, 36, width)
        out[at : at + width] = keys[r]
        at += width
        out[at] = 13
        out[at + 1] = 10
        at += 2
        lo, hi = indptr[r] * item_size, indptr[r + 1] * item_size
        at = _header(out, at, 36, hi - lo)
        out[at : at + hi - lo] = data[lo:hi]
        at += hi - lo
        out[at] = 13
        out[at + 1] = 10
        at += 2
    return out
