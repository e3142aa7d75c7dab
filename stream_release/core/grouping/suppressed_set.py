r"""The suppressed rows of a release, made safe as one more group.

Suppression hides a row's QIDs and value, not the fact that the row was in the snapshot. An
adversary who knows who is in a snapshot and how many rows hold each value (the published
counts plus the snapshot's totals) sees the suppressed rows as one more group, every QID
``*``: each suppressed individual is linked to each value ``s`` of that set with probability
``n(S,s) / |S|`` (Lemma 4 of [WFLWX10], one group). Left alone, the set is made of exactly
the rows no group could take, which hold protected values far more often than the rest: on
a real panel a suppressed row held a protected value with probability 0.68.

So the set ``S`` keeps the bound like a group (Theorem 1 of [WFLWX10]):

.. math:: |S| \ge n(S,s) \cdot R(S,s) \quad\text{for every protected } s,
          \qquad R(S,s) = \max(l, \max_{o \in S} \tilde n(o,s)) (1 + \epsilon),

with ``\tilde n(o,s)`` Theorem 1's ratio of each member's history for ``s`` and the safe margin
``\epsilon`` of :data:`~stream_release.core.privacy.breach.RATIO_RTOL`: every protected value holds
less than ``1/l`` of the set, and no member's breach passes ``1/l``. The set is not a planned
group: it keeps the bound, not the strategy's plan (a planned group's ratio, e.g.
constant-ratio's ``n_c``, would make it several times larger). Where the rows that
could not be grouped do not meet it, *decoys* join them: whole published groups, then single
rows whose groups stay valid without them, then single rows with the rest of the release
grouped again without them; each round is kept only if it lowers the shortfall. The
suppressed set is then linked like a group: its linkages go into every member's history
(:func:`stream_release.pipeline.plan.plan_release`).

What cannot be protected
------------------------
A pair ``(o, s)`` is *at the bound* once ``P(o,s) <= 1 - 1/l`` (Theorem 1's ratio infinite).
A row is *forced* into the set when its own value needs a larger group than the release may
form (``eligible`` false), or when no group can take it (*unplaced*, below); a forced row at
the bound for its own value is *exhausted*. A pair is *spent* when it is at the bound, or a
forced member's and its Theorem 1 ratio exceeds the cap
(:func:`~stream_release.core.grouping.partition.group_size_cap`) by more than the safe margin:
meeting it would take a set of that ratio times its holders. Exactly the spent pairs of
forced members for values a forced member holds are *exempt*: the set links them without
holding them to the bound. Every other pair of every member is held, its requirement raising
the set's ratio for its value, however large.

* A spent pair for a value of the set that is not exempt is *stranded*: the rows that bring
  the two together and are not forced are placed into published groups (``place_rows``:
  every group, swaps, regrouping with the nearest groups), else grouped among the set's
  other rows; a row no group takes is *unplaced* and counts as forced from then on. A round
  of decoys that leaves a new row unplaced is undone.
* No decoy brings a value a member is spent for that the set does not hold, and none has a
  spent pair for a value of the set.

For the members with an exempt pair (``exempt_members``) the system still promises the
per-release share: every protected value is held by less than ``1/l`` of the set.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from stream_release.core.grouping.decoys import (
    GroupValid,
    PlaceRows,
    add_group_decoys,
    add_rehomed_decoys,
    add_row_decoys,
    choose_decoys,
)
from stream_release.core.grouping.merge import renumber
from stream_release.core.grouping.requirements import Requirements
from stream_release.core.grouping.set_state import SetState
from stream_release.errors import GuaranteeUnsatisfiable

__all__ = ["SuppressedSet", "protect_suppressed_set"]


@dataclass(frozen=True, eq=False)
class SuppressedSet:
    """The suppressed rows of a release, as one more group.

    ``rows`` (m,) int64 ascending: every suppressed row, decoys included; ``decoys`` (d,)
    int64: the rows taken from published groups; ``counts`` (V,) int64: rows per local value;
    ``ratio`` (V,) float64: ``R(S,s)`` per protected value present (0 elsewhere).
    ``exempt_row``, ``exempt_value`` (x,) int64: the pairs the set links without holding them
    to the bound (forced members' spent pairs for values a forced row holds; local value
    codes). ``exempt_members`` (e,) int64 ascending: the members with an exempt pair.
    ``forced`` (f,) int64: the members suppressed by their own value's history, and the
    ``unplaced`` ones no group could take; ``exhausted`` (among them): those at the bound for
    their own value.
    """

    rows: NDArray[np.int64]
    decoys: NDArray[np.int64]
    counts: NDArray[np.int64]
    ratio: NDArray[np.float64]
    exempt_row: NDArray[np.int64]
    exempt_value: NDArray[np.int64]
    exempt_members: NDArray[np.int64]
    forced: NDArray[np.int64]
    unplaced: NDArray[np.int64]
    exhausted: NDArray[np.int64]

    @property
    def size(self) -> int:
        return int(self.rows.shape[0])

    def share_max(self, protected: NDArray[np.bool_]) -> float:
        """The largest share ``n(S,s)/|S|`` of a protected value (0 for an empty set)."""
        if self.size == 0:
            return 0.0
        return float(np.where(protected, self.counts, 0).max(initial=0)) / self.size


GroupRows = Callable[[NDArray[np.bool_]], NDArray[np.int64]]
"""Groups the rows of an eligibility mask: (n,) group per row, ``-1`` = not grouped."""

DECOY_ROUNDS = 8
"""Rounds of "choose decoys, group the rest again" before whole groups are taken."""

DECOY_SLACK = 0.25
"""Decoys chosen beyond the shortfall, as a share of it: grouping the rest again leaves new
rows over, whose requirements can raise the set's target."""


def protect_suppressed_set(
    sensitive: NDArray[np.int32],
    protected: NDArray[np.bool_],
    requirements: Requirements,
    eligible: NDArray[np.bool_],
    group_rows: GroupRows,
    place_rows: PlaceRows,
    group_valid: GroupValid,
    *,
    cap: int,
    floor: float,
    absent: NDArray[np.bool_] | None = None,
    value_floor: NDArray[np.float64] | None = None,
    also_held: NDArray[np.bool_] | None = None,
    also_blocked: NDArray[np.bool_] | None = None,
    also_stranded: NDArray[np.bool_] | None = None,
) -> tuple[NDArray[np.int64], SuppressedSet]:
    """Group the ``eligible`` rows so that the suppressed ones form a valid group too.

    The rows are grouped (``group_rows``) and the stranded ones placed (``place_rows``, see the
    module docstring); while the suppressed set falls short, whole published groups join it
    (:func:`~stream_release.core.grouping.decoys.add_group_decoys`), then single rows whose
    groups stay valid without them
    (:func:`~stream_release.core.grouping.decoys.add_row_decoys`); if the set still falls short
    at the end, all of it is tried again with those rows first. If that is not enough, single
    rows are chosen among the grouped ones and the rest is grouped again without them
    (:data:`DECOY_ROUNDS` times at most): rows without a requirement above the base first (they
    raise no ratio of the set), in row order (the caller's rows are in keyed pseudonym order),
    each value no more often than the set's target size allows. Last, single rows whose groups
    do not stay valid without them join when ``place_rows`` puts the rest of their group into
    other groups (:func:`~stream_release.core.grouping.decoys.add_rehomed_decoys`).

    Parameters
    ----------
    sensitive : (n,) int32 local value codes of the release's rows
    protected : (V,) bool over the local codes
    requirements : the base ratio and each row's higher requirements (``inf`` = at the bound)
    eligible : (n,) bool, the rows that may be published (the others are *forced* into the set)
    group_rows : groups the rows of a mask (:func:`~stream_release.core.grouping.partition.
        form_groups` with the release's settings)
    place_rows : puts rows into existing groups (:func:`~stream_release.core.grouping.partition.
        place_in_groups` with the release's settings)
    group_valid : whether rows form a valid group (what a group left by a decoy must stay)
    cap : the largest group the release may form (:func:`~stream_release.core.grouping.partition.
        group_size_cap`): a forced row's pair whose Theorem 1 ratio exceeds it is spent
    floor : ``l``: no protected value holds more than ``1/l`` of the set
    absent : (n,) bool, rows that are not in the snapshot (virtual candidates,
        :mod:`~stream_release.core.grouping.virtual`): grouped when a group takes them, else left
        out; never members of the set nor decoys (an adversary who knows who is in the
        snapshot knows they are not suppressed). A group may be left with absent rows only:
        the caller drops those (:func:`~stream_release.core.grouping.virtual.trim_virtual`)
    value_floor : (V,) float64, the least ratio ``R(S,s)`` the set must hold for each value
        (safe margin included), whatever its members need: a part of a release cut on shards
        holds what every part's members need, so that the union of the parts' sets, which an
        adversary sees as one set, holds it too

    also_held : (V,) bool, the values the other parts' sets hold: a member spent for one of
        them is stranded as if this set held it (the union does)
    also_blocked : (V,) bool, values another part's forced member is spent for, which no
        forced member holds: the set keeps them out (their holders are placed into groups)
    also_stranded : (n,) bool, rows at the bound for a value the other parts' sets hold that
        no row of this part holds: placed into groups like a member stranded for a value of
        ``also_held``, never decoys

    Returns
    -------
    ``(group, suppressed)``: (n,) group per row (ids ``0..G-1``, ``-1`` = suppressed) and
    the suppressed set.

    Notes
    -----
    Whole groups come first: taking single rows and grouping the rest again leaves new rows
    over, and the rows whose histories need the largest groups are the likeliest to be left
    (on Adult's 12-release series the rounds of single rows alone grew one suppressed set to
    399 of 3,141 rows and refused another release; whole groups first: at most 4 %).

    Raises
    ------
    GuaranteeUnsatisfiable
        No choice of decoys makes the set valid (names the value).
    """
    forced = ~eligible
    absent = absent if absent is not None else np.zeros(sensitive.shape[0], dtype=np.bool_)
    if np.any(forced & absent):
        raise ValueError("a row both forced into the suppressed set and absent from the snapshot")

    def settle(
        group: NDArray[np.int64], decoys: NDArray[np.bool_]
    ) -> tuple[NDArray[np.int64], SetState]:
        """The set of ``group``'s ungrouped rows after placing the rows it may not keep:
        into the groups (``place_rows``), else into new groups formed with the set's other
        rows that are neither forced nor ``decoys``. A row no group takes is *unplaced*: from
        then on it counts as forced."""
        unplaced = np.zeros(sensitive.shape[0], dtype=np.bool_)
        state = SetState(
            sensitive, protected, requirements, group < 0, forced, cap, floor, absent,
            value_floor, also_held, also_blocked, also_stranded,
        )  # fmt: skip
        regrouped = False
        while True:  # each turn groups a row, or marks rows unplaced, or ends
            must = np.union1d(state.to_place(), np.flatnonzero(unplaced))
            rows = np.union1d(must, state.demanding())
            if rows.size == 0:
                break
            placed = place_rows(group, rows)
            if np.array_equal(placed, group) and not regrouped and must.size:
                regrouped = True
                placed = _group_among(group, state.member & ~forced & ~decoys, group_rows)
            if np.array_equal(placed, group):
                new = must[~unplaced[must]]
                if new.size == 0:
                    break  # the last try: no group takes any unplaced row as it stands
                unplaced[new] = True
            else:
                unplaced &= placed < 0
                group = placed
            state = SetState(
                sensitive,
                protected,
                requirements,
                group < 0,
                forced | unplaced,
                cap,
                floor,
                absent,
                value_floor,
                also_held,
                also_blocked,
                also_stranded,
            )
        state.unplaced = unplaced & state.member
        return group, state

    def add_decoys(state: SetState, group: NDArray[np.int64], rows_first: bool) -> None:
        """Decoys that leave nothing to group again: whole groups and rows their groups can
        spare, in either order."""
        if rows_first:
            add_row_decoys(state, group, group_valid)
        add_group_decoys(state, group)
        if not rows_first:
            add_row_decoys(state, group, group_valid)

    def attempt(
        first: NDArray[np.int64], rows_first: bool
    ) -> tuple[NDArray[np.int64], SetState, NDArray[np.bool_]]:
        chosen = np.zeros(sensitive.shape[0], dtype=np.bool_)
        group, state = settle(first, chosen)
        if state.shortfall() > 0:
            add_decoys(state, group, rows_first)
            chosen |= state.member & (group >= 0)
        for _ in range(DECOY_ROUNDS):  # else single rows, the rest grouped again without them
            if state.shortfall() <= 0:
                break
            decoys = choose_decoys(state, (group >= 0) & ~state.member, slack=DECOY_SLACK)
            if decoys.size == 0:
                break
            tried = chosen.copy()
            tried[decoys] = True
            regrouped, again = settle(group_rows(eligible & ~tried), tried)
            if np.any(again.unplaced & ~state.unplaced):
                break  # grouping again left a row over that no group can take
            add_decoys(again, regrouped, rows_first)
            if again.shortfall() >= state.shortfall():
                break  # grouping again left more rows over than the decoys made up for
            chosen = tried | (again.member & (regrouped >= 0))
            group, state = regrouped, again
        return group, state, chosen

    first = group_rows(eligible)
    group, state, chosen = attempt(first, rows_first=False)
    if state.shortfall() > 0:  # the other order leaves other rows over: it may do
        group, state, chosen = min(
            (attempt(first, rows_first=True), (group, state, chosen)),
            key=lambda tried: tried[1].shortfall(),
        )
    if state.shortfall() > 0:
        group = add_rehomed_decoys(state, group, place_rows)
        chosen |= state.member & (group >= 0)
    if state.shortfall() > 0:
        worst = int(np.argmax(state.terms))
        raise GuaranteeUnsatisfiable(
            f"the suppressed rows cannot be made safe: {int(state.counts[worst])} of the "
            f"{state.size} suppressed rows hold one protected value, and their histories "
            f"need a ratio of {state.ratio[worst]:.4g} for it: {state.shortfall()} more rows "
            "than any choice of decoys gives; lower k_prime or alpha, raise l, or protect "
            "fewer values",
            public=True,
        )
    out = group.copy()
    out[state.member] = -1
    out = renumber(out)
    suppressed = SuppressedSet(
        rows=np.flatnonzero(state.member).astype(np.int64),
        decoys=np.flatnonzero(chosen & state.member).astype(np.int64),
        counts=state.counts.copy(),
        ratio=np.where(state.counts > 0, state.ratio, 0.0),
        exempt_row=state.exempt_row,
        exempt_value=state.exempt_value,
        exempt_members=np.unique(state.exempt_row),
        forced=np.flatnonzero(state.member & state.forced).astype(np.int64),
        unplaced=np.flatnonzero(state.unplaced).astype(np.int64),
        exhausted=np.flatnonzero(state.exhausted).astype(np.int64),
    )
    return out, suppressed


def _group_among(
    group: NDArray[np.int64], pool: NDArray[np.bool_], group_rows: GroupRows
) -> NDArray[np.int64]:
    """``group`` with the rows of ``pool`` (ungrouped) grouped among themselves, as new ids."""
    among = group_rows(pool)
    out = group.copy()
    new = among >= 0
    out[new] = among[new] + int(group.max(initial=-1)) + 1
    return out
