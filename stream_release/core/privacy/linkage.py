"""The linkages of individuals to sensitive values, and their update by one release
(Wong et al. 2010, Lemma 4 and §7): the history's type and the merge of a release into it.

For individual o and sensitive value s the history is ``(log_p, links)``: the log of the
running product ``P(o,s) = prod_j (1 - n_{j,s}/n_j)`` over the releases whose group containing
o held s (Lemma 4), and the number of such releases. That is enough to evaluate every strategy
(Wong et al. 2010, Theorem 1, §6.1, §6.2). Values are known by a *global value id*: the index
into the store's append-only value dictionary.

The update: every published individual is linked to every value of its group (whatever its
own value); its entry for value s gains the factor ``log1p(-n(G,s)/|G|)`` and one more linked
release. Old and new entries are both sorted by global value id, so the merge is linear.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numba import njit
from numpy.typing import NDArray

_Scalar = TypeVar("_Scalar", bound=np.generic)


@dataclass(frozen=True, eq=False)
class HistoryRows:
    """History of a list of individuals in CSR form.

    ``indptr`` (n+1,) int64: entries of individual i are ``indptr[i]:indptr[i+1]``.
    ``value`` (m,) int32 global value ids (distinct within an individual, ascending),
    ``log_p`` (m,) float64 <= 0, ``links`` (m,) int32 >= 1.
    """

    indptr: NDArray[np.int64]
    value: NDArray[np.int32]
    log_p: NDArray[np.float64]
    links: NDArray[np.int32]

    @classmethod
    def empty(cls, n: int) -> HistoryRows:
        return cls(
            np.zeros(n + 1, np.int64),
            np.zeros(0, np.int32),
            np.zeros(0, np.float64),
            np.zeros(0, np.int32),
        )

    @property
    def n_individuals(self) -> int:
        return int(self.indptr.shape[0] - 1)

    @property
    def n_entries(self) -> int:
        return int(self.value.shape[0])

    def owner(self) -> NDArray[np.int64]:
        """(m,) index of the individual each entry belongs to."""
        return np.repeat(np.arange(self.n_individuals, dtype=np.int64), np.diff(self.indptr))

    def take(self, rows: NDArray[np.int64]) -> HistoryRows:
        """The history of individuals ``rows`` (row i for ``rows[i]``)."""
        everything = np.arange(self.n_entries, dtype=np.int64)
        indptr, at = gather_rows(everything, self.indptr[rows], np.diff(self.indptr)[rows])
        return HistoryRows(indptr, self.value[at], self.log_p[at], self.links[at])


def gather_rows(
    entries: NDArray[_Scalar], starts: NDArray[np.int64], counts: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[_Scalar]]:
    """CSR of the rows ``entries[starts[i] : starts[i] + counts[i]]``, vectorised.

    Entry j of the output, in row i, comes from ``starts[i] + (j - indptr[i])``: one
    ``np.repeat`` of the per-row shift plus an ``arange``.
    """
    indptr = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=indptr[1:])
    total = int(indptr[-1])
    src = np.repeat(starts - indptr[:-1], counts) + np.arange(total, dtype=np.int64)
    return indptr, entries[src]


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
