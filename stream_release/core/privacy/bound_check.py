"""The check before a release (STYLE.md rule 2): every affected individual's breach
probability, recomputed from the merged history (Lemma 4 of [WFLWX10]) with a proven bound on
its rounding (:func:`~stream_release.core.privacy.breach.possibly_exceeds`); one that may
exceed ``1/l`` refuses the release (:func:`check_bound`). The pairs the suppressed set links
without holding them to the bound are exempt (:func:`exempt_entries`), and those past it
since (spent) are counted, not checked (:func:`spent_entries`).

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from stream_release.core.grouping.suppressed_set import SuppressedSet
from stream_release.core.privacy.breach import (
    bound_limit,
    breach_from_log_product,
    past_bound,
)
from stream_release.core.privacy.linkage import HistoryRows
from stream_release.core.privacy.strategy import Strategy
from stream_release.errors import GuaranteeUnsatisfiable

__all__ = [
    "check_bound",
    "check_sizes",
    "exempt_entries",
    "individual_breach",
    "spent_entries",
]


def spent_entries(
    lower: NDArray[np.float64], is_protected_entry: NDArray[np.bool_], strategy: Strategy
) -> NDArray[np.bool_]:
    """(m,) the protected entries past the bound since a release linked them at the bound
    (spent), given the entries' lower bounds (:func:`~stream_release.core.privacy.breach.
    breach_bounds`): kept out of ``breach.max`` and counted. Only the suppressed set's
    exemptions put a pair past the bound under a strategy that checks it; the localized
    baseline's breaches are its own and stay in ``breach.max``."""
    return is_protected_entry & strategy.uses_history & (lower > bound_limit(strategy.ell))


def check_bound(
    merged: HistoryRows,
    upper: NDArray[np.float64],
    checked: NDArray[np.bool_],
    committed: NDArray[np.int64],
    group: NDArray[np.int64],
    breach_all: NDArray[np.float64],
    strategy: Strategy,
) -> None:
    """Refuse the release if any ``checked`` entry (protected, linked now, not exempt) of
    ``merged`` may breach ``1/l``, given the entries' upper bounds ``upper``
    (:func:`~stream_release.core.privacy.breach.possibly_exceeds`); a strategy without
    history (the localized baseline) is reported, not refused."""
    if not (strategy.uses_history and merged.n_entries):
        return
    over = past_bound(upper, strategy.ell) & checked
    if over.any():
        row = int(committed[merged.owner()[np.flatnonzero(over)[0]]])
        where = "published" if group[row] >= 0 else "suppressed"
        raise GuaranteeUnsatisfiable(
            f"internal check failed: a {where} individual (row {row + 1}) would reach "
            f"breach probability {breach_all[row]:.6g}, which may exceed 1/l = "
            f"{1 / strategy.ell:.6g}; nothing was released"
        )


def exempt_entries(
    history: HistoryRows,
    rows: NDArray[np.int64],
    suppressed: SuppressedSet,
    value_of_local: NDArray[np.int64],
) -> NDArray[np.bool_]:
    """(m,) the merged entries (of table rows ``rows``) the suppressed set links without
    holding them to the bound (:class:`SuppressedSet` ``exempt_row``, ``exempt_value``)."""
    if suppressed.exempt_row.size == 0 or history.n_entries == 0:
        return np.zeros(history.n_entries, dtype=np.bool_)
    span = int(max(history.value.max(initial=0), value_of_local.max(initial=0))) + 1
    keys = rows[history.owner()] * span + history.value
    exempt = suppressed.exempt_row * span + value_of_local[suppressed.exempt_value]
    return np.isin(keys, exempt)


def individual_breach(history: HistoryRows, checked: NDArray[np.bool_]) -> NDArray[np.float64]:
    """(n,) each individual's largest breach probability over its ``checked`` entries
    (protected values, Lemma 4); 0 for an individual without one."""
    p = history.n_individuals
    out = np.zeros(p, dtype=np.float64)
    if history.n_entries == 0:
        return out
    prob = np.where(checked, breach_from_log_product(history.log_p), 0.0)
    filled = np.diff(history.indptr) > 0  # entries are grouped by individual (CSR)
    out[filled] = np.maximum.reduceat(prob, history.indptr[:-1][filled])
    return out


def check_sizes(sizes: NDArray[np.int64], min_group_size: int) -> None:
    """Refuse the release if a group of ``sizes`` (G,) is below ``min_group_size``."""
    if sizes.shape[0] and int(sizes.min()) < min_group_size:
        raise GuaranteeUnsatisfiable(
            f"internal check failed: a group of {int(sizes.min())} rows is below "
            f"min_group_size = {min_group_size}; nothing was released"
        )
