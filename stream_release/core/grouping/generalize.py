"""Publishing groups: the generalized QIDs, sensitive counts and anatomy members of each group.

A release assigns each row of an :class:`~stream_release.core.table.EncodedTable` a group id
``group[i]`` in ``0..G-1``, or ``-1`` when the row is suppressed. This module turns that
assignment into the content of the release lines of docs/contract.md §4:

* :func:`generalize_groups`: each group's ``qid`` object. A numeric attribute becomes its value
  when every member has it, else ``[lo, hi]`` (inclusive; integral numbers as ints); a hierarchy
  attribute becomes the label of the lowest common ancestor of the members' leaves (the leaf
  itself when all members share it, ``*`` for the root); a set attribute becomes its value when
  every member has it, else the sorted list of the members' distinct values.
* :func:`sensitive_counts`: each group's multiset of sensitive values.
* :func:`anatomy_members`: each group's exact QIDs (the ``anatomy`` format), ordered by the QID
  codes so that the order depends on nothing but the QIDs.

Lowest common ancestor
----------------------
Leaf codes are in depth-first order (:mod:`stream_release.core.table`), so the leaves under any node
are one contiguous code range. Hence the lowest common ancestor of a set of leaves is that of its
smallest and largest codes ``lo`` and ``hi``: the lowest level ``h`` with
``levels[lo, h] == levels[hi, h]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from stream_release.core.table import Attribute, EncodedTable
from stream_release.errors import InvalidParameter

QidValue = int | float | str | list[int] | list[float] | list[str]
"""A generalized value: the exact value, a hierarchy label, ``[lo, hi]`` or a list of values."""


@dataclass(frozen=True, eq=False)
class GroupLayout:
    """The published rows of a release, sorted by group.

    Attributes
    ----------
    rows : (m,) int64
        Indices of the published rows (``group >= 0``), sorted by group and, within a group, by
        row index. ``m`` is the number of published rows.
    starts : (G,) int64
        Offset in ``rows`` of each group's first row.
    sizes : (G,) int64
        Rows in each group, all >= 1.
    n_rows : int
        Rows of the snapshot, suppressed ones included.
    """

    rows: NDArray[np.int64]
    starts: NDArray[np.int64]
    sizes: NDArray[np.int64]
    n_rows: int

    @property
    def n_groups(self) -> int:
        return int(self.sizes.shape[0])

    @property
    def published(self) -> int:
        return int(self.rows.shape[0])

    @property
    def suppressed(self) -> int:
        return self.n_rows - self.published

    def group_of_sorted(self) -> NDArray[np.int64]:
        """(m,) int64 group id of each entry of ``rows``."""
        return np.repeat(np.arange(self.n_groups, dtype=np.int64), self.sizes)


def group_layout(group: NDArray[np.integer], n_rows: int | None = None) -> GroupLayout:
    """Validate a group assignment and sort the published rows by group.

    Parameters
    ----------
    group : (n,) integer
        Group id of each row, in ``0..G-1`` with every id used, or ``-1`` for a suppressed row.
    n_rows : expected ``n`` (the table's rows), checked when given

    Raises
    ------
    InvalidParameter
        Not a 1-D integer array, the wrong length, an id below -1, or an unused id.
    """
    arr = np.asarray(group)
    if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.integer):
        raise InvalidParameter(
            f"group: expected a 1-D integer array of group ids, got shape {arr.shape} dtype "
            f"{arr.dtype}"
        )
    if n_rows is not None and arr.shape[0] != n_rows:
        raise InvalidParameter(
            f"group has {arr.shape[0]} entries but the table has {n_rows} rows; give one group id "
            "(or -1) per row"
        )
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < -1:
        raise InvalidParameter(
            f"group holds {int(arr.min())}; group ids are 0..G-1, and -1 marks a suppressed row"
        )
    published = arr >= 0
    n_groups = int(arr.max()) + 1 if arr.size else 0
    sizes = np.bincount(arr[published], minlength=n_groups).astype(np.int64)
    empty = np.flatnonzero(sizes == 0)
    if empty.size:
        raise InvalidParameter(
            f"group ids must be 0..G-1 with no gaps, but group {int(empty[0])} of {n_groups} has "
            "no rows; renumber the groups"
        )
    order = np.argsort(arr, kind="stable")
    rows = order[arr.shape[0] - int(np.count_nonzero(published)) :].astype(np.int64)
    starts = np.zeros(n_groups, dtype=np.int64)
    np.cumsum(sizes[:-1], out=starts[1:])
    return GroupLayout(rows=rows, starts=starts, sizes=sizes, n_rows=int(arr.shape[0]))


def code_bounds(
    table: EncodedTable, layout: GroupLayout
) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
    """Smallest and largest code of every attribute in every group: two (G, d) int32 arrays."""
    d = len(table.attributes)
    if layout.n_groups == 0:
        empty = np.empty((0, d), dtype=np.int32)
        return empty, empty.copy()
    codes = table.qid[layout.rows]
    lo = np.minimum.reduceat(codes, layout.starts, axis=0)
    hi = np.maximum.reduceat(codes, layout.starts, axis=0)
    return lo.astype(np.int32, copy=False), hi.astype(np.int32, copy=False)


def lowest_common_ancestor(
    attribute: Attribute, lo: NDArray[np.integer], hi: NDArray[np.integer]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Level and node id of the lowest common ancestor of leaf codes ``lo`` and ``hi``.

    Parameters
    ----------
    attribute : a ``hierarchy`` attribute
    lo, hi : (G,) leaf codes, ``lo <= hi``

    Returns ``level`` and ``node``, each (G,) int64: ``attribute.labels[level][node]`` is the
    label. Level 0 (the leaf itself) exactly when ``lo == hi``.
    """
    levels = _levels(attribute)
    equal = levels[lo] == levels[hi]  # (G, height); the root column is all True
    level = np.argmax(equal, axis=1).astype(np.int64)
    node = levels[lo, level].astype(np.int64)
    return level, node


def leaf_range(
    attribute: Attribute, level: NDArray[np.integer], node: NDArray[np.integer]
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """First and last leaf code under hierarchy nodes ``(level, node)``, each (G,) int64."""
    levels = _levels(attribute)
    first, last, offset = _node_ranges(levels)
    index = offset[level] + node
    return first[index], last[index]


def generalized_bounds(
    table: EncodedTable, layout: GroupLayout
) -> tuple[NDArray[np.int32], NDArray[np.int32]]:
    """The code range each group's published value covers, per attribute: (G, d) int32 twice.

    numeric: the members' smallest and largest code; hierarchy: the leaf range of the lowest
    common ancestor; set: the members' smallest and largest code (the published value is the set
    of distinct codes inside this range, not the whole range).
    """
    lo, hi = code_bounds(table, layout)
    for j, attribute in enumerate(table.attributes):
        if attribute.kind == "hierarchy" and layout.n_groups:
            level, node = lowest_common_ancestor(attribute, lo[:, j], hi[:, j])
            first, last = leaf_range(attribute, level, node)
            lo[:, j] = first
            hi[:, j] = last
    return lo, hi


def distinct_codes(
    table: EncodedTable, layout: GroupLayout, j: int
) -> tuple[NDArray[np.int64], NDArray[np.int32]]:
    """Distinct codes of attribute ``j`` in every group, as CSR.

    Returns ``ptr`` (G+1,) int64 and ``codes`` (ptr[-1],) int32: group ``g``'s distinct codes
    are ``codes[ptr[g]:ptr[g+1]]``, ascending.
    """
    size = max(table.attributes[j].size, 1)
    keys = layout.group_of_sorted() * size + table.qid[layout.rows, j]
    pairs = np.unique(keys)
    ptr = np.zeros(layout.n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs // size, minlength=layout.n_groups), out=ptr[1:])
    return ptr, (pairs % size).astype(np.int32)


def sensitive_pairs(
    table: EncodedTable, layout: GroupLayout
) -> tuple[NDArray[np.int64], NDArray[np.int32], NDArray[np.int64]]:
    """The (group, sensitive value, count) triples with a positive count.

    Returns ``ptr`` (G+1,) int64, ``values`` (K,) int32 and ``counts`` (K,) int64: group ``g``
    holds ``counts[k]`` rows of value code ``values[k]`` for ``ptr[g] <= k < ptr[g+1]``, values
    ascending.
    """
    n_values = max(len(table.sensitive_values), 1)
    keys = layout.group_of_sorted() * n_values + table.sensitive[layout.rows]
    pairs, counts = np.unique(keys, return_counts=True)
    ptr = np.zeros(layout.n_groups + 1, dtype=np.int64)
    np.cumsum(np.bincount(pairs // n_values, minlength=layout.n_groups), out=ptr[1:])
    return ptr, (pairs % n_values).astype(np.int32), counts.astype(np.int64)


def python_values(attribute: Attribute) -> list[int | float | str]:
    """Decoded value of every code as a JSON-ready Python object (integral numbers as ints)."""
    if attribute.kind == "numeric":
        return [_number(x) for x in attribute.domain.tolist()]
    return [str(x) for x in attribute.domain.tolist()]


def generalize_groups(table: EncodedTable, group: NDArray[np.integer]) -> list[dict[str, QidValue]]:
    """The generalized QIDs of every group (docs/contract.md §4, ``qid``), in group id order.

    Parameters
    ----------
    table : the encoded snapshot, n rows
    group : (n,) integer group id per row, ``0..G-1``, or -1 for a suppressed row

    Returns
    -------
    list of G dicts, attribute name (in ``table.attributes`` order) -> value: numeric ``v`` or
    ``[lo, hi]``; hierarchy the lowest common ancestor's label; set ``v`` or the sorted list of
    distinct values.
    """
    layout = group_layout(group, table.n_rows)
    if layout.n_groups == 0:
        return []
    lo, hi = code_bounds(table, layout)
    columns: list[list[QidValue]] = []
    for j, attribute in enumerate(table.attributes):
        if attribute.kind == "numeric":
            values = python_values(attribute)
            columns.append(
                [
                    values[a] if a == b else [values[a], values[b]]  # type: ignore[list-item]
                    for a, b in zip(lo[:, j].tolist(), hi[:, j].tolist(), strict=True)
                ]
            )
        elif attribute.kind == "hierarchy":
            level, node = lowest_common_ancestor(attribute, lo[:, j], hi[:, j])
            labels = attribute.labels or ()
            flat = [label for level_labels in labels for label in level_labels]
            offset = np.cumsum([0, *(len(level_labels) for level_labels in labels)])
            columns.append([flat[i] for i in (offset[level] + node).tolist()])
        else:
            ptr, codes = distinct_codes(table, layout, j)
            values = python_values(attribute)
            decoded = [values[c] for c in codes.tolist()]
            columns.append(
                [
                    decoded[a] if b - a == 1 else decoded[a:b]  # type: ignore[misc]
                    for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist(), strict=True)
                ]
            )
    names = table.qid_names
    return [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]


def sensitive_counts(table: EncodedTable, group: NDArray[np.integer]) -> list[dict[str, int]]:
    """Each group's sensitive values with their counts (docs/contract.md §4, ``sensitive``).

    Parameters
    ----------
    table : the encoded snapshot, n rows
    group : (n,) integer group id per row, ``0..G-1``, or -1 for a suppressed row

    Returns a list of G dicts, value -> count (>= 1), values in sorted order.
    """
    layout = group_layout(group, table.n_rows)
    return multisets(table.sensitive_values, *sensitive_pairs(table, layout))


def multisets(
    names: tuple[str, ...],
    ptr: NDArray[np.int64],
    values: NDArray[np.integer],
    counts: NDArray[np.int64],
) -> list[dict[str, int]]:
    """The (group, value, count) triples of :func:`sensitive_pairs` as one dict per group,
    value name -> count, in the triples' order."""
    labels = [names[v] for v in values.tolist()]
    numbers = counts.tolist()
    return [
        dict(zip(labels[a:b], numbers[a:b], strict=True))
        for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist(), strict=True)
    ]


def anatomy_members(
    table: EncodedTable, group: NDArray[np.integer]
) -> list[list[dict[str, int | float | str]]]:
    """The exact QIDs of every group's members (docs/contract.md §4, ``anatomy`` format).

    Parameters
    ----------
    table : the encoded snapshot, n rows
    group : (n,) integer group id per row, ``0..G-1``, or -1 for a suppressed row

    Returns
    -------
    list of G lists; each holds one dict (attribute name -> exact value) per member, sorted by
    the members' QID codes (lexicographically, in attribute order). The order is a function of
    the QIDs alone, so it carries no information about who holds which sensitive value; members
    with equal QIDs are indistinguishable in the output.
    """
    layout = group_layout(group, table.n_rows)
    if layout.n_groups == 0:
        return []
    codes = table.qid[layout.rows]
    keys = [codes[:, j] for j in reversed(range(codes.shape[1]))]
    order = np.lexsort((*keys, layout.group_of_sorted()))  # the last key (group) is primary
    codes = codes[order]
    columns = []
    for j, attribute in enumerate(table.attributes):
        lookup = np.empty(attribute.size, dtype=object)
        lookup[:] = python_values(attribute)
        columns.append(lookup[codes[:, j]].tolist())
    names = table.qid_names
    members = [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]
    ends = layout.starts + layout.sizes
    return [members[a:b] for a, b in zip(layout.starts.tolist(), ends.tolist(), strict=True)]


def _number(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)


def _levels(attribute: Attribute) -> NDArray[np.int32]:
    if attribute.kind != "hierarchy" or attribute.levels is None:
        raise InvalidParameter(
            f"attribute {attribute.name!r} is {attribute.kind!r}; lowest common ancestors need a "
            "hierarchy attribute"
        )
    return attribute.levels


def _node_ranges(
    levels: NDArray[np.int32],
) -> tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]]:
    """First and last leaf of every node, all levels flattened; node (h, i) is at offset[h] + i."""
    firsts, lasts, sizes = [], [], []
    for h in range(levels.shape[1]):
        column = levels[:, h]
        n_nodes = int(column[-1]) + 1 if column.size else 0
        ids = np.arange(n_nodes)
        firsts.append(np.searchsorted(column, ids, side="left"))
        lasts.append(np.searchsorted(column, ids, side="right") - 1)
        sizes.append(n_nodes)
    offset = np.zeros(len(sizes), dtype=np.int64)
    np.cumsum(sizes[:-1], out=offset[1:])
    return (
        np.concatenate(firsts).astype(np.int64),
        np.concatenate(lasts).astype(np.int64),
        offset,
    )
