r"""The rows a release withholds, made safe as one more group.

Suppression hides a row's QIDs and value, not the fact that the row was in the snapshot. An
adversary who knows who is in a snapshot and how many rows hold each value (the published
counts plus the snapshot's totals) sees the suppressed rows as one more group, every QID
``*``: each suppressed individual is linked to each value ``s`` of that set with probability
``n(S,s) / |S|`` (Lemma 4 of [WFLWX10], one group).

Which rows are withheld
-----------------------
The same adversary may also know how the planner chooses what to withhold, and learn from it
what the set hides (the minimality attack of [WFWP07]). A rule that withholds a row because
*its own value* needs a larger group than any the release may form tells whoever recomputes
the histories from the public files that the row holds one of the values its history cannot
take: when there is one such value, the value itself. So no choice here reads a withheld
row's value:

* **withheld for their history** (``W``, :func:`withheld_for_history`): before grouping, the
  rows whose plan for *some* protected value of their history exceeds the cap (or is at the
  bound: Theorem 1's ratio infinite), whatever value they hold now. Its inputs are the
  histories, which the public files and membership determine, the strategy and the cap;
* **decoys** (``D``, :func:`decoy_order`): whole published groups, taken in an order that
  reads no value (the groups whose members plan the lowest ratios first, ties in a random
  order the caller keys with a secret), each taken whatever it holds, until the set is valid;
* **unplaced** (``U``): rows no group could take after every try (the grouping's own
  leftovers). Which rows these are depends on the values, as any grouping does; they join
  the set like decoys, and no published count tells them apart from the decoys.

Permuting the values among the rows of ``W`` changes neither ``W``, nor the grouping of the
other rows, nor the decoys, nor the set's multiset: every published byte is the same.

The set's rule
--------------
The set keeps Theorem 1 of [WFLWX10] like a group. For every protected value ``s`` it holds,

.. math:: |S| \ge n(S,s) \cdot R(S,s), \qquad
          R(S,s) = \max\bigl(l (1 + \epsilon),\ \max_{o \in S \setminus W} \mathrm{plan}(o,s)\bigr)

with ``plan(o,s)`` the strategy's ratio for the pair (its base without history) and the safe
margin ``\epsilon`` of :data:`~stream_release.core.privacy.breach.RATIO_RTOL`. Every member not
withheld is held to its plan, as in a published group, so that its later releases stay on the
strategy's schedule (a set that kept only Theorem 1's bound would spend a new member's whole
budget for a value in one release, and withhold it from then on). A withheld member, whose
plan for some value the release cannot meet, is held to the **per-release** bound: every
protected value holds less than ``1/l`` of the set, so this release alone links it to no
value with probability ``1/l`` or more. Its pairs for the set's protected values are
*exempt* from the check before release; those that pass ``1/l`` are counted (``breach.spent``).
Under a setting planned for the series' length (``[privacy] horizon``) nobody is withheld
inside the horizon: every linkage, in a group or in the set, meets its plan, and no plan
exceeds the cap before the horizon's end.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
.. [WFWP07] R. C.-W. Wong, A. W.-C. Fu, K. Wang, J. Pei. Minimality Attack in Privacy
   Preserving Data Publishing. VLDB 2007.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stream_release.core.grouping.merge import renumber
from stream_release.core.grouping.requirements import Requirements, csr_rows
from stream_release.core.privacy.breach import RATIO_RTOL
from stream_release.errors import GuaranteeUnsatisfiable

__all__ = [
    "SuppressedSet",
    "decoy_order",
    "protect_suppressed_set",
    "withheld_for_history",
]


@dataclass(frozen=True, eq=False)
class SuppressedSet:
    """The suppressed rows of a release, as one more group.

    ``rows`` (m,) int64 ascending: every suppressed row; ``counts`` (V,) int64: rows per local
    value; ``ratio`` (V,) float64: ``R(S,s)`` per protected value held (0 elsewhere).
    ``withheld`` (w,) int64: the members withheld for their history
    (:func:`withheld_for_history`); ``unplaced`` (u,): those no group could take; ``decoys``
    (d,): the members taken from published groups. ``exempt_row``, ``exempt_value`` (x,)
    int64: the pairs held to the per-release bound only (the withheld members' pairs for the
    protected values the set holds; local value codes); ``exempt_members`` (e,) ascending:
    the members with one. Only ``rows``, ``counts`` and ``ratio`` are functions of public
    knowledge and the set's multiset; the rest is kept private.
    """

    rows: NDArray[np.int64]
    counts: NDArray[np.int64]
    ratio: NDArray[np.float64]
    withheld: NDArray[np.int64]
    unplaced: NDArray[np.int64]
    decoys: NDArray[np.int64]
    exempt_row: NDArray[np.int64]
    exempt_value: NDArray[np.int64]
    exempt_members: NDArray[np.int64]

    @property
    def size(self) -> int:
        return int(self.rows.shape[0])

    def share_max(self, protected: NDArray[np.bool_]) -> float:
        """The largest share ``n(S,s)/|S|`` of a protected value (0 for an empty set)."""
        if self.size == 0:
            return 0.0
        return float(np.where(protected, self.counts, 0).max(initial=0)) / self.size


def withheld_for_history(
    n_rows: int,
    owner: NDArray[np.int64],
    plan: NDArray[np.float64],
    *,
    cap: float,
) -> NDArray[np.bool_]:
    """(n,) bool: the rows withheld for their history, whatever value they hold now.

    A row is withheld when the strategy's plan for one of its protected pairs with history
    exceeds ``cap`` (the largest group a release may form) or is infinite (at the bound:
    Theorem 1 of [WFLWX10]): a group holding that value could not take it, and whether it
    holds the value now is what the release must not tell. The rule reads only the pairs'
    plans, which follow from the histories, and an adversary who reads the public files and
    knows who is in each snapshot computes those too; it never reads a sensitive value
    (module docstring).

    Parameters
    ----------
    n_rows : the rows of the release (n)
    owner : (m,) int64 the row of each protected pair with history, in ``0..n-1``
    plan : (m,) float64 the strategy's ratio for each (``inf`` at the bound)
    cap : the group-size cap (:func:`~stream_release.core.grouping.partition.group_size_cap`)
    """
    out = np.zeros(n_rows, dtype=np.bool_)
    out[owner[plan > cap]] = True
    return out


def decoy_order(
    group: NDArray[np.int64],
    requirements: Requirements,
    absent: NDArray[np.bool_],
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    """The published groups that may join the suppressed set, in the order they join it.

    Never a group with an ``absent`` member (a virtual candidate: not in the snapshot, so never
    suppressed); the others by the largest ratio a member plans for any protected value (the
    ``base`` without a higher requirement), lowest first, so that a decoy raises the set's
    ratios as little as it can; ties in the order of a permutation drawn from ``rng``, which
    the caller keys with a secret and the release's sequence (the same people are not the
    first candidates in every release). Reads no sensitive value: a decoy is taken for its
    place in this order, whatever it holds.

    Returns
    -------
    (g,) int64 group ids.
    """
    n_groups = int(group.max(initial=-1)) + 1
    if n_groups == 0:
        return np.zeros(0, dtype=np.int64)
    grouped = group >= 0
    demand = np.full(n_groups, requirements.base, dtype=np.float64)
    rows = np.flatnonzero(grouped).astype(np.int64)
    ptr, entries = csr_rows(requirements.ptr, rows)
    np.maximum.at(demand, np.repeat(group[rows], np.diff(ptr)), requirements.ratio[entries])
    virtual = np.bincount(group[grouped & absent], minlength=n_groups) > 0
    shuffled = rng.permutation(n_groups).astype(np.int64)
    order = shuffled[np.argsort(demand[shuffled], kind="stable")]
    return order[~virtual[order]]


def protect_suppressed_set(
    sensitive: NDArray[np.int32],
    protected: NDArray[np.bool_],
    requirements: Requirements,
    group: NDArray[np.int64],
    withheld: NDArray[np.bool_],
    order: NDArray[np.int64],
    *,
    floor: float,
    absent: NDArray[np.bool_] | None = None,
    value_floor: NDArray[np.float64] | None = None,
) -> tuple[NDArray[np.int64], SuppressedSet]:
    """Make the rows ``group`` leaves ungrouped a valid set (module docstring), taking whole
    groups of ``order`` into it while it falls short.

    Parameters
    ----------
    sensitive : (n,) int32 local value codes of the release's rows
    protected : (V,) bool over the local codes
    requirements : the plans of the release's pairs (base, and the rows' higher ratios)
    group : (n,) the grouping of every row not withheld, ``-1`` = not grouped
    withheld : (n,) bool, the rows withheld for their history (:func:`withheld_for_history`)
    order : (g,) the groups that may become decoys, in their order (:func:`decoy_order`)
    floor : ``l``: no protected value holds ``1/l`` of the set or more
    absent : (n,) bool, rows not in the snapshot (virtual candidates): never members
    value_floor : (V,) float64, the least ratio ``R(S,s)`` the set must hold for each value
        (safe margin included): a part of a release cut on shards holds what every part's
        members need, so that the union of the parts' sets, which an adversary sees as one
        set, holds it too

    Returns
    -------
    ``(group, suppressed)``: (n,) group per row (ids ``0..G-1``, ``-1`` = suppressed) and
    the suppressed set.

    Raises
    ------
    GuaranteeUnsatisfiable
        Every group taken, the set still falls short (names the value).
    """
    n, v = sensitive.shape[0], protected.shape[0]
    absent = absent if absent is not None else np.zeros(n, dtype=np.bool_)
    if np.any(withheld & (group >= 0)):
        raise ValueError("a row withheld for its history is in a group")
    member = (group < 0) & ~absent
    counts = np.bincount(sensitive[member], minlength=v).astype(np.int64)
    ratio = np.full(v, float(floor) * (1.0 + RATIO_RTOL), dtype=np.float64)
    if value_floor is not None:
        ratio = np.maximum(ratio, value_floor)
    free = member & ~withheld
    if free.any():
        ratio = np.maximum(ratio, requirements.base)
    _, entries = csr_rows(requirements.ptr, np.flatnonzero(free).astype(np.int64))
    np.maximum.at(ratio, requirements.value[entries], requirements.ratio[entries])
    by_group = np.argsort(group, kind="stable")
    by_group = by_group[group[by_group] >= 0]
    g_ptr = np.zeros(int(group.max(initial=-1)) + 2, dtype=np.int64)
    np.cumsum(np.bincount(group[by_group], minlength=g_ptr.shape[0] - 1), out=g_ptr[1:])
    taken = _take_until_valid(
        np.ascontiguousarray(order, dtype=np.int64),
        g_ptr,
        by_group.astype(np.int64),
        np.ascontiguousarray(sensitive),
        np.ascontiguousarray(protected, dtype=np.bool_),
        requirements.ptr,
        requirements.value,
        requirements.ratio,
        float(requirements.base),
        counts,
        ratio,
        int(np.count_nonzero(member)),
        bool(free.any()),
    )
    if taken < 0:
        size = int(np.count_nonzero(member)) + int(g_ptr[-1])
        terms = np.where(protected & (counts > 0), counts * ratio, 0.0)
        worst = int(np.argmax(terms))
        raise GuaranteeUnsatisfiable(
            f"the suppressed rows cannot be made safe: with every published group taken as "
            f"decoys, {int(counts[worst])} of the {size} rows would hold one protected value, "
            f"which needs a ratio of {ratio[worst]:.4g}; plan the series for its length "
            "(privacy.horizon with k_prime = horizon), protect only the values rare enough for "
            "its ratio (`stream-release plan` lists them), or add a population register",
            public=True,
        )
    decoy_groups = order[:taken]
    decoy = np.zeros(n, dtype=np.bool_)
    if taken:
        decoy[by_group[csr_rows(g_ptr, decoy_groups)[1]]] = True
    members = member | decoy
    out = group.copy()
    out[members] = -1
    out = renumber(out)
    rows = np.flatnonzero(members).astype(np.int64)
    held = np.flatnonzero(protected & (counts > 0)).astype(np.int64)
    mine = np.flatnonzero(withheld & members).astype(np.int64)
    exempt_row = np.repeat(mine, held.shape[0])
    exempt_value = np.tile(held, mine.shape[0])
    suppressed = SuppressedSet(
        rows=rows,
        counts=counts,
        ratio=np.where(protected & (counts > 0), ratio, 0.0),
        withheld=mine,
        unplaced=np.flatnonzero(member & ~withheld).astype(np.int64),
        decoys=np.flatnonzero(decoy).astype(np.int64),
        exempt_row=exempt_row,
        exempt_value=exempt_value,
        exempt_members=mine if held.size else np.zeros(0, dtype=np.int64),
    )
    return out, suppressed


@njit(cache=True, nogil=True)
def _take_until_valid(  # pragma: no cover - jit
    order: NDArray[np.int64],
    g_ptr: NDArray[np.int64],
    g_rows: NDArray[np.int64],
    sensitive: NDArray[Any],
    protected: NDArray[np.bool_],
    req_ptr: NDArray[np.int64],
    req_value: NDArray[Any],
    req_ratio: NDArray[np.float64],
    base: float,
    counts: NDArray[np.int64],
    ratio: NDArray[np.float64],
    size: int,
    free: bool,
) -> int:
    """How many groups of ``order`` must join the set (``counts``, ``ratio``, ``size``; the
    first two updated in place) before ``size >= counts[s] * ratio[s]`` for every protected
    value held; ``-1`` if all of them are not enough. Each group joins whole, whatever it
    holds (the module docstring: a decoy is chosen for its place in the order)."""
    n_values = counts.shape[0]
    if _holds(counts, ratio, protected, size):
        return 0
    for t in range(order.shape[0]):
        g = order[t]
        for k in range(g_ptr[g], g_ptr[g + 1]):
            r = g_rows[k]
            counts[sensitive[r]] += 1
            size += 1
            for e in range(req_ptr[r], req_ptr[r + 1]):
                if req_ratio[e] > ratio[req_value[e]]:
                    ratio[req_value[e]] = req_ratio[e]
        if not free:  # a decoy is held to its plan: the base, at least
            for s in range(n_values):
                if ratio[s] < base:
                    ratio[s] = base
            free = True
        if _holds(counts, ratio, protected, size):
            return t + 1
    return -1


@njit(cache=True, nogil=True)
def _holds(  # pragma: no cover - jit
    counts: NDArray[np.int64],
    ratio: NDArray[np.float64],
    protected: NDArray[np.bool_],
    size: int,
) -> bool:
    for s in range(counts.shape[0]):
        if protected[s] and counts[s] > 0 and counts[s] * ratio[s] > size:
            return False
    return True
