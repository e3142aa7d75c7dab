"""Plan one release: pure orchestration of the core (no I/O, no clock).

``plan_release`` takes an encoded snapshot, the history of its individuals and the privacy
settings, and returns the groups, the suppressed set, the new history of every individual of
the snapshot and the breach probabilities after the release.

The suppressed rows are one more group to an adversary who knows who is in the snapshot and
its value counts (:mod:`stream_release.core.grouping.suppressed_set`): they are made valid like any
group (decoys join them where needed) and their linkages enter every member's history. Which
rows are withheld for their history is decided before grouping from the histories alone
(:func:`~stream_release.core.grouping.suppressed_set.withheld_for_history`), never from a
row's value: an adversary who knows the rule learns nothing from who is withheld.

It checks before it releases (STYLE.md rule 2): every individual's breach probability for
every protected value is recomputed from the merged history (Lemma 4 of [WFLWX10]) with a
proven bound on its rounding (:func:`~stream_release.core.privacy.breach.possibly_exceeds`), and a
single one that may exceed ``1/l`` raises :class:`GuaranteeUnsatisfiable`; the only pairs not
held to it are those the suppressed set links although they were at the bound already (their
count is in the manifest: the pairs of members withheld for their history, held to the
per-release bound). The ``localized`` baseline, whose breaches are the point of the
comparison, is reported, not refused (:mod:`stream_release.core.privacy.bound_check`).

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
from numpy.typing import NDArray

from stream_release.config import GroupingSettings
from stream_release.core.grouping.layout import ReleaseLayout
from stream_release.core.grouping.partition import (
    group_size_cap,
)
from stream_release.core.grouping.suppressed_set import (
    SuppressedSet,
)
from stream_release.core.grouping.virtual import no_value_code
from stream_release.core.privacy.bound_check import (
    check_bound,
    check_sizes,
    exempt_entries,
    individual_breach,
    spent_entries,
)
from stream_release.core.privacy.breach import (
    breach_bounds,
    log_survival_factor,
)
from stream_release.core.privacy.linkage import HistoryRows, linked_entries, merge_linkages
from stream_release.core.privacy.strategy import Strategy
from stream_release.core.table import EncodedTable
from stream_release.errors import NEW_SERIES_CAVEAT, GuaranteeUnsatisfiable, PrivacyLeakWarning
from stream_release.mechanisms.global_guarantee.grouping import (
    ReleaseGrouping,
    extend_dictionary,
    global_protected_mask,
    requirements_of,
    withheld_rows,
)
from stream_release.release_format import BreachSummary


@dataclass(frozen=True, eq=False)
class GroupContents:
    """The published multiset of each group, as sorted (group, value) pairs.

    ``size`` (G,) int64; ``pair_group``, ``pair_value`` (local code), ``pair_count`` (P,) int64,
    sorted by group then value; ``pair_ptr`` (G+1,) int64 CSR over groups.
    """

    size: NDArray[np.int64]
    pair_group: NDArray[np.int64]
    pair_value: NDArray[np.int64]
    pair_count: NDArray[np.int64]
    pair_ptr: NDArray[np.int64]

    @classmethod
    def of(cls, table: EncodedTable, layout: ReleaseLayout) -> GroupContents:
        """The contents of the groups of ``layout`` (a release of ``table``), from its pairs.

        Virtual members (:data:`~stream_release.core.grouping.virtual.NO_VALUE`) count in
        ``size`` and hold no value: their pairs are left out (:attr:`virtual` counts them).
        """
        groups = layout.groups
        ptr, values, counts = layout.pair_ptr, layout.pair_value, layout.pair_count
        pair_group = np.repeat(np.arange(groups.n_groups, dtype=np.int64), np.diff(ptr))
        sizes = groups.sizes.astype(np.int64)
        no_value = no_value_code(table)
        if no_value is not None:
            real = values != no_value
            pair_group, values, counts = pair_group[real], values[real], counts[real]
            ptr = np.zeros(groups.n_groups + 1, dtype=np.int64)
            np.cumsum(np.bincount(pair_group, minlength=groups.n_groups), out=ptr[1:])
        return cls(sizes, pair_group, values.astype(np.int64), counts, ptr)

    def with_group(self, values: NDArray[np.integer], n_values: int) -> GroupContents:
        """These contents and one more group (id :attr:`n_groups`, when ``values`` is not empty)
        of rows holding local codes ``values`` (no virtual member): the suppressed set."""
        if values.shape[0] == 0:
            return self
        counts = np.bincount(values, minlength=n_values)
        held = np.flatnonzero(counts).astype(np.int64)
        return GroupContents(
            np.append(self.size, np.int64(values.shape[0])),
            np.concatenate([self.pair_group, np.full(held.shape[0], self.n_groups, np.int64)]),
            np.concatenate([self.pair_value, held]),
            np.concatenate([self.pair_count, counts[held].astype(np.int64)]),
            np.append(self.pair_ptr, self.pair_ptr[-1] + held.shape[0]),
        )

    @property
    def virtual(self) -> NDArray[np.int64]:
        """(G,) the virtual members of each group: its size less its values' counts."""
        held = np.bincount(self.pair_group, weights=self.pair_count, minlength=self.n_groups)
        return self.size - held.astype(np.int64)

    @property
    def n_groups(self) -> int:
        return int(self.size.shape[0])


@dataclass(frozen=True, eq=False)
class ReleasePlan:
    """Everything a release publishes and commits.

    ``group`` (n,) int64 per snapshot row, -1 = suppressed; ``layout`` its :class:`ReleaseLayout`
    (groups and sensitive pairs, built once here; the renderer adds the bounds). ``values`` is the
    store's value dictionary extended with this release's new values; ``value_of_local`` (V,) maps
    the table's local codes to global ids. ``published`` (p,) int64 rows in ``group >= 0``.
    ``history`` is the merged history of the committed rows (:attr:`committed`, row i for
    ``committed[i]``): the published ones linked to their group's values, the suppressed ones to the
    suppressed set's. ``breach`` (p,) float64 is each published individual's (virtual members
    included) largest breach probability over protected values; ``suppressed_breach`` the largest
    over the suppressed individuals' pairs that were not at the bound before (0 without any).
    """

    layout: ReleaseLayout
    contents: GroupContents
    values: tuple[str, ...]
    value_of_local: NDArray[np.int64]
    protected: NDArray[np.bool_]
    published: NDArray[np.int64]
    history: HistoryRows
    breach: NDArray[np.float64]
    strategy: Strategy
    suppressed_set: SuppressedSet
    suppressed_breach: float = 0.0
    spent_pairs: int = 0
    """(individual, protected value) pairs of this release's individuals past ``1/l``: linked
    by a suppressed set while at the bound (now or in an earlier release)."""
    spent_people: int = 0
    """This release's individuals with such a pair."""
    virtual: NDArray[np.bool_] | None = None
    """(n,) the rows that are virtual candidates (:mod:`~stream_release.core.grouping.virtual`);
    ``None``: none. A candidate in no group is not in the release at all."""

    @property
    def group(self) -> NDArray[np.int64]:
        """(n,) int64 group id per snapshot row, -1 = suppressed (the layout's)."""
        return self.layout.group

    @property
    def real(self) -> NDArray[np.bool_]:
        """(n,) the snapshot's rows (not virtual candidates)."""
        if self.virtual is None:
            return np.ones(self.group.shape[0], dtype=np.bool_)
        return ~self.virtual

    @property
    def suppressed(self) -> int:
        return int(np.count_nonzero((self.group < 0) & self.real))

    @property
    def records_in(self) -> int:
        """The snapshot's rows."""
        return int(np.count_nonzero(self.real))

    @property
    def published_real(self) -> int:
        """The snapshot's rows in a group (virtual members aside)."""
        return int(np.count_nonzero((self.group >= 0) & self.real))

    @property
    def committed(self) -> NDArray[np.int64]:
        """(c,) the rows whose history the release commits, ascending (row i of ``history``
        for ``committed[i]``): every row of the snapshot and every virtual member."""
        return np.flatnonzero(self.real | (self.group >= 0)).astype(np.int64)

    def breach_summary(self) -> BreachSummary:
        """``bound``, ``max``, ``p50``, ``p99`` of the published individuals' breach (their
        spent pairs aside), ``spent``: the release's individuals' pairs past the bound, and
        ``spent_people``: the individuals with one."""
        b = self.breach
        return BreachSummary(
            bound=1.0 / self.strategy.ell,
            max=float(b.max()) if b.size else 0.0,
            p50=float(np.quantile(b, 0.5)) if b.size else 0.0,
            p99=float(np.quantile(b, 0.99)) if b.size else 0.0,
            spent=self.spent_pairs,
            spent_people=self.spent_people,
        )


def protected_mask(
    table: EncodedTable, protected: tuple[str, ...] | list[str]
) -> NDArray[np.bool_]:
    """(V,) bool: which of the release's values are protected (all when ``protected`` is empty)."""
    if not protected:
        return np.ones(len(table.sensitive_values), dtype=np.bool_)
    wanted = set(protected)
    return np.array([v in wanted for v in table.sensitive_values], dtype=np.bool_)


def plan_release(
    table: EncodedTable,
    history: HistoryRows,
    history_values: tuple[str, ...],
    strategy: Strategy,
    *,
    protected: tuple[str, ...] | list[str] = (),
    min_group_size: int = 1,
    grouping: GroupingSettings | None = None,
    virtual: NDArray[np.bool_] | None = None,
    set_floor: Mapping[str, float] | None = None,
    rng: np.random.Generator | None = None,
    past_horizon: bool | None = None,
) -> ReleasePlan:
    """Group ``table`` under ``strategy`` given the history of its rows.

    Parameters
    ----------
    table : the encoded snapshot (n rows)
    history : history of the n rows, row i for ``table.ids[i]``, global value ids
    history_values : the store's value dictionary (global id -> value)
    strategy : the ratio strategy (Wong et al. 2010, §6)
    protected : protected sensitive values; empty = all
    min_group_size : k-anonymity floor on every group
    virtual : (n,) bool, the rows that are virtual candidates (people of the register absent
        from the snapshot, holding :data:`~stream_release.core.grouping.virtual.NO_VALUE`,
        :func:`~stream_release.core.grouping.virtual.with_candidates`): they join groups that need
        them and are never suppressed; the others are left out of the release
    set_floor : value -> the least ratio ``R(S,s)`` the suppressed set must hold (a part of a
        release cut on shards: what every part's suppressed members need, so that the union
        of the parts' sets holds it; :func:`relink_suppressed`)
    rng : the order in which published groups become decoys where the suppressed set needs
        them (:func:`~stream_release.core.grouping.suppressed_set.decoy_order`); the caller
        keys it with a secret and the release's sequence (:class:`~stream_release.pipeline.
        publisher.Publisher`). Default: a fixed seed (tests and examples)
    past_horizon : whether the release lies past the series' horizon
        (:mod:`stream_release.config._horizon`): past it, the set's decoys are held to Theorem
        1's bound and its unplaced rows to the per-release bound; inside it (``False``) they
        keep their plan, and a row withheld for its history refuses the release (a setting
        that lasts the horizon withholds nobody: the histories were spent under another).
        ``None``: not known (the set's members keep their plan)

    Raises
    ------
    GuaranteeUnsatisfiable
        if the parameters are infeasible for the data (names the value and the largest
        feasible setting), or if any published individual would breach ``1/l``.
    """
    grouping = grouping if grouping is not None else GroupingSettings()
    if not strategy.uses_history:
        warnings.warn(
            "strategy 'localized' bounds each release alone (ratio l, no history): it does not "
            "meet the global guarantee, and the audit will show breaches above 1/l",
            PrivacyLeakWarning,
            stacklevel=2,
        )
    no_value = no_value_code(table)
    absent = virtual if virtual is not None else np.zeros(table.n_rows, dtype=np.bool_)
    if no_value is not None and np.any(absent != (table.sensitive == no_value)):
        raise ValueError("virtual: exactly the rows holding NO_VALUE are virtual candidates")
    values, value_of_local, local_of_global = extend_dictionary(
        history_values, table.sensitive_values, skip=no_value
    )
    is_protected = protected_mask(table, protected)
    if no_value is not None:
        is_protected[no_value] = False

    requirements = requirements_of(table, history, local_of_global, is_protected, strategy)
    grouper = ReleaseGrouping(table, is_protected, requirements, min_group_size, grouping)
    floor = None
    if set_floor:
        names = table.sensitive_values
        floor = np.array([float(set_floor.get(v, 0.0)) for v in names], dtype=np.float64)
    protected_global = global_protected_mask(values, value_of_local, is_protected, protected)
    cap = group_size_cap(strategy.base_ratio, min_group_size, grouper.factor)
    withheld = withheld_rows(history, protected_global, strategy, cap) & ~absent
    if past_horizon is False and withheld.any():
        raise GuaranteeUnsatisfiable(
            f"{int(np.count_nonzero(withheld))} individuals of this release, inside the "
            "series' horizon, have a plan past the group-size cap for some protected value: "
            "their budgets were spent under other settings (a larger horizon or k_prime set "
            "mid-series) and the horizon's promise (nobody withheld, nobody past 1/l) cannot "
            "be kept; publish under the settings the series started with, or plan a new "
            f"series: {NEW_SERIES_CAVEAT}",
            public=True,
        )
    rng = rng if rng is not None else np.random.default_rng(0)
    group, suppressed = grouper.group_release(
        strategy, absent, withheld, rng, floor, past_horizon=bool(past_horizon)
    )
    layout = ReleaseLayout.of(table, group)  # once per release: render reads it too
    contents = GroupContents.of(table, layout)
    check_sizes(contents.size, min_group_size)
    suppressed_rows = (group < 0) & ~absent
    pairs = _pairs(
        contents, value_of_local, table.sensitive[suppressed_rows], len(table.sensitive_values)
    )
    return _link_and_check(
        _Linking(table, history, absent, is_protected, protected, strategy, virtual),
        layout,
        contents,
        suppressed,
        values,
        value_of_local,
        pairs,
    )


@dataclass(frozen=True)
class SuppressedUnion:
    """The suppressed rows of a whole release cut in parts on shards: how many hold each value,
    and how many there are. An adversary sees them as one set (the published counts against
    the snapshot's totals; :mod:`~stream_release.core.grouping.suppressed_set`), whichever
    shard each came from, so every member is linked to the union's values."""

    counts: dict[str, int]
    size: int


def relink_suppressed(
    table: EncodedTable,
    history: HistoryRows,
    plan: ReleasePlan,
    union: SuppressedUnion,
    protected: tuple[str, ...] | list[str] = (),
) -> ReleasePlan:
    """``plan`` (this shard's part, planned against ``history``, its rows' history before the
    release) with its suppressed rows linked to the ``union`` of every part's suppressed rows
    instead of its own (Lemma 4 of [WFLWX10], the union as one group), the values the union
    adds appended to the dictionary, and every bound checked again. As in one set, the pairs of
    the members withheld for their history for the union's protected values are held to the
    per-release bound only (*exempt*; :mod:`~stream_release.core.grouping.suppressed_set`).

    Raises
    ------
    GuaranteeUnsatisfiable
        A member's breach would pass ``1/l`` with the union's linkages (its own set held it).
    ValueError
        The union does not hold this part's suppressed rows.
    """
    group, absent = plan.group, _absent(plan)
    suppressed_rows = (group < 0) & ~absent
    own = np.bincount(table.sensitive[suppressed_rows], minlength=len(table.sensitive_values))
    names = table.sensitive_values
    if union.size < int(suppressed_rows.sum()) or any(
        union.counts.get(names[v], 0) < int(c) for v, c in enumerate(own.tolist()) if c
    ):
        raise ValueError("the union of the suppressed rows does not hold this part's")
    index = {v: i for i, v in enumerate(plan.values)}
    values = list(plan.values)
    for value in sorted(union.counts):
        if value not in index:
            index[value] = len(values)
            values.append(value)
    held = sorted((index[v], c) for v, c in union.counts.items() if c > 0)
    star_values = np.array([g for g, _ in held], dtype=np.int64)
    star_counts = np.array([c for _, c in held], dtype=np.int64)
    pairs = _pairs(plan.contents, plan.value_of_local)
    if suppressed_rows.any():
        pairs = pairs.with_group(star_values, star_counts, union.size)
    is_protected = plan.protected
    linking = _Linking(table, history, absent, is_protected, protected, plan.strategy, plan.virtual)
    wanted = set(protected)
    set_values = np.array([g for g, _ in held if not wanted or values[g] in wanted], dtype=np.int64)
    # the withheld members, and past the horizon the unplaced ones, as in the part's own set
    own_set = plan.suppressed_set
    mine = own_set.withheld
    if not own_set.keep_plan:
        mine = np.union1d(mine, own_set.unplaced).astype(np.int64)
    exempt_rows = np.repeat(mine, set_values.shape[0])
    exempt_values = np.tile(set_values, mine.shape[0])
    exempt_members = mine if set_values.size else np.zeros(0, dtype=np.int64)
    suppressed = replace(plan.suppressed_set, exempt_members=exempt_members)
    return _link_and_check(
        linking,
        plan.layout,
        plan.contents,
        suppressed,
        tuple(values),
        plan.value_of_local,
        pairs,
        (exempt_rows, exempt_values),
    )


@dataclass(frozen=True)
class _Pairs:
    """What each group links its members to, by global value id: ``ptr`` (G'+1,) into
    ``value`` / ``count`` (sorted by value within a group), ``size`` (G',). The groups, then
    the suppressed set as one more group when it has rows."""

    ptr: NDArray[np.int64]
    value: NDArray[np.int64]
    count: NDArray[np.int64]
    size: NDArray[np.int64]

    def with_group(self, value: NDArray[np.int64], count: NDArray[np.int64], size: int) -> _Pairs:
        return _Pairs(
            np.append(self.ptr, self.ptr[-1] + value.shape[0]),
            np.concatenate([self.value, value]),
            np.concatenate([self.count, count]),
            np.append(self.size, np.int64(size)),
        )


def _pairs(
    contents: GroupContents,
    value_of_local: NDArray[np.int64],
    star_values: NDArray[np.integer] | None = None,
    n_values: int = 0,
) -> _Pairs:
    """The groups' pairs by global value id, and the suppressed set's own (``star_values``:
    its rows' local codes) as one more group."""
    if star_values is not None:
        contents = contents.with_group(star_values, n_values)
    global_value = value_of_local[contents.pair_value]
    count = contents.pair_count
    if np.any(np.diff(value_of_local) < 0) and global_value.size:
        # pairs are by local code: re-sort by global id within each group
        order = np.argsort(contents.pair_group * (int(global_value.max()) + 1) + global_value)
        global_value, count = global_value[order], count[order]
    return _Pairs(contents.pair_ptr, global_value, count, contents.size)


@dataclass(frozen=True)
class _Linking:
    """What linking a planned release needs besides its groups."""

    table: EncodedTable
    history: HistoryRows
    absent: NDArray[np.bool_]
    is_protected: NDArray[np.bool_]
    protected: tuple[str, ...] | list[str]
    strategy: Strategy
    virtual: NDArray[np.bool_] | None


def _absent(plan: ReleasePlan) -> NDArray[np.bool_]:
    if plan.virtual is None:
        return np.zeros(plan.group.shape[0], dtype=np.bool_)
    return plan.virtual


def _link_and_check(
    linking: _Linking,
    layout: ReleaseLayout,
    contents: GroupContents,
    suppressed: SuppressedSet,
    values: tuple[str, ...],
    value_of_local: NDArray[np.int64],
    pairs: _Pairs,
    exempt_pairs: tuple[NDArray[np.int64], NDArray[np.int64]] | None = None,
) -> ReleasePlan:
    """Link every member to its group's values (the suppressed rows to ``pairs``' last group),
    merge the histories and check every bound (Lemma 4, Theorem 1 of [WFLWX10]);
    ``exempt_pairs`` (table rows, global values): the exempt pairs when they are not the
    suppressed set's own (:func:`relink_suppressed`).

    O(n + m log m), m the merged entries: the merge is linear (:func:`merge_linkages`), the
    bounds elementwise, the entries linked now found by a linear pass (:func:`linked_entries`).
    """
    table, history, absent, strategy = (
        linking.table,
        linking.history,
        linking.absent,
        linking.strategy,
    )
    group = layout.group
    published = np.flatnonzero(group >= 0)
    committed = np.flatnonzero(~absent | (group >= 0)).astype(np.int64)
    suppressed_rows = (group < 0) & ~absent
    linked = np.where(group >= 0, group, np.where(absent, -1, contents.n_groups))
    factor = log_survival_factor(
        pairs.size[np.repeat(np.arange(pairs.size.shape[0]), np.diff(pairs.ptr))], pairs.count
    )
    merged = merge_linkages(history, committed, linked[committed], pairs.ptr, pairs.value, factor)
    history = history.take(committed) if absent.any() else history
    if exempt_pairs is None:
        exempt = exempt_entries(merged, committed, suppressed, value_of_local)
    else:
        rows, gids = exempt_pairs
        span = int(max(merged.value.max(initial=0), gids.max(initial=0))) + 1
        keys = committed[merged.owner()] * span + merged.value
        exempt = np.isin(keys, rows * span + gids)
    protected_global = global_protected_mask(
        values, value_of_local, linking.is_protected, linking.protected
    )
    is_protected_entry = protected_global[merged.value]
    lower, upper = breach_bounds(merged.log_p, merged.links)
    spent = spent_entries(lower, is_protected_entry, strategy)
    linked_now = linked_entries(history, merged)
    breach_all = np.zeros(table.n_rows, dtype=np.float64)
    breach_all[committed] = individual_breach(merged, is_protected_entry & ~spent & ~exempt)
    check_bound(
        merged,
        upper,
        is_protected_entry & linked_now & ~exempt,
        committed,
        group,
        breach_all,
        strategy,
    )
    return ReleasePlan(
        layout=layout,
        contents=contents,
        values=values,
        value_of_local=value_of_local,
        protected=linking.is_protected,
        published=published,
        history=merged,
        breach=breach_all[published],
        strategy=strategy,
        suppressed_set=suppressed,
        suppressed_breach=float(breach_all[suppressed_rows].max(initial=0.0)),
        spent_pairs=int(np.count_nonzero(spent)),
        spent_people=int(np.unique(merged.owner()[spent]).shape[0]),
        virtual=linking.virtual if absent.any() else None,
    )
