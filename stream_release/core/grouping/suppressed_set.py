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
  bound: [WFLWX10] Theorem 1's ratio infinite), whatever value they hold now. Its inputs are the
  histories, which the public files and membership determine, the strategy and the cap;
* **decoys** (``D``, :func:`decoy_order`, :func:`decoy_count`): single rows of the snapshot
  taken before grouping, in an order that reads no value (the rows that plan the lowest
  ratios first, ties in a random order the caller keys with a secret), each whatever it holds,
  in a number that is a function of counts and public figures only: rows withheld are topped
  up to a set large enough to dilute one row of any value, and no decoy joins more of them;
  the set must then hold, or the release is refused. So the set's size does not depend on the
  withheld rows' values (had the decoys been taken *only when* the withheld rows alone fell
  short, a set larger than them would have said that one value holds a large share of them),
  and no decoy is constrained by its value (a decoy taken as a whole published group would
  be: a group of three holds no protected value, so it dilutes nothing);
* **unplaced** (``U``): rows no group could take after every try, a last one allowing groups
  past the cap (the grouping's own leftovers). Which rows these are depends on the values, as
  any grouping does; decoys are drawn for them as if they all held one value, the rest is
  grouped again, and no published count tells them apart from the decoys.

Permuting the values among the withheld rows and the decoys changes neither who they are, nor
the grouping of the other rows, nor the set's multiset: every published byte is the same.

The set's rule
--------------
The set keeps Theorem 1 of [WFLWX10] like a group. For every protected value ``s`` it holds,

.. math:: |S| \ge n(S,s) \cdot R(S,s), \qquad
          R(S,s) = \max\bigl(l (1 + \epsilon),\ \max_{o \in S \setminus W} \mathrm{plan}(o,s)\bigr)

with ``plan(o,s)`` the strategy's ratio for the pair (its base without history) and the safe
margin ``\epsilon`` of :data:`~stream_release.core.privacy.breach.RATIO_RTOL`. Every member not
withheld is held to its plan, as in a published group, so that its later releases stay on the
strategy's schedule; past the series' horizon the decoys drawn for withheld rows are held to
[WFLWX10] Theorem 1's bound ``\tilde n`` instead (their breach stays within ``1/l``, their budget
goes faster than planned), since a drawn set keeps a ratio near ``l`` far more surely than a plan's
``n_c``, which the protected values' frequencies come close to. A withheld member, whose
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

import numpy as np
from numpy.typing import NDArray

from stream_release.core.grouping.merge import renumber
from stream_release.core.grouping.requirements import Requirements, csr_rows
from stream_release.core.privacy.breach import RATIO_RTOL
from stream_release.errors import GuaranteeUnsatisfiable

__all__ = [
    "SPREAD",
    "SuppressedSet",
    "decoy_count",
    "decoy_order",
    "protect_suppressed_set",
    "withheld_for_history",
]


@dataclass(frozen=True, eq=False)
class SuppressedSet:
    """The suppressed rows of a release, as one more group.

    ``rows`` (m,) int64 ascending: every suppressed row; ``counts`` (V,) int64: rows per local
    value; ``ratio`` (V,) float64: ``R(S,s)`` per protected value held (0 elsewhere);
    ``keep_plan``: whether its members not withheld are held to their plan (else to Theorem
    1's bound).
    ``withheld`` (w,) int64: the members withheld for their history
    (:func:`withheld_for_history`); ``unplaced`` (u,): those no group could take; ``decoys``
    (d,): the decoys. ``exempt_row``, ``exempt_value`` (x,) int64: the pairs held to the
    per-release bound only (the withheld members' pairs for the protected values the set
    holds, and past the horizon the unplaced members'; local value codes);
    ``exempt_members`` (e,) ascending: the members with one. Only ``rows``, ``counts`` and
    ``ratio`` are functions of public knowledge and the set's multiset; the rest is kept
    private.
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
    keep_plan: bool = True

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
    """(n,) bool: the rows withheld for their history, whatever value they hold now: O(their
    entries).

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


SPREAD = 2.5
"""The smallest set holds :data:`SPREAD` times what one row of any value needs at the set's
target share (:func:`decoy_count`): decoys are drawn, not chosen, so their values spread around
the release's, and a small set strays far from it."""


def decoy_count(hard: int, alike: int, *, ratio: float, share_max: float) -> int:
    r"""How many decoys join the ``hard`` rows of the suppressed set: a function of counts and
    of figures the adversary has (never of the rows' values), so the number tells nothing of
    them.

    The set must keep every protected value's share at most ``1/ratio``. A decoy holds a
    value about as often as the release's rows do (``share_max``: the largest share of a
    protected value among them, which the snapshot's totals state). ``alike`` of the hard
    rows may hold one value (for the grouping's leftovers, all of them; the rows withheld for
    their history get 0: by the time a series passes its horizon they are many and hold
    varied values, and a set of them alone holds unless one value holds ``1/l`` of it). The
    decoys aim at a share ``1/(c \cdot ratio)``, halfway from the decoys' expected share to
    the limit (``c`` at most 2), so that their draw rarely takes the set past it:

    .. math:: m = \max\Bigl(N_{min} - hard,\ \frac{c \cdot ratio \cdot alike - hard}
                                                {1 - c \cdot ratio \cdot share\_max}\Bigr),
              \qquad N_{min} = SPREAD \, \frac{c \cdot ratio}{1 - c \cdot ratio \cdot share\_max}.

    ``0`` for no hard row. When the release's values leave no room (a share too close to
    ``1/ratio``, as a value protected near the limit of a plan's ratio is), the count is more
    than any release holds: every candidate becomes a decoy, and the set is then checked like
    any, the release refused when it fails.
    """
    if hard <= 0:
        return 0
    c = 2.0 if share_max <= 0 else min(2.0, 0.5 * (1.0 + 1.0 / (ratio * share_max)))
    room = 1.0 - c * ratio * share_max
    if room <= 0.0:
        return np.iinfo(np.int64).max // 4
    smallest = int(np.ceil(SPREAD * c * ratio / room))
    diluted = int(np.ceil(max(0.0, c * ratio * max(alike, 1) - hard) / room))
    return max(smallest - hard, diluted, 0)


def decoy_order(
    candidates: NDArray[np.bool_],
    requirements: Requirements,
    rng: np.random.Generator,
) -> NDArray[np.int64]:
    """The rows that may become decoys, in the order they are taken: O(n log n + entries).

    The ``candidates`` (n,) (the snapshot's rows not withheld for their history) by the largest
    ratio each plans for a protected value (the ``base`` without a higher requirement), then by
    the largest of its [WFLWX10] Theorem 1 ratios (``l`` without history), lowest first, so that a
    decoy raises the set's ratios as little as it can, whether it is held to its plan or to the
    bound; ties in the order of a permutation drawn from ``rng``, which the caller keys with a
    secret and the release's sequence (nobody without the key can tell who comes first, and
    the same people are not the first in every release). Reads no sensitive value: a decoy is
    taken for its place in this order, whatever it holds.

    Returns
    -------
    (c,) int64 row indexes.
    """
    rows = np.flatnonzero(candidates).astype(np.int64)
    at = np.arange(rows.shape[0])
    plan = np.full(rows.shape[0], requirements.base, dtype=np.float64)
    ptr, entries = csr_rows(requirements.ptr, rows)
    np.maximum.at(plan, np.repeat(at, np.diff(ptr)), requirements.ratio[entries])
    bound = np.zeros(rows.shape[0], dtype=np.float64)
    least_ptr, least_value, least = requirements.theorem_1()
    del least_value
    ptr, entries = csr_rows(least_ptr, rows)
    np.maximum.at(bound, np.repeat(at, np.diff(ptr)), least[entries])
    shuffled = rng.permutation(rows.shape[0])
    return rows[shuffled[np.lexsort((bound[shuffled], plan[shuffled]))]]


def protect_suppressed_set(
    sensitive: NDArray[np.int32],
    protected: NDArray[np.bool_],
    requirements: Requirements,
    group: NDArray[np.int64],
    withheld: NDArray[np.bool_],
    decoys: NDArray[np.bool_],
    *,
    floor: float,
    absent: NDArray[np.bool_] | None = None,
    value_floor: NDArray[np.float64] | None = None,
    keep_plan: bool = True,
) -> tuple[NDArray[np.int64], SuppressedSet]:
    """The rows ``group`` leaves ungrouped as the release's suppressed set, checked to be one
    more valid group (module docstring).

    Parameters
    ----------
    sensitive : (n,) int32 local value codes of the release's rows
    protected : (V,) bool over the local codes
    requirements : the plans of the release's pairs (base, and the rows' higher ratios)
    group : (n,) the grouping of every row not withheld nor a decoy, ``-1`` = not grouped
    withheld : (n,) bool, the rows withheld for their history (:func:`withheld_for_history`)
    decoys : (n,) bool, the rows taken as decoys (a prefix of :func:`decoy_order`)
    floor : ``l``: no protected value holds ``1/l`` of the set or more
    absent : (n,) bool, rows not in the snapshot (virtual candidates): never members
    value_floor : (V,) float64, the least ratio ``R(S,s)`` the set must hold for each value
        (safe margin included): a part of a release cut on shards holds what every part's
        members need, so that the union of the parts' sets, which an adversary sees as one
        set, holds it too
    keep_plan : inside the series' horizon (nobody may leave the schedule there): the members
        not withheld (decoys, unplaced rows) are held to their plan. Past it: the decoys to
        [WFLWX10] Theorem 1's bound only (they keep the global guarantee but spend their budget
        faster than planned), and the unplaced rows, which no group of the release could take, to
        the per-release bound, like the withheld

    Returns
    -------
    ``(group, suppressed)``: (n,) group per row (ids ``0..G-1``, ``-1`` = suppressed) and
    the suppressed set.

    Raises
    ------
    GuaranteeUnsatisfiable
        The set does not hold (names the ratio, never its counts: they would tell the
        withheld rows' values).
    """
    n, v = sensitive.shape[0], protected.shape[0]
    absent = absent if absent is not None else np.zeros(n, dtype=np.bool_)
    if np.any((withheld | decoys) & (group >= 0)):
        raise ValueError("a row withheld for its history, or a decoy, is in a group")
    member = (group < 0) & ~absent
    counts = np.bincount(sensitive[member], minlength=v).astype(np.int64)
    ratio = np.full(v, float(floor) * (1.0 + RATIO_RTOL), dtype=np.float64)
    if value_floor is not None:
        ratio = np.maximum(ratio, value_floor)
    exempt = withheld if keep_plan else withheld | (member & ~decoys)
    free = np.flatnonzero(member & ~exempt).astype(np.int64)
    if keep_plan:  # their plans, as in a group
        if free.size:
            ratio = np.maximum(ratio, requirements.base)
        _, entries = csr_rows(requirements.ptr, free)
        np.maximum.at(ratio, requirements.value[entries], requirements.ratio[entries])
    else:  # their [WFLWX10] Theorem 1 ratios, with the safe margin
        ptr, value, least = requirements.theorem_1()
        _, entries = csr_rows(ptr, free)
        np.maximum.at(ratio, value[entries], least[entries] * (1.0 + RATIO_RTOL))
    held = protected & (counts > 0)
    size = int(np.count_nonzero(member))
    short = held & (counts * ratio > size)
    if short.any():
        worst = int(np.flatnonzero(short)[np.argmax(ratio[short])])
        raise GuaranteeUnsatisfiable(
            f"the suppressed rows cannot be made safe: a protected value holds more of them "
            f"than the ratio {ratio[worst]:.4g} their members need allows; plan the series "
            "for its length (privacy.horizon with k_prime = horizon), protect only the values "
            "rare enough for its ratio (`stream-release plan` lists them), or add a "
            "population register",
            public=True,
        )
    out = group.copy()
    out[member] = -1
    out = renumber(out)
    held_values = np.flatnonzero(held).astype(np.int64)
    mine = np.flatnonzero(exempt & member).astype(np.int64)
    suppressed = SuppressedSet(
        rows=np.flatnonzero(member).astype(np.int64),
        counts=counts,
        ratio=np.where(held, ratio, 0.0),
        withheld=np.flatnonzero(withheld & member).astype(np.int64),
        unplaced=np.flatnonzero(member & ~withheld & ~decoys).astype(np.int64),
        decoys=np.flatnonzero(decoys & member).astype(np.int64),
        exempt_row=np.repeat(mine, held_values.shape[0]),
        exempt_value=np.tile(held_values, mine.shape[0]),
        exempt_members=mine if held_values.size else np.zeros(0, dtype=np.int64),
        keep_plan=keep_plan,
    )
    return out, suppressed
