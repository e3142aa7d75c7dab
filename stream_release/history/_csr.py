"""Vectorised CSR helpers shared by the history stores: sorted pseudonym lookups, row
gathers and merges (no Python loop per individual or per entry)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from stream_release.history.types import PSEUDONYM_DTYPE, argsort_pseudonyms, gather_rows

__all__ = ["gather_rows", "lookup_pseudonyms", "merge_rows"]


def lookup_pseudonyms(
    haystack: NDArray[np.bytes_], needles: NDArray[np.bytes_]
) -> NDArray[np.intp]:
    """Index of each needle in the strictly ascending ``haystack``, -1 where absent.

    The needles are searched in ascending order (``searchsorted`` is several times faster on
    sorted needles) and the answers put back in the input order.
    """
    out = np.full(needles.shape[0], -1, dtype=np.intp)
    if haystack.shape[0] == 0 or needles.shape[0] == 0:
        return out
    order = argsort_pseudonyms(needles)
    ordered = needles[order]
    pos = np.searchsorted(haystack, ordered)
    clipped = np.minimum(pos, haystack.shape[0] - 1)
    hit = haystack[clipped] == ordered
    out[order[hit]] = clipped[hit]
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

    Old rows of the given individuals are dropped; new rows are inserted at their sorted place
    (``searchsorted`` into the kept old pseudonyms), except empty ones: an individual without
    entries is not stored (unless ``keep_empty``). Returns ``(pseudonyms, indptr, entries)``.
    """
    keep = np.ones(old_ps.shape[0], dtype=bool)
    replaced = lookup_pseudonyms(old_ps, new_ps)
    keep[replaced[replaced >= 0]] = False
    kept_ps = old_ps[keep]
    kept_starts = old_indptr[:-1][keep]
    kept_counts = np.diff(old_indptr)[keep]
    nonempty = np.ones(new_counts.shape[0], dtype=bool) if keep_empty else new_counts > 0
    add_ps = new_ps[nonempty]
    add_starts = new_starts[nonempty] + old_entries.shape[0]  # offsets into the pool below
    add_counts = new_counts[nonempty]
    n_kept, n_add = kept_ps.shape[0], add_ps.shape[0]
    add_pos = np.searchsorted(kept_ps, add_ps) + np.arange(n_add)
    is_add = np.zeros(n_kept + n_add, dtype=bool)
    is_add[add_pos] = True
    kept_pos = np.flatnonzero(~is_add)
    ps = np.empty(n_kept + n_add, dtype=PSEUDONYM_DTYPE)
    ps[add_pos], ps[kept_pos] = add_ps, kept_ps
    starts = np.empty(n_kept + n_add, dtype=np.int64)
    starts[add_pos], starts[kept_pos] = add_starts, kept_starts
    counts = np.empty(n_kept + n_add, dtype=np.int64)
    counts[add_pos], counts[kept_pos] = add_counts, kept_counts
    pool = np.concatenate([old_entries, new_entries])
    indptr, entries = gather_rows(pool, starts, counts)
    return ps, indptr, entries
