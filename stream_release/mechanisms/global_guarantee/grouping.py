"""The grouping of one release under the global guarantee: the requirements every row's
history sets (Wong et al. 2010, Theorem 1), the rows withheld for their history (decided from
the histories alone, never from a row's value), and the groups and the suppressed set built
around them (:class:`ReleaseGrouping`), for :func:`~.plan.plan_release`.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from stream_release.config import GroupingSettings
from stream_release.core.grouping.merge import GroupValidity
from stream_release.core.grouping.partition import (
    form_groups,
    place_in_groups,
    placer_for,
)
from stream_release.core.grouping.placer import Placer, WorkBudget
from stream_release.core.grouping.requirements import Requirements, csr_rows
from stream_release.core.grouping.suppressed_set import (
    SuppressedSet,
    decoy_count,
    decoy_order,
    protect_suppressed_set,
    withheld_for_history,
)
from stream_release.core.grouping.virtual import trim_virtual
from stream_release.core.privacy.breach import (
    RATIO_RTOL,
    minimum_ratio_from_log_product,
)
from stream_release.core.privacy.linkage import HistoryRows
from stream_release.core.privacy.strategy import Strategy
from stream_release.core.table import EncodedTable
from stream_release.mechanisms.global_guarantee.feasibility import check_feasible


class ReleaseGrouping:
    """How one release forms its groups: :func:`form_groups` and :func:`place_in_groups` with
    its settings, the placer built at the first placement (many releases need none) and kept
    for the release."""

    def __init__(
        self,
        table: EncodedTable,
        is_protected: NDArray[np.bool_],
        requirements: Requirements,
        min_group_size: int,
        grouping: GroupingSettings,
    ) -> None:
        self.table, self.is_protected, self.requirements = table, is_protected, requirements
        self.min_group_size = min_group_size
        self.factor, self.window = grouping.max_group_factor, grouping.insertion_window
        self.budget = WorkBudget.for_rows(table.n_rows)
        """The swaps and regroupings every placement of the release spends: O(n) in all."""

    def group_rows(self, rows: NDArray[np.bool_]) -> NDArray[np.int64]:
        """Groups the rows of the mask ``rows`` (n,): group per row, ``-1`` = not grouped."""
        return form_groups(
            self.table,
            self.is_protected,
            self.requirements,
            min_group_size=self.min_group_size,
            eligible=rows,
            max_group_factor=self.factor,
            insertion_window=self.window,
        )

    @functools.cached_property
    def placer(self) -> Placer:
        return placer_for(
            self.table,
            self.is_protected,
            self.requirements,
            min_group_size=self.min_group_size,
            max_group_factor=self.factor,
        )

    def place_rows(self, group: NDArray[np.int64], rows: NDArray[np.int64]) -> NDArray[np.int64]:
        """Puts the ungrouped ``rows`` into the groups of ``group`` that stay valid with them."""
        return place_in_groups(
            self.table, self.is_protected, self.requirements, group, rows,
            min_group_size=self.min_group_size, max_group_factor=self.factor,
            insertion_window=self.window, placer=self.placer, budget=self.budget,
        )  # fmt: skip

    def group_release(
        self,
        strategy: Strategy,
        absent: NDArray[np.bool_],
        withheld: NDArray[np.bool_],
        rng: np.random.Generator,
        value_floor: NDArray[np.float64] | None = None,
        past_horizon: bool = False,
    ) -> tuple[NDArray[np.int64], SuppressedSet]:
        """The release's groups (n,) (``-1`` = suppressed) and its suppressed set
        (:func:`protect_suppressed_set`); groups left with ``absent`` rows (virtual candidates)
        only are dropped (:func:`trim_virtual`). O(n log n) whatever the histories: two
        groupings at most, and the rows they leave over placed within the release's
        :class:`~stream_release.core.grouping.placer.WorkBudget`.

        The ``withheld`` rows (:func:`withheld_rows`) never start or join a group, nor do the
        decoys: the first rows of :func:`decoy_order` (drawn from ``rng``), as many as
        :func:`decoy_count` gives for their count, never for their values. Every other row is
        grouped (:func:`form_groups`), then placed (:func:`place_in_groups`), then grouped
        among the rows still left, then placed once more into groups that may pass the cap
        (the cap is the groups' size for utility, not a bound); when rows are left over even so
        (*unplaced*), decoys are drawn for them too and the rest is grouped again once. Inside
        the horizon the set's members not withheld keep their plan; past it
        (``past_horizon``) the decoys keep [WFLWX10] Theorem 1's bound and the unplaced rows the
        per-release bound, like the withheld.
        """
        table, is_protected = self.table, self.is_protected
        real = ~absent
        # a part of a release cut on shards may have to hold a floor for the union's sake:
        # its decoys are counted for it (a floor is the other parts' public needs, no value)
        floor = float(value_floor.max(initial=0.0)) if value_floor is not None else 0.0
        base = max(strategy.base_ratio, floor)
        ell = max(strategy.ell * (1.0 + RATIO_RTOL), floor)
        share_max = _largest_share(table.sensitive[real], is_protected)
        order = decoy_order(real & ~withheld, self.requirements, rng)
        # withheld rows (past the horizon) are many and of varied values: topped up to the
        # set one row of any value needs, no more (a set of them alone holds when no value
        # holds 1/l of it; when one does, the release is refused)
        taken = decoy_count(int(np.count_nonzero(withheld)), 0, ratio=ell, share_max=share_max)
        decoys = np.zeros(table.n_rows, dtype=np.bool_)
        decoys[order[:taken]] = True
        check_feasible(table, ~withheld & ~decoys, is_protected, strategy, self.min_group_size)
        group = self._group_placed(~withheld & ~decoys, absent)
        left = (group < 0) & real & ~withheld & ~decoys
        keep_plan = not past_horizon
        if left.any():  # as if the grouping's leftovers all held one value
            # inside the horizon they keep their plan; past it the per-release bound, like
            # the withheld
            need = max(base, _largest_need(self.requirements, left)) if keep_plan else ell
            hard = int(np.count_nonzero(left | withheld))
            more = decoy_count(hard, hard, ratio=need, share_max=share_max)
            decoys[order[taken : taken + more]] = True
            group = self._group_placed(~withheld & ~decoys, absent)
        group, suppressed = protect_suppressed_set(
            table.sensitive, is_protected, self.requirements, group, withheld, decoys,
            floor=strategy.ell, absent=absent, value_floor=value_floor,
            keep_plan=keep_plan,
        )  # fmt: skip
        if absent.any():
            validity = GroupValidity(
                table.sensitive, is_protected, self.requirements, self.min_group_size
            )
            group = trim_virtual(
                group, absent, table, validity.valid, min_group_size=self.min_group_size,
                base_ratio=strategy.base_ratio, protected=is_protected,
            )  # fmt: skip
        return group, suppressed

    def _group_placed(
        self, eligible: NDArray[np.bool_], absent: NDArray[np.bool_]
    ) -> NDArray[np.int64]:
        """The ``eligible`` rows grouped (:func:`form_groups`), the rows left placed into the
        groups (:func:`place_in_groups`), those still left grouped among themselves, and the
        last ones placed into groups that may grow to :data:`WIDE_FACTOR` times the cap."""
        group = self.group_rows(eligible)
        left = np.flatnonzero(eligible & ~absent & (group < 0)).astype(np.int64)
        if left.size:
            group = self.place_rows(group, left)
            left = left[group[left] < 0]
        if left.size > 1:
            pool = np.zeros(group.shape[0], dtype=np.bool_)
            pool[left] = True
            group = _group_among(group, pool, self.group_rows)
            left = left[group[left] < 0]
        if left.size:
            group = place_in_groups(
                self.table, self.is_protected, self.requirements, group, left,
                min_group_size=self.min_group_size,
                max_group_factor=self.factor * WIDE_FACTOR, insertion_window=self.window,
                placer=self.wide_placer, budget=self.budget,
            )  # fmt: skip
        return group

    @functools.cached_property
    def wide_placer(self) -> Placer:
        """The placer of the last try, its groups allowed :data:`WIDE_FACTOR` times the cap."""
        return placer_for(
            self.table,
            self.is_protected,
            self.requirements,
            min_group_size=self.min_group_size,
            max_group_factor=self.factor * WIDE_FACTOR,
        )


WIDE_FACTOR = 4.0
"""How much larger than the cap a group may grow to take a row no group could take within it:
the cap bounds the groups' size for their utility; a larger group is no weaker."""


def _largest_need(requirements: Requirements, rows: NDArray[np.bool_]) -> float:
    """The largest ratio one of ``rows`` plans for a protected value (0 without a requirement
    above the base)."""
    _, entries = csr_rows(requirements.ptr, np.flatnonzero(rows).astype(np.int64))
    return float(requirements.ratio[entries].max(initial=0.0))


def _largest_share(sensitive: NDArray[np.int32], protected: NDArray[np.bool_]) -> float:
    """The largest share of a protected value among the snapshot's rows (its totals: what the
    adversary knows too)."""
    if sensitive.shape[0] == 0:
        return 0.0
    counts = np.bincount(sensitive, minlength=protected.shape[0])
    largest = int(np.where(protected, counts, 0).max(initial=0))
    return largest / int(sensitive.shape[0])


def _group_among(
    group: NDArray[np.int64],
    pool: NDArray[np.bool_],
    group_rows: Callable[[NDArray[np.bool_]], NDArray[np.int64]],
) -> NDArray[np.int64]:
    """``group`` with the rows of ``pool`` (ungrouped) grouped among themselves, as new ids."""
    among = group_rows(pool)
    out = group.copy()
    new = among >= 0
    out[new] = among[new] + int(group.max(initial=-1)) + 1
    return out


def withheld_rows(
    history: HistoryRows,
    protected_global: NDArray[np.bool_],
    strategy: Strategy,
    cap: int,
) -> NDArray[np.bool_]:
    """(n,) the rows the release withholds for their history
    (:func:`~stream_release.core.grouping.suppressed_set.withheld_for_history`): those whose
    plan for some protected value of their history exceeds ``cap``. From the history alone,
    which an adversary who reads the public files and knows who is in each snapshot can
    compute too; never from a row's value. ``protected_global`` (len(values),) over the global
    value ids. The localized baseline keeps no history: it withholds nobody."""
    n = history.n_individuals
    if not strategy.uses_history or history.n_entries == 0:
        return np.zeros(n, dtype=np.bool_)
    mine = protected_global[history.value]
    plan = strategy.required_ratio(history.log_p[mine], history.links[mine])
    return withheld_for_history(n, history.owner()[mine].astype(np.int64), plan, cap=cap)


def global_protected_mask(
    values: tuple[str, ...],
    value_of_local: NDArray[np.int64],
    is_protected: NDArray[np.bool_],
    protected: tuple[str, ...] | list[str],
) -> NDArray[np.bool_]:
    """(len(values),) bool over the global value ids: the protected values (all when
    ``protected`` is empty)."""
    protected_global = np.zeros(len(values), dtype=np.bool_)
    protected_global[value_of_local[is_protected]] = True
    if protected:
        wanted = set(protected)
        protected_global |= np.array([v in wanted for v in values], dtype=np.bool_)
    else:
        protected_global[:] = True
    return protected_global


def extend_dictionary(
    known: tuple[str, ...], present: tuple[str, ...], skip: int | None = None
) -> tuple[tuple[str, ...], NDArray[np.int64], NDArray[np.int64]]:
    """The store's dictionary extended with ``present``'s new values, and the maps between
    local codes and global ids (local code ``skip``, virtual members' no value, maps to -1)."""
    index = {v: i for i, v in enumerate(known)}
    extended = list(known)
    value_of_local = np.full(len(present), -1, dtype=np.int64)
    for local, value in enumerate(present):
        if local == skip:
            continue
        gid = index.get(value)
        if gid is None:
            gid = len(extended)
            extended.append(value)
            index[value] = gid
        value_of_local[local] = gid
    local_of_global = np.full(len(extended), -1, dtype=np.int64)
    real = value_of_local >= 0
    local_of_global[value_of_local[real]] = np.arange(len(present))[real]
    return tuple(extended), value_of_local, local_of_global


def requirements_of(
    table: EncodedTable,
    history: HistoryRows,
    local_of_global: NDArray[np.int64],
    is_protected: NDArray[np.bool_],
    strategy: Strategy,
) -> Requirements:
    n = table.n_rows
    if not strategy.uses_history or history.n_entries == 0:
        return Requirements.uniform(strategy.base_ratio, n)
    local = local_of_global[history.value]
    relevant = local >= 0
    relevant[relevant] = is_protected[local[relevant]]
    ratio = strategy.required_ratio(history.log_p, history.links)
    keep = relevant & (ratio > strategy.base_ratio * (1.0 + 1e-12))
    owner = history.owner()
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner[keep], minlength=n), out=ptr[1:])
    linked = relevant & (history.log_p < 0.0)
    least_ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner[linked], minlength=n), out=least_ptr[1:])
    return Requirements(
        strategy.base_ratio,
        ptr,
        local[keep].astype(np.int32),
        ratio[keep].astype(np.float64),
        least_ptr,
        local[linked].astype(np.int32),
        minimum_ratio_from_log_product(strategy.ell, history.log_p[linked]),
    )
