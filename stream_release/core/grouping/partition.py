"""Form the groups of one release: the public entry point of the grouping.

The group-size constraint (Wong et al. 2010, Theorem 1 and §6) arrives as a base ratio plus the
per-individual requirements that exceed it (:class:`Requirements`); the compiled passes are
in :mod:`stream_release.core.grouping.passes`.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from stream_release.core.grouping.extent import KernelTable
from stream_release.core.grouping.merge import merge_leftovers
from stream_release.core.grouping.passes import group_rows
from stream_release.core.grouping.placer import Placer, WorkBudget
from stream_release.core.grouping.requirements import Requirements, csr_rows
from stream_release.core.grouping.tally import GroupRules
from stream_release.core.table import Attribute, EncodedTable


def form_groups(
    table: EncodedTable,
    protected: NDArray[np.bool_],
    requirements: Requirements,
    *,
    min_group_size: int,
    eligible: NDArray[np.bool_],
    max_group_factor: float,
    insertion_window: int,
) -> NDArray[np.int64]:
    """Group the ``eligible`` rows of ``table`` so that every group is valid. O(n log n) in
    the rows, plus O(window) per row left over (:func:`group_rows`, :func:`merge_leftovers`).

    Parameters
    ----------
    table : the encoded release
    protected : (V,) bool over ``table.sensitive_values``
    requirements : base ratio and per-row exceptions
    min_group_size : k-anonymity floor, >= 1
    eligible : (n,) bool; other rows are suppressed
    max_group_factor : a group is never grown beyond this multiple of ``max(base, k)`` rows
    insertion_window : how far (in k-d order) a leftover row looks for a group to join, or
        for groups to merge with (:func:`~stream_release.core.grouping.merge.merge_leftovers`)

    Returns
    -------
    (n,) int64 group id per row, ``0..G-1`` in k-d order; ``-1`` = suppressed.
    """
    cap = group_size_cap(requirements.base, min_group_size, max_group_factor)
    perm = np.flatnonzero(eligible).astype(np.int64)
    group, _ = group_rows(
        kernel_table(table),
        group_rules(protected, requirements, min_group_size=min_group_size, cap=cap),
        perm,
        int(insertion_window),
    )
    # the rows still left over: merged with their nearest groups where that makes a valid one
    return merge_leftovers(
        group,
        perm,
        np.ascontiguousarray(table.sensitive),
        np.ascontiguousarray(protected, dtype=np.bool_),
        requirements,
        min_group_size=min_group_size,
        cap=cap,
        window=insertion_window,
    )


def kernel_table(table: EncodedTable) -> KernelTable:
    """``table`` as the compiled passes read it: its codes, the scale of each attribute
    (:func:`attribute_scale`) and the leaf ranges of its hierarchies (:func:`hierarchy_spans`)."""
    height, span_lo, span_hi = hierarchy_spans(table)
    return KernelTable(
        np.ascontiguousarray(table.qid),
        np.ascontiguousarray(table.sensitive),
        attribute_scale(table),
        height,
        span_lo,
        span_hi,
    )


def group_rules(
    protected: NDArray[np.bool_], requirements: Requirements, *, min_group_size: int, cap: int
) -> GroupRules:
    """What the compiled passes hold every group to: ``protected`` (V,), the base ratio and each
    row's higher requirements, the floor ``min_group_size`` and the ``cap``."""
    return GroupRules(
        np.ascontiguousarray(protected, dtype=np.bool_),
        float(requirements.base),
        int(min_group_size),
        int(cap),
        requirements.ptr,
        requirements.value,
        requirements.ratio,
    )


REGROUP_GROUPS = (4, 16, 64)
"""How many of its nearest groups a row no group takes is regrouped with, one try each."""


def placer_for(
    table: EncodedTable,
    protected: NDArray[np.bool_],
    requirements: Requirements,
    *,
    min_group_size: int,
    max_group_factor: float,
) -> Placer:
    """The :class:`~stream_release.core.grouping.placer.Placer` of a release's settings: one per
    release serves every :func:`place_in_groups` call."""
    return Placer(
        np.ascontiguousarray(table.qid),
        attribute_scale(table),
        np.ascontiguousarray(table.sensitive),
        np.ascontiguousarray(protected, dtype=np.bool_),
        requirements,
        cap=group_size_cap(requirements.base, min_group_size, max_group_factor),
        min_group_size=min_group_size,
    )


def place_in_groups(
    table: EncodedTable,
    protected: NDArray[np.bool_],
    requirements: Requirements,
    group: NDArray[np.int64],
    rows: NDArray[np.int64],
    *,
    min_group_size: int,
    max_group_factor: float,
    insertion_window: int,
    placer: Placer,
    budget: WorkBudget | None = None,
) -> NDArray[np.int64]:
    """Put ungrouped ``rows`` into the groups (``placer``: :func:`placer_for` these settings,
    kept for the release): into the nearest group that stays valid with one of them, or for a
    member another group takes (:meth:`~stream_release.core.grouping.placer.Placer.place`); failing
    that, the row and its :data:`REGROUP_GROUPS` nearest groups are grouped again
    (:func:`form_groups`), kept only when every one of their rows finds a group. New groups
    take new ids. The swaps and the regrouping spend the release's ``budget``
    (:class:`~stream_release.core.grouping.placer.WorkBudget`; none: unbounded): O(rows)
    searches plus at most the budget's swaps and regrouped rows, O(n log n) in all."""
    group = placer.place(group, rows, budget)
    for x in rows.tolist():
        for k in REGROUP_GROUPS:
            if group[x] >= 0 or (budget is not None and budget.regroup == 0):
                break
            _, near = placer.nearest(group, x, k)
            rows_again = np.union1d(near, [x]).astype(np.int64)  # ascending: the table's order
            if not may_all_group(table.sensitive, protected, requirements, rows_again):
                continue  # no grouping of them all is valid: form_groups would leave some
            if budget is not None and not budget.spend_regroup(rows_again.shape[0]):
                break
            # grouped as a table of their own (the same groups: the passes read rows in
            # order, never their numbers), not as the eligible rows of the whole release,
            # which costs arrays of the release's size per call (hundreds of calls)
            again = form_groups(
                table.take(rows_again), protected, requirements.take(rows_again),
                min_group_size=min_group_size, eligible=np.ones(rows_again.shape[0], np.bool_),
                max_group_factor=max_group_factor, insertion_window=insertion_window,
            )  # fmt: skip
            if np.all(again >= 0):
                group = group.copy()
                group[rows_again] = again + int(group.max()) + 1
    return group


def may_all_group(
    sensitive: NDArray[np.int32],
    protected: NDArray[np.bool_],
    requirements: Requirements,
    rows: NDArray[np.int64],
) -> bool:
    """Whether ``rows`` pass a test every set of rows split into valid groups passes: for each
    protected value ``t``, ``|rows| >= sum over the rows o holding t of r(o, t)`` (each group
    ``G`` has ``|G| >= n(G,t) R(G,t)``, at least the sum of its holders' ratios ``r(o,t)``,
    at least the base; summed over the groups). False: no grouping of them all exists.
    O(their rows and requirement entries)."""
    own = sensitive[rows]
    mine = protected[own]
    need = np.where(mine, float(requirements.base), 0.0)
    ptr, entries = csr_rows(requirements.ptr, rows)
    owner = np.repeat(np.arange(rows.shape[0]), np.diff(ptr))
    same = requirements.value[entries] == own[owner]
    np.maximum.at(need, owner[same], requirements.ratio[entries][same])
    need[~mine] = 0.0
    total = np.bincount(own, weights=need, minlength=protected.shape[0])
    return bool(np.all(total <= rows.shape[0]))


def attribute_scale(table: EncodedTable) -> NDArray[np.float64]:
    """(d,) ``1 / (codes - 1)`` per attribute (0 for one code): code distances in ``[0, 1]``."""
    sizes = np.array([a.size for a in table.attributes], dtype=np.float64)
    return np.where(sizes > 1, 1.0 / np.maximum(sizes - 1, 1), 0.0)


def group_size_cap(base: float, min_group_size: int, max_group_factor: float) -> int:
    """The largest group a release may form: ``ceil(max(base, k) * max_group_factor)``."""
    return math.ceil(max(base, min_group_size) * max_group_factor)


Spans = tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]

_SPANS: dict[int, tuple[tuple[Attribute, ...], Spans]] = {}
""":func:`hierarchy_spans` of the last few attribute tuples, by identity (a release's tables
share theirs: :meth:`~stream_release.core.table.EncodedTable.take` keeps it)."""
SPANS_KEPT = 8


def hierarchy_spans(table: EncodedTable) -> Spans:
    """:func:`attribute_spans` of ``table``'s attributes, computed once for each attribute
    tuple among the last :data:`SPANS_KEPT` (the regrouping of a release builds hundreds of
    small tables of the same attributes). The arrays are shared: read them, never write."""
    attributes = table.attributes
    hit = _SPANS.get(id(attributes))
    if hit is not None and hit[0] is attributes:
        return hit[1]
    spans = attribute_spans(attributes)
    if len(_SPANS) >= SPANS_KEPT:
        _SPANS.pop(next(iter(_SPANS)))
    _SPANS[id(attributes)] = (attributes, spans)
    return spans


def attribute_spans(attributes: tuple[Attribute, ...]) -> Spans:
    """Leaf ranges of every hierarchy node, for the kernels' NCP arithmetic.

    Returns ``height`` (d,) int64, the number of levels of attribute j's hierarchy (0 for a
    numeric or set attribute), and ``span_lo``, ``span_hi`` (d, H, C) int64: the first and last
    leaf code under code c's ancestor at level h (leaves are in depth-first order, so the leaves
    under a node are contiguous).
    """
    d = len(attributes)
    hierarchies = [a for a in attributes if a.kind == "hierarchy" and a.levels is not None]
    h_max = max((a.levels.shape[1] for a in hierarchies if a.levels is not None), default=1)
    c_max = max((a.size for a in hierarchies), default=1)
    height = np.zeros(d, dtype=np.int64)
    span_lo = np.zeros((d, h_max, c_max), dtype=np.int64)
    span_hi = np.zeros((d, h_max, c_max), dtype=np.int64)
    for j, attribute in enumerate(attributes):
        if attribute.kind != "hierarchy" or attribute.levels is None:
            continue
        levels, size = attribute.levels, attribute.size
        height[j] = levels.shape[1]
        codes = np.arange(size)
        for h in range(levels.shape[1]):
            ids = levels[:, h]
            first = np.ones(ids.shape[0], dtype=bool)
            first[1:] = ids[1:] != ids[:-1]
            starts = codes[first]
            run = np.cumsum(first) - 1
            ends = np.append(starts[1:] - 1, size - 1)
            span_lo[j, h, :size] = starts[run]
            span_hi[j, h, :size] = ends[run]
    return height, span_lo, span_hi
