"""Vectorised CSR helpers shared by the history stores: sorted pseudonym lookups, row
gathers and merges (no Python loop per individual or per entry)."""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stream_release.core.privacy.linkage import gather_rows
from stream_release.history.types import PSEUDONYM_DTYPE, argsort_pseudonyms

__all__ = [
    "find_from",
    "find_sorted",
    "gather_rows",
    "lookup_pseudonyms",
    "merge_rows",
    "pseudonym_words",
]


def lookup_pseudonyms(
    haystack: NDArray[np.bytes_], needles: NDArray[np.bytes_]
) -> NDArray[np.intp]:
    """Index of each needle in the strictly ascending ``haystack``, -1 where absent.

    The needles are sorted, found by one linear pass over both lists (:func:`find_sorted`,
    O(N + n) on the pseudonyms' 8-byte halves: a string ``searchsorted`` compared 16-byte
    strings n log N times), and the answers put back in the input order.
    """
    out = np.full(needles.shape[0], -1, dtype=np.intp)
    if haystack.shape[0] == 0 or needles.shape[0] == 0:
        return out
    order = argsort_pseudonyms(needles)
    out[order] = find_sorted(pseudonym_words(haystack), pseudonym_words(needles[order]))
    return out


def merge_rows(
    old_ps: NDArray[np.bytes_],
    old_indptr: NDArray[np.int64],
    old_entries: NDArray[np.void],
    new_ps: NDArray[np.bytes_],
    new_starts: NDArray[np.int64],
    new_counts: NDArray[np.int64],
    new_entries: NDArray[np.void],
    *,
    keep_empty: bool = False,
) -> tuple[NDArray[np.bytes_], NDArray[np.int64], NDArray[np.void]]:
    """The history ``(old_ps, old_indptr, old_entries)`` (pseudonyms strictly ascending) with
    the rows of ``new_ps`` (ascending, distinct) replaced.

    Old rows of the given individuals are dropped; new rows are inserted at their sorted place,
    except empty ones: an individual without entries is not stored (unless ``keep_empty``).
    Returns ``(pseudonyms, indptr, entries)``. O(N + n + M): one linear merge of the two
    ascending lists (:func:`_merge_order`), then gathers.
    """
    nonempty = np.ones(new_counts.shape[0], dtype=bool) if keep_empty else new_counts > 0
    from_new, index = _merge_order(pseudonym_words(old_ps), pseudonym_words(new_ps), nonempty)
    old_at, new_at = index[~from_new], index[from_new]
    ps = np.empty(index.shape[0], dtype=PSEUDONYM_DTYPE)
    ps[~from_new], ps[from_new] = old_ps[old_at], new_ps[new_at]
    starts = np.empty(index.shape[0], dtype=np.int64)
    starts[~from_new] = old_indptr[:-1][old_at]
    starts[from_new] = new_starts[new_at] + old_entries.shape[0]  # offsets into the pool below
    counts = np.empty(index.shape[0], dtype=np.int64)
    counts[~from_new] = np.diff(old_indptr)[old_at]
    counts[from_new] = new_counts[new_at]
    pool = np.concatenate([old_entries, new_entries])
    indptr, entries = gather_rows(pool, starts, counts)
    return ps, indptr, entries


def pseudonym_words(pseudonyms: NDArray[np.bytes_]) -> NDArray[np.uint64]:
    """(n, 2) uint64: each pseudonym's two 8-byte halves as big-endian numbers, so that the
    pairs compare as the bytes do."""
    arr = np.ascontiguousarray(pseudonyms, dtype=PSEUDONYM_DTYPE)
    return arr.view(">u8").reshape(-1, 2).astype(np.uint64)


@njit(cache=True, nogil=True)
def _merge_order(  # pragma: no cover - jit
    old: NDArray[np.uint64], new: NDArray[np.uint64], keep_new: NDArray[np.bool_]
) -> tuple[NDArray[np.bool_], NDArray[np.int64]]:
    """The merged list of the ascending ``old`` and ``new`` (pseudonyms as :func:`pseudonym_words`):
    per position, whether it comes from ``new`` and its index there or in ``old``. An old
    pseudonym that is also new is dropped; a new one is kept only where ``keep_new``."""
    n_old, n_new = old.shape[0], new.shape[0]
    from_new = np.empty(n_old + n_new, np.bool_)
    index = np.empty(n_old + n_new, np.int64)
    i = j = out = 0
    while i < n_old or j < n_new:
        if j == n_new:
            order = -1
        elif i == n_old:
            order = 1
        elif old[i, 0] != new[j, 0]:
            order = -1 if old[i, 0] < new[j, 0] else 1
        elif old[i, 1] != new[j, 1]:
            order = -1 if old[i, 1] < new[j, 1] else 1
        else:
            order = 0
        if order < 0:
            from_new[out], index[out] = False, i
            out += 1
            i += 1
            continue
        if keep_new[j]:
            from_new[out], index[out] = True, j
            out += 1
        if order == 0:  # the old row is replaced
            i += 1
        j += 1
    return from_new[:out], index[:out]


def find_sorted(haystack: NDArray[np.uint64], needles: NDArray[np.uint64]) -> NDArray[np.intp]:
    """Index in the strictly ascending ``haystack`` of each of the ascending ``needles``
    (pseudonyms as :func:`pseudonym_words`), -1 where absent: :func:`find_from` over the whole
    list, whose needles past the last pseudonym are absent."""
    out = np.full(needles.shape[0], -1, np.intp)
    if haystack.shape[0]:
        found, _ = find_from(haystack, needles, 0)
        out[: found.shape[0]] = found
    return out


@njit(cache=True, nogil=True)
def find_from(  # pragma: no cover - jit
    hay: NDArray[np.uint64], needles: NDArray[np.uint64], start: int
) -> tuple[NDArray[np.intp], int]:
    """Index in the ascending chunk ``hay`` of each of the ascending ``needles`` from
    ``start`` on, -1 where absent, up to the first needle above the chunk's last pseudonym;
    returns the indices and that needle's position (the next chunk's ``start``)."""
    out = np.full(needles.shape[0] - start, -1, np.intp)
    i, j = 0, start
    while j < needles.shape[0]:
        hi, lo = needles[j, 0], needles[j, 1]
        while i < hay.shape[0] and (hay[i, 0] < hi or (hay[i, 0] == hi and hay[i, 1] < lo)):
            i += 1
        if i == hay.shape[0]:
            break
        if hay[i, 0] == hi and hay[i, 1] == lo:
            out[j - start] = i
        j += 1
    return out[: j - start], j
