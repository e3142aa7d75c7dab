r"""The suppressed set of a release while decoys join it: its counts, its ratios and its
shortfall (:mod:`stream_release.core.grouping.suppressed_set` explains the set and its rule:
Theorem 1 of [WFLWX10] held as for a group).

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stream_release.core.grouping.requirements import Requirements, csr_rows
from stream_release.core.privacy.breach import RATIO_RTOL

__all__ = ["SetState"]


class SetState:
    """The suppressed set while decoys join it.

    Every entry ``(member, value)`` of Theorem 1 with history is held to the bound (its
    ``needed`` ratio raises ``ratio`` for its value) unless it is spent (``needed`` infinite:
    at the bound, or a forced member's ratio above the cap). A spent entry for a value the set
    holds is *exempt* when its member is forced and a forced member holds the value, else
    *stranded* (:meth:`to_place`). ``blocked`` (V,): values some member is spent for: no
    decoy may bring one the set does not hold. ``exhausted`` (n,): members at the bound for
    their own value.

    A part of a release cut on shards also knows ``also_held`` (V,): the values the other
    parts' sets hold, which the union an adversary sees holds too (a member spent for one is
    stranded, a decoy spent for one is refused), ``also_blocked`` (V,): values kept out
    of the set (a forced member of another part is spent for them), and ``also_stranded``
    (n,): rows at the bound for a value of ``also_held`` that no row of this part holds (it
    has no local code, so no requirement names it): stranded when members not forced, refused
    as decoys; all empty otherwise.
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
        value_floor: NDArray[np.float64] | None = None,
        also_held: NDArray[np.bool_] | None = None,
        also_blocked: NDArray[np.bool_] | None = None,
        also_stranded: NDArray[np.bool_] | None = None,
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
        owner, value, ratio = self.entries(rows)
        at_bound = np.isinf(least[self._entry_index(rows)])
        self.exhausted = np.zeros(sensitive.shape[0], dtype=np.bool_)
        self.exhausted[owner[at_bound & (value == sensitive[owner])]] = True
        by_forced = np.bincount(sensitive[member & forced], minlength=v) > 0
        # a release cut on shards: the values the other parts' sets hold are the set's too
        self.also_held = np.zeros(v, dtype=np.bool_) if also_held is None else also_held
        present = (self.counts > 0) | self.also_held
        spent_held = np.isinf(ratio) & present[value]
        exempt = spent_held & forced[owner] & by_forced[value]
        self.exempt_row, self.exempt_value = owner[exempt], value[exempt]
        self._stranded_row = owner[spent_held & ~exempt]
        self._stranded_value = value[spent_held & ~exempt]
        held = np.isfinite(ratio) & present[value] & ~forced[owner]
        self._heavy = np.unique(owner[held & (ratio > cap * (1.0 + RATIO_RTOL))])
        self._demanding = np.unique(owner[held & (ratio > self.base)])
        # a release cut on shards: each part's set holds the ratio every part's needs, so
        # that their union holds it too (value_floor, (V,), already with the safe margin)
        start = self.base if value_floor is None else np.maximum(self.base, value_floor)
        self.ratio = np.where(protected, start, 0.0)
        # a release cut on shards: values another part's forced member is spent for, which no
        # forced member holds: no member of this set that can be placed may hold one
        self.also_blocked = np.zeros(v, dtype=np.bool_) if also_blocked is None else also_blocked
        self.blocked = self.also_blocked.copy()
        self.also_stranded = np.zeros_like(member) if also_stranded is None else also_stranded
        self._raise(owner, value, ratio)
        self.terms = self._terms()

    @property
    def size(self) -> int:
        """Members (kept as a count: the decoy loops ask for it once per group)."""
        return self._size

    def to_place(self) -> NDArray[np.int64]:
        """The rows to put into groups: so that no pair is stranded, each stranded member not
        forced (``also_stranded`` ones too), and for a forced one, the members not forced that
        hold its value; and, not to make the set larger than any group for them, the members
        not forced whose ratio for a value of the set exceeds the cap. (A row no group takes
        becomes unplaced, hence forced: its pairs, and those of forced members for its value,
        become exempt.)"""
        row, value = self._stranded_row, self._stranded_value
        mine = ~self.forced[row]
        theirs = np.zeros(self.counts.shape[0], dtype=np.bool_)
        theirs[value[~mine]] = True
        theirs |= self.also_blocked
        holders = np.flatnonzero(self.member & ~self.forced & theirs[self.sensitive])
        elsewhere = np.flatnonzero(self.member & ~self.forced & self.also_stranded)
        placed = np.union1d(np.union1d(row[mine], holders), elsewhere)
        return np.union1d(placed, self._heavy).astype(np.int64)

    def demanding(self) -> NDArray[np.int64]:
        """Members not forced whose ratio for a value of the set is above the base: the set
        needs fewer decoys if a group takes them (it may not; they are not stranded)."""
        return self._demanding

    def _entry_index(self, rows: NDArray[np.int64]) -> NDArray[np.int64]:
        """The indexes of the rows' pairs with history, row after row."""
        return csr_rows(self.ptr, rows)[1]

    def entries(
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
        or a value they bring that a member is spent for. (A kernel: the decoy loops ask it
        once per candidate group, tens of thousands of times in a release with history.)"""
        if self.also_stranded[rows].any():
            return -1
        return int(
            _gain(
                np.ascontiguousarray(rows, dtype=np.int64),
                self.sensitive,
                self.counts,
                self.ptr,
                self.value,
                self.needed,
                self.ratio,
                self.protected,
                self.blocked,
                self.also_held,
                self.shortfall(),
                self.size,
            )
        )

    def add(self, rows: NDArray[np.int64]) -> None:
        """Add rows that :meth:`gain` accepted (no spent pair among them, none a member)."""
        if np.any(self.member[rows]) or np.unique(rows).shape[0] != rows.shape[0]:
            raise ValueError("a row joins the suppressed set twice")
        self.member[rows] = True
        self._size += int(rows.shape[0])
        np.add.at(self.counts, self.sensitive[rows], 1)
        self._raise(*self.entries(rows))
        self.terms = self._terms()

    def save(self) -> tuple[NDArray[Any], ...]:
        """What :meth:`add` changes, for :meth:`restore`."""
        return tuple(a.copy() for a in (self.member, self.counts, self.ratio, self.blocked))

    def restore(self, saved: tuple[NDArray[Any], ...]) -> None:
        """The set as it was when :meth:`save` was called."""
        self.member, self.counts, self.ratio, self.blocked = (a.copy() for a in saved)
        self._size = int(np.count_nonzero(self.member))
        self.terms = self._terms()


@njit(cache=True, nogil=True)
def _gain(  # pragma: no cover - jit
    rows: NDArray[np.int64],
    sensitive: NDArray[Any],
    counts: NDArray[np.int64],
    ptr: NDArray[Any],
    value: NDArray[Any],
    needed: NDArray[np.float64],
    ratio: NDArray[np.float64],
    protected: NDArray[np.bool_],
    blocked: NDArray[np.bool_],
    also_held: NDArray[np.bool_],
    shortfall: int,
    size: int,
) -> int:
    """:meth:`SetState.gain`: the counts after, the spent pairs refused, the ratios raised by
    the rows' entries, then the ``shortfall`` less the one after."""
    n_values = counts.shape[0]
    after = counts.copy()
    for r in rows:
        after[sensitive[r]] += 1
    for r in rows:
        for k in range(ptr[r], ptr[r + 1]):
            v = value[k]
            if np.isinf(needed[k]) and (after[v] > 0 or also_held[v]):
                return -1
    for v in range(n_values):
        if blocked[v] and after[v] > counts[v] and counts[v] == 0:
            return -1
    ratio_after = ratio.copy()
    for r in rows:
        for k in range(ptr[r], ptr[r + 1]):
            v = value[k]
            ratio_after[v] = max(ratio_after[v], needed[k])
    need_after = 0.0
    for v in range(n_values):
        if protected[v] and after[v] > 0:
            need_after = max(need_after, after[v] * ratio_after[v])
    return int(shortfall - (np.int64(np.ceil(need_after)) - (size + rows.shape[0])))
