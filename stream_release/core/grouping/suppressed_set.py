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
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.core.grouping.merge import renumber
from stream_release.core.grouping.requirements import Requirements
from stream_release.core.privacy.breach import RATIO_RTOL
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

GroupValid = Callable[[NDArray[np.int64]], bool]
"""Whether rows form a valid group (:class:`~stream_release.core.grouping.merge.GroupValidity`)."""

PlaceRows = Callable[[NDArray[np.int64], NDArray[np.int64]], NDArray[np.int64]]
"""Puts ungrouped rows into groups that stay valid with them: ``(group, rows)`` -> the new
(n,) group per row (a row no group can take stays ``-1``)."""

DECOY_ROUNDS = 8
"""Rounds of "choose decoys, group the rest again" before whole groups are taken."""

REHOME_BATCH = 64
"""Smallest batch of :func:`_add_rehomed_decoys` (the shortfall otherwise)."""

REHOME_TRIES = 4096
"""Candidates tried by :func:`_add_rehomed_decoys`, the last resort before a refusal. In a
large release every group holds one of the most frequent values (the grouping must spread
them), so only this stage can add rows of the others: at 300,000 rows the fifth release of
the scale benchmark needed 282 (64 tries refused it)."""

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
) -> tuple[NDArray[np.int64], SuppressedSet]:
    """Group the ``eligible`` rows so that the suppressed ones form a valid group too.

    The rows are grouped (``group_rows``) and the stranded ones placed (``place_rows``, see
    the module docstring); while the suppressed set falls short, whole published groups join
    it (:func:`_add_group_decoys`), then single rows whose groups stay valid without them
    (:func:`_add_row_decoys`); if the set still falls short at the end, all of it is tried
    again with those rows first. If that is not enough, single rows are chosen among the
    grouped ones and the rest is grouped again without them (:data:`DECOY_ROUNDS` times at
    most): rows without a requirement above the base first (they raise no ratio of the set),
    in row order (the caller's rows are in keyed pseudonym order), each value no more often
    than the set's target size allows. Last, single rows whose groups do not stay valid
    without them join when ``place_rows`` puts the rest of their group into other groups
    (:func:`_add_rehomed_decoys`).

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
    ) -> tuple[NDArray[np.int64], _SetState]:
        """The set of ``group``'s ungrouped rows after placing the rows it may not keep:
        into the groups (``place_rows``), else into new groups formed with the set's other
        rows that are neither forced nor ``decoys``. A row no group takes is *unplaced*: from
        then on it counts as forced."""
        unplaced = np.zeros(sensitive.shape[0], dtype=np.bool_)
        state = _SetState(sensitive, protected, requirements, group < 0, forced, cap, floor, absent)
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
            state = _SetState(
                sensitive,
                protected,
                requirements,
                group < 0,
                forced | unplaced,
                cap,
                floor,
                absent,
            )
        state.unplaced = unplaced & state.member
        return group, state

    def add_decoys(state: _SetState, group: NDArray[np.int64], rows_first: bool) -> None:
        """Decoys that leave nothing to group again: whole groups and rows their groups can
        spare, in either order."""
        if rows_first:
            _add_row_decoys(state, group, group_valid)
        _add_group_decoys(state, group)
        if not rows_first:
            _add_row_decoys(state, group, group_valid)

    def attempt(
        first: NDArray[np.int64], rows_first: bool
    ) -> tuple[NDArray[np.int64], _SetState, NDArray[np.bool_]]:
        chosen = np.zeros(sensitive.shape[0], dtype=np.bool_)
        group, state = settle(first, chosen)
        if state.shortfall() > 0:
            add_decoys(state, group, rows_first)
            chosen |= state.member & (group >= 0)
        for _ in range(DECOY_ROUNDS):  # else single rows, the rest grouped again without them
            if state.shortfall() <= 0:
                break
            decoys = _choose_decoys(state, (group >= 0) & ~state.member, slack=DECOY_SLACK)
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
        group = _add_rehomed_decoys(state, group, place_rows)
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


def _choose_decoys(
    state: _SetState, grouped: NDArray[np.bool_], *, slack: float = 0.0, limit: bool = True
) -> NDArray[np.int64]:
    """Rows to add to the set: as many as it falls short (and ``slack`` times that more),
    none raising its target (``limit`` false: every candidate, in order).

    The target is ``T = ceil(max_s n(S,s) R(S,s))``; a value ``v`` may gain up to
    ``floor(T / R(S,v)) - n(S,v)`` rows (unprotected values: any number), and no row of a
    value some member is spent for. Candidates are ``grouped`` rows (not in the set) whose
    requirements do not raise the set's ratio of a value it holds or they bring: first those
    without any requirement above the base, then the rest, each in row order.
    """
    short = state.shortfall()
    if short <= 0:
        return np.zeros(0, dtype=np.int64)
    target = float(np.ceil(state.terms.max(initial=0.0)))
    v = state.counts.shape[0]
    room = np.full(v, np.iinfo(np.int64).max // 4, dtype=np.int64)
    ratio = np.where(state.ratio > 0, state.ratio, state.base)
    prot = np.flatnonzero(state.protected)
    room[prot] = np.floor(target / ratio[prot]).astype(np.int64) - state.counts[prot]
    room[state.blocked & (state.counts == 0)] = 0
    rows = np.flatnonzero(grouped & ~state.absent).astype(np.int64)  # never an absent row
    owner, value, r = state._entries(rows)
    # a requirement matters for a value the set holds or the row brings (gain() weighs the
    # rest when it is one: a value brought later meets the raised ratio)
    relevant = (state.counts[value] > 0) | (value == state.sensitive[owner])
    bad = relevant & (np.isinf(r) | (r > ratio[value]))
    blocked = np.zeros(state.sensitive.shape[0], dtype=np.bool_)
    blocked[owner[bad]] = True
    plain = np.zeros(state.sensitive.shape[0], dtype=np.bool_)
    plain[rows] = True
    plain[owner] = False
    rows = rows[~blocked[rows]]
    rows = rows[np.lexsort((rows, ~plain[rows]))]  # rows without requirements first
    values = state.sensitive[rows]
    # the k-th candidate of its value is taken iff k < room[value]
    order = np.argsort(values, kind="stable")
    first = np.searchsorted(values[order], values[order], side="left")
    rank = np.empty(rows.shape[0], dtype=np.int64)
    rank[order] = np.arange(rows.shape[0]) - first
    taken = rows[rank < room[values]]
    return taken[: short + int(np.ceil(slack * short))] if limit else taken


def _add_row_decoys(state: _SetState, group: NDArray[np.int64], group_valid: GroupValid) -> None:
    """Single rows whose groups stay valid without them, as long as the set falls short and
    each lowers the shortfall (:func:`_choose_decoys`' candidates, in its order): nothing is
    grouped again, so nothing new is left over."""
    ptr, rows = _group_index(group)
    taken: dict[int, set[int]] = {}
    for r in _choose_decoys(state, (group >= 0) & ~state.member, limit=False).tolist():
        if state.shortfall() <= 0:
            return
        g = int(group[r])
        gone = taken.setdefault(g, set())
        rest = np.array([x for x in rows[ptr[g] : ptr[g + 1]].tolist() if x != r and x not in gone])
        if rest.size == 0 or not group_valid(rest.astype(np.int64)):
            continue
        one = np.array([r], dtype=np.int64)
        if state.gain(one) <= 0:
            continue
        state.add(one)
        gone.add(r)


def _add_rehomed_decoys(
    state: _SetState, group: NDArray[np.int64], place_rows: PlaceRows
) -> NDArray[np.int64]:
    """Single rows whose groups do not stay valid without them, the rest of the group placed
    into other groups (``place_rows``, every row or none), as long as the set falls short and
    each lowers the shortfall (:func:`_choose_decoys`' candidates, :data:`REHOME_TRIES` at
    most). Returns the new grouping; the set gains the rows taken.

    Candidates go in batches (:func:`_rehome_batch`: one call of ``place_rows`` for the rest
    of every candidate's group); a batch whose candidates stop helping one another, and the
    candidates a batch dropped, are tried one at a time."""
    candidates = _choose_decoys(state, (group >= 0) & ~state.member, limit=False)
    candidates = candidates[:REHOME_TRIES]
    start = 0
    while start < candidates.size and state.shortfall() > 0:
        size = max(state.shortfall(), REHOME_BATCH)
        batch, start = _distinct_groups(candidates, group, state.member, start, size)
        done, dropped = _rehome_batch(state, group, batch, place_rows)
        if done is not None:
            group = done
        # one at a time: a batch whose candidates stopped helping one another, and those
        # whose rest found no group while the batch's other groups were cut
        again = batch if done is None else dropped
        for r in again.tolist() if batch.size > 1 else []:
            if state.shortfall() <= 0:
                break
            one, _ = _rehome_batch(state, group, np.array([r]), place_rows)
            group = group if one is None else one
    return group


def _distinct_groups(
    candidates: NDArray[np.int64],
    group: NDArray[np.int64],
    member: NDArray[np.bool_],
    start: int,
    size: int,
) -> tuple[NDArray[np.int64], int]:
    """Up to ``size`` candidates from ``start`` on that are not ``member``s, one per group;
    and where the next batch starts."""
    seen: set[int] = set()
    out: list[int] = []
    i = start
    while i < candidates.size and len(out) < size:
        r = int(candidates[i])
        i += 1
        g = int(group[r])
        if g >= 0 and not member[r] and g not in seen:
            seen.add(g)
            out.append(r)
    return np.array(out, dtype=np.int64), i


def _rehome_batch(
    state: _SetState,
    group: NDArray[np.int64],
    batch: NDArray[np.int64],
    place_rows: PlaceRows,
) -> tuple[NDArray[np.int64] | None, NDArray[np.int64]]:
    """The grouping with the candidates of ``batch`` (one per group) taken into the set and
    the rest of their groups placed (``place_rows``; a candidate whose rest is not all placed
    is dropped: it keeps its group, and the others are placed again without it), and the
    dropped candidates; ``None``, the set unchanged, when a candidate no longer lowers the
    shortfall once the others joined. The absent rows of the candidates' groups
    (``state.absent``) are placed when a group takes them, else left out."""
    helps = np.array([state.gain(np.array([r])) > 0 for r in batch.tolist()], dtype=np.bool_)
    batch = batch[helps] if batch.size else batch
    kept, placed = batch, group
    while kept.size:
        gone = np.isin(group, group[kept]) & ~state.member
        gone[kept] = False
        rest = np.flatnonzero(gone).astype(np.int64)
        cut = group.copy()
        cut[state.member | gone] = -1  # the set's rows are in no group
        cut[kept] = -1
        placed = place_rows(cut, rest)
        real = rest[~state.absent[rest]]
        whole = np.array([np.all(placed[real[group[real] == group[r]]] >= 0) for r in kept])
        if whole.all():
            break
        kept = kept[whole]
    dropped = np.setdiff1d(batch, kept)
    if kept.size == 0:
        return group, dropped
    saved = state.save()
    for r in kept.tolist():
        one = np.array([r], dtype=np.int64)
        if state.gain(one) <= 0:
            state.restore(saved)
            return None, dropped
        state.add(one)
    final = placed.copy()
    final[state.member] = group[state.member]  # the set's rows keep their ids (decoys)
    return final, dropped


class _SetState:
    """The suppressed set while decoys join it.

    Every entry ``(member, value)`` of Theorem 1 with history is held to the bound (its
    ``needed`` ratio raises ``ratio`` for its value) unless it is spent (``needed`` infinite:
    at the bound, or a forced member's ratio above the cap). A spent entry for a value the set
    holds is *exempt* when its member is forced and a forced member holds the value, else
    *stranded* (:meth:`to_place`). ``blocked`` (V,): values some member is spent for: no
    decoy may bring one the set does not hold. ``exhausted`` (n,): members at the bound for
    their own value.
    """

    def __init__(
        self,
        sensitive: NDArray[np.int32],
        protected: NDArray[np.bool_],
        requirements: Requirements,
        member: NDArray[np.bool_],
        forced: NDArray[np.bool_],
        cap: int,
        floor: float,
        absent: NDArray[np.bool_] | None = None,
    ) -> None:
        self.sensitive = sensitive
        self.absent = absent if absent is not None else np.zeros_like(member)
        """Rows not in the snapshot: never members, never decoys."""
        member = member & ~self.absent
        self.protected = protected
        self.forced = forced
        self.unplaced = np.zeros(sensitive.shape[0], dtype=np.bool_)
        """Rows among ``forced`` that the caller could not place into any group."""
        # what the set must give each pair: Theorem 1's ratio with the safe margin (the set is
        # not a planned group: it keeps the bound, not the strategy's plan), floored at l;
        # infinite (spent): at the bound, or a forced row's ratio clear of the cap
        self.ptr, self.value, least = requirements.theorem_1()
        self.base = float(floor) * (1.0 + RATIO_RTOL)
        entry_owner = np.repeat(np.arange(sensitive.shape[0]), np.diff(self.ptr))
        beyond = forced[entry_owner] & (least > cap * (1.0 + RATIO_RTOL))
        self.needed = np.where(beyond, np.inf, least * (1.0 + RATIO_RTOL))
        v = protected.shape[0]
        self.member = member.copy()
        self._size = int(np.count_nonzero(self.member))
        self.counts = np.bincount(sensitive[member], minlength=v).astype(np.int64)
        rows = np.flatnonzero(member).astype(np.int64)
        owner, value, ratio = self._entries(rows)
        at_bound = np.isinf(least[self._entry_index(rows)])
        self.exhausted = np.zeros(sensitive.shape[0], dtype=np.bool_)
        self.exhausted[owner[at_bound & (value == sensitive[owner])]] = True
        by_forced = np.bincount(sensitive[member & forced], minlength=v) > 0
        spent_held = np.isinf(ratio) & (self.counts[value] > 0)
        exempt = spent_held & forced[owner] & by_forced[value]
        self.exempt_row, self.exempt_value = owner[exempt], value[exempt]
        self._stranded_row = owner[spent_held & ~exempt]
        self._stranded_value = value[spent_held & ~exempt]
        held = np.isfinite(ratio) & (self.counts[value] > 0) & ~forced[owner]
        self._heavy = np.unique(owner[held & (ratio > cap * (1.0 + RATIO_RTOL))])
        self._demanding = np.unique(owner[held & (ratio > self.base)])
        self.ratio = np.where(protected, self.base, 0.0)
        self.blocked = np.zeros(v, dtype=np.bool_)
        self._raise(owner, value, ratio)
        self.terms = self._terms()

    @property
    def size(self) -> int:
        """Members (kept as a count: the decoy loops ask for it once per group)."""
        return self._size

    def to_place(self) -> NDArray[np.int64]:
        """The rows to put into groups: so that no pair is stranded, each stranded member not
        forced, and for a forced one, the members not forced that hold its value; and, not to
        make the set larger than any group for them, the members not forced whose ratio for a
        value of the set exceeds the cap. (A row no group takes becomes unplaced, hence
        forced: its pairs, and those of forced members for its value, become exempt.)"""
        row, value = self._stranded_row, self._stranded_value
        mine = ~self.forced[row]
        theirs = np.zeros(self.counts.shape[0], dtype=np.bool_)
        theirs[value[~mine]] = True
        holders = np.flatnonzero(self.member & ~self.forced & theirs[self.sensitive])
        return np.union1d(np.union1d(row[mine], holders), self._heavy).astype(np.int64)

    def demanding(self) -> NDArray[np.int64]:
        """Members not forced whose ratio for a value of the set is above the base: the set
        needs fewer decoys if a group takes them (it may not; they are not stranded)."""
        return self._demanding

    def _entry_index(self, rows: NDArray[np.int64]) -> NDArray[np.int64]:
        """The indexes of the rows' pairs with history, row after row."""
        ptr = self.ptr
        counts = ptr[rows + 1] - ptr[rows]
        idx = np.repeat(ptr[rows] - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
        return idx + np.arange(int(counts.sum()))

    def _entries(
        self, rows: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.float64]]:
        """(row, value, needed ratio) of the rows' pairs with history."""
        idx = self._entry_index(rows)
        owner = np.repeat(rows, self.ptr[rows + 1] - self.ptr[rows])
        return owner, self.value[idx].astype(np.int64), self.needed[idx]

    def _raise(
        self, owner: NDArray[np.int64], value: NDArray[np.int64], ratio: NDArray[np.float64]
    ) -> None:
        """Take the members' requirements into the set's ratios (every pair not spent) and
        their spent values into ``blocked``."""
        dead = np.isinf(ratio)
        self.blocked[value[dead]] = True
        np.maximum.at(self.ratio, value[~dead], ratio[~dead])

    def _terms(self) -> NDArray[np.float64]:
        """Rows each protected value present needs: ``n(S,s) R(S,s)``."""
        live = self.protected & (self.counts > 0)
        return np.where(live, self.counts * self.ratio, 0.0)

    def shortfall(self) -> int:
        """Rows still missing: ``ceil(max_s n(S,s) R(S,s)) - |S|`` (<= 0: valid)."""
        need = float(self.terms.max(initial=0.0))
        return int(np.ceil(need)) - self.size if need > 0 else -self.size

    def gain(self, rows: NDArray[np.int64]) -> int:
        """How far the shortfall falls if ``rows`` join (<= 0: they do not help), or -1 when
        they would add a spent pair: a row of them spent for a value the set would then hold,
        or a value they bring that a member is spent for."""
        counts = np.bincount(self.sensitive[rows], minlength=self.counts.shape[0])
        after = self.counts + counts
        _, value, ratio = self._entries(rows)
        if np.any(np.isinf(ratio) & (after[value] > 0)):
            return -1
        if np.any(self.blocked & (counts > 0) & (self.counts == 0)):
            return -1
        ratio_after = self.ratio.copy()
        np.maximum.at(ratio_after, value, ratio)
        live = self.protected & (after > 0)
        terms = np.where(live, after * ratio_after, 0.0)
        need_before = float(self.terms.max(initial=0.0))
        need_after = float(terms.max(initial=0.0))
        return (int(np.ceil(need_before)) - self.size) - (
            int(np.ceil(need_after)) - (self.size + rows.shape[0])
        )

    def add(self, rows: NDArray[np.int64]) -> None:
        """Add rows that :meth:`gain` accepted (no spent pair among them, none a member)."""
        if np.any(self.member[rows]) or np.unique(rows).shape[0] != rows.shape[0]:
            raise ValueError("a row joins the suppressed set twice")
        self.member[rows] = True
        self._size += int(rows.shape[0])
        np.add.at(self.counts, self.sensitive[rows], 1)
        self._raise(*self._entries(rows))
        self.terms = self._terms()

    def save(self) -> tuple[NDArray[Any], ...]:
        """What :meth:`add` changes, for :meth:`restore`."""
        return tuple(a.copy() for a in (self.member, self.counts, self.ratio, self.blocked))

    def restore(self, saved: tuple[NDArray[Any], ...]) -> None:
        """The set as it was when :meth:`save` was called."""
        self.member, self.counts, self.ratio, self.blocked = (a.copy() for a in saved)
        self._size = int(np.count_nonzero(self.member))
        self.terms = self._terms()


def _group_among(
    group: NDArray[np.int64], pool: NDArray[np.bool_], group_rows: GroupRows
) -> NDArray[np.int64]:
    """``group`` with the rows of ``pool`` (ungrouped) grouped among themselves, as new ids."""
    among = group_rows(pool)
    out = group.copy()
    new = among >= 0
    out[new] = among[new] + int(group.max(initial=-1)) + 1
    return out


def _group_index(group: NDArray[np.int64]) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Rows of every group as a CSR: ``(ptr (G+1,), rows)``, rows ascending per group."""
    grouped = np.flatnonzero(group >= 0)
    order = np.argsort(group[grouped], kind="stable")
    rows = grouped[order].astype(np.int64)
    n_groups = int(group.max()) + 1 if grouped.size else 0
    ptr = np.zeros(n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(group[grouped], minlength=n_groups), out=ptr[1:])
    return ptr, rows


def _add_group_decoys(state: _SetState, group: NDArray[np.int64]) -> None:
    """Whole published groups, as long as the set falls short and each lowers the shortfall:
    groups without any requirement above the base first (they raise no ratio of the set),
    then those whose protected values press least on the set, smaller ones first."""
    ptr, rows = _group_index(group)
    sizes = np.diff(ptr)
    g_of = np.repeat(np.arange(sizes.shape[0]), sizes)
    values = state.sensitive[rows]
    pressure = np.where(state.protected[values], state.terms[values], 0.0)
    worst = np.zeros(sizes.shape[0])
    if rows.size:
        np.maximum.at(worst, g_of, pressure)
    # a group with a member at the bound for a value the set holds can never join it
    owner, value, ratio = state._entries(rows)
    blocked = np.zeros(sizes.shape[0], dtype=np.bool_)
    where = np.empty(state.sensitive.shape[0], dtype=np.int64)
    where[rows] = g_of
    hit = np.isinf(ratio) & (state.counts[value] > 0)
    blocked[where[owner[hit]]] = True
    demanding = np.zeros(sizes.shape[0], dtype=np.bool_)
    demanding[where[owner]] = True
    for g in np.lexsort((sizes, worst, demanding)).tolist():
        if blocked[g]:
            continue
        if state.shortfall() <= 0:
            return
        members = rows[ptr[g] : ptr[g + 1]]
        members = members[~state.absent[members]]
        if members.size == 0 or bool(state.member[members].any()):
            continue
        if state.gain(members) <= 0:
            continue
        state.add(members)
