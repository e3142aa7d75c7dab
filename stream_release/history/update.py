"""The history update of one release (Wong et al. 2010, Lemma 4 and §7), as a compiled linear merge.

Every published individual is linked to every value of its group (whatever its own value): its
entry for value s gains the factor ``log1p(-n(G,s)/|G|)`` and one more linked release. Old and
new entries are both sorted by global value id, so the merge is linear.
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stream_release.history.types import HistoryRows


def merge_linkages(
    old: HistoryRows,
    rows: NDArray[np.int64],
    groups: NDArray[np.int64],
    pair_ptr: NDArray[np.int64],
    pair_value: NDArray[np.int64],
    pair_factor: NDArray[np.float64],
) -> HistoryRows:
    """New history of ``rows`` (old history row ``rows[i]``, in group ``groups[i]``).

    ``pair_ptr`` (G+1,) CSR over groups of their distinct values ``pair_value`` (global ids,
    ascending inside each group) and factors ``pair_factor = log1p(-n(G,s)/|G|)``.
    Returns the merged history, row i for ``rows[i]``.

    O(m + sum_i |values of groups[i]|): one linear merge per row of its old entries (m in all)
    with its group's values, both ascending.
    """
    indptr, value, log_p, links = _merge(
        old.indptr, old.value, old.log_p, old.links, rows, groups, pair_ptr, pair_value, pair_factor
    )
    return HistoryRows(indptr, value, log_p, links)


@njit(cache=True)
def _merge(  # pragma: no cover
    o_ptr: NDArray[np.int64],
    o_val: NDArray[np.int32],
    o_logp: NDArray[np.float64],
    o_links: NDArray[np.int32],
    rows: NDArray[np.int64],
    groups: NDArray[np.int64],
    p_ptr: NDArray[np.int64],
    p_val: NDArray[np.int64],
    p_fac: NDArray[np.float64],
) -> tuple[NDArray[np.int64], NDArray[np.int32], NDArray[np.float64], NDArray[np.int32]]:
    n = rows.shape[0]
    indptr = np.zeros(n + 1, np.int64)
    for i in range(n):  # pass 1: sizes of the unions
        a, a_end = o_ptr[rows[i]], o_ptr[rows[i] + 1]
        b, b_end = p_ptr[groups[i]], p_ptr[groups[i] + 1]
        k = 0
        while a < a_end or b < b_end:
            if b >= b_end or (a < a_end and o_val[a] < p_val[b]):
                a += 1
            elif a >= a_end or p_val[b] < o_val[a]:
                b += 1
            else:
                a += 1
                b += 1
            k += 1
        indptr[i + 1] = indptr[i] + k
    m = indptr[n]
    value = np.empty(m, np.int32)
    log_p = np.empty(m, np.float64)
    links = np.empty(m, np.int32)
    for i in range(n):  # pass 2: fill
        a, a_end = o_ptr[rows[i]], o_ptr[rows[i] + 1]
        b, b_end = p_ptr[groups[i]], p_ptr[groups[i] + 1]
        k = indptr[i]
        while a < a_end or b < b_end:
            if b >= b_end or (a < a_end and o_val[a] < p_val[b]):
                value[k] = o_val[a]
                log_p[k] = o_logp[a]
                links[k] = o_links[a]
                a += 1
            elif a >= a_end or p_val[b] < o_val[a]:
                value[k] = p_val[b]
                log_p[k] = p_fac[b]
                links[k] = 1
                b += 1
            else:
                value[k] = o_val[a]
                log_p[k] = o_logp[a] + p_fac[b]
                links[k] = o_links[a] + 1
                a += 1
                b += 1
            k += 1
    return indptr, value, log_p, links


def linked_entries(old: HistoryRows, new: HistoryRows) -> NDArray[np.bool_]:
    """(m,) the entries of ``new`` (row i = row i of ``old``) with more linked releases than
    the same (individual, value) has in ``old``, or none there: the pairs a release linked.
    O(m_old + m_new): one linear merge per row of its two ascending value lists."""
    return _linked(old.indptr, old.value, old.links, new.indptr, new.value, new.links)


@njit(cache=True)
def _linked(  # pragma: no cover - jit
    o_ptr: NDArray[np.int64],
    o_val: NDArray[np.int32],
    o_links: NDArray[np.int32],
    n_ptr: NDArray[np.int64],
    n_val: NDArray[np.int32],
    n_links: NDArray[np.int32],
) -> NDArray[np.bool_]:
    out = np.empty(n_val.shape[0], np.bool_)
    for r in range(n_ptr.shape[0] - 1):
        i, i_end = o_ptr[r], o_ptr[r + 1]
        for j in range(n_ptr[r], n_ptr[r + 1]):
            while i < i_end and o_val[i] < n_val[j]:
                i += 1
            before = o_links[i] if i < i_end and o_val[i] == n_val[j] else 0
            out[j] = n_links[j] > before
    return out
