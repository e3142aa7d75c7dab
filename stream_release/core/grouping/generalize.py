"""Publishing groups: the generalized QIDs, sensitive counts and anatomy members of each group.

A release assigns each row of an :class:`~stream_release.core.table.EncodedTable` a group id
``group[i]`` in ``0..G-1``, or ``-1`` when the row is suppressed. This module turns that
assignment, or the release's :class:`~stream_release.core.grouping.layout.ReleaseLayout` built
from it, into the content of the release lines of docs/contract.md §4:

* :func:`generalize_groups`: each group's ``qid`` object. A numeric attribute becomes its value
  when every member has it, else ``[lo, hi]`` (inclusive; integral numbers as ints); a hierarchy
  attribute becomes the label of the lowest common ancestor of the members' leaves (the leaf
  itself when all members share it, ``*`` for the root); a set attribute becomes its value when
  every member has it, else the sorted list of the members' distinct values.
* :func:`sensitive_counts`: each group's multiset of sensitive values.
* :func:`anatomy_members`: each group's exact QIDs (the ``anatomy`` format), ordered by the QID
  codes so that the order depends on nothing but the QIDs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from stream_release.core.grouping.layout import (
    GroupBounds,
    ReleaseLayout,
    layout_groups,
    release_layout,
)
from stream_release.core.table import Attribute, EncodedTable

QidValue = int | float | str | list[int] | list[float] | list[str]
"""A generalized value: the exact value, a hierarchy label, ``[lo, hi]`` or a list of values."""


def python_values(attribute: Attribute) -> list[int | float | str]:
    """Decoded value of every code as a JSON-ready Python object (integral numbers as ints)."""
    if attribute.kind == "numeric":
        return [_number(x) for x in attribute.domain.tolist()]
    return [str(x) for x in attribute.domain.tolist()]


@dataclass(frozen=True)
class GeneralizedColumn:
    """One attribute's generalized value in every group, factorised: group ``g`` shows
    ``values[index[g]]`` (each distinct value once, so a renderer encodes it once)."""

    name: str
    values: list[QidValue]
    index: NDArray[np.int64]


def generalized_columns(
    table: EncodedTable, group: NDArray[np.integer] | ReleaseLayout
) -> list[GeneralizedColumn]:
    """The generalized QIDs of every group (docs/contract.md §4, ``qid``), one factorised
    column per attribute in ``table.attributes`` order: numeric ``v`` or ``[lo, hi]``;
    hierarchy the lowest common ancestor's label; set ``v`` or the sorted list of distinct
    values. :func:`generalize_groups` gives the same as one dict per group.

    Parameters
    ----------
    table : the encoded snapshot, n rows
    group : (n,) integer group id per row, ``0..G-1``, or -1 for a suppressed row; or the
        release's :class:`~stream_release.core.grouping.layout.ReleaseLayout` (read, not
        rebuilt)
    """
    groups = layout_groups(table, group)
    if groups.n_groups == 0:
        return []
    # a layout's bounds (kept by the renderer), or of an assignment: no sensitive pairs needed
    bounds = (
        group.group_bounds(table)
        if isinstance(group, ReleaseLayout)
        else GroupBounds.of(table, groups)
    )
    lo, hi = bounds.lo, bounds.hi
    columns: list[GeneralizedColumn] = []
    for j, (name, attribute) in enumerate(zip(table.qid_names, table.attributes, strict=True)):
        if attribute.kind == "numeric":
            values = python_values(attribute)
            pairs, index = np.unique(
                lo[:, j].astype(np.int64) * attribute.size + hi[:, j], return_inverse=True
            )
            shown: list[QidValue] = [
                values[a] if a == b else [values[a], values[b]]
                for a, b in zip(
                    (pairs // attribute.size).tolist(),
                    (pairs % attribute.size).tolist(),
                    strict=True,
                )
            ]
            columns.append(GeneralizedColumn(name, shown, index.astype(np.int64).ravel()))
        elif attribute.kind == "hierarchy":
            level, node = bounds.ancestors[j]
            labels = attribute.labels or ()
            flat: list[QidValue] = [label for level_labels in labels for label in level_labels]
            offset = np.cumsum([0, *(len(level_labels) for level_labels in labels)])
            columns.append(GeneralizedColumn(name, flat, (offset[level] + node).astype(np.int64)))
        else:
            ptr, codes = bounds.distinct[j]
            values = python_values(attribute)
            numbers: dict[tuple[int, ...], int] = {}
            listed = codes.tolist()
            index = np.fromiter(
                (
                    numbers.setdefault(tuple(listed[a:b]), len(numbers))
                    for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist(), strict=True)
                ),
                dtype=np.int64,
                count=ptr.shape[0] - 1,
            )
            set_values: list[QidValue] = [
                values[key[0]] if len(key) == 1 else [values[c] for c in key]  # type: ignore[misc]
                for key in numbers
            ]
            columns.append(GeneralizedColumn(name, set_values, index))
    return columns


def generalize_groups(
    table: EncodedTable, group: NDArray[np.integer] | ReleaseLayout
) -> list[dict[str, QidValue]]:
    """The generalized QIDs of every group (docs/contract.md §4, ``qid``), in group id order:
    :func:`generalized_columns` (same parameters) as one dict per group, attribute name (in
    ``table.attributes`` order) -> value."""
    columns = generalized_columns(table, group)
    expanded = [
        [_copied(c.values[i]) for i in c.index.tolist()] for c in columns
    ]  # a list value is shared by the column's groups: each dict gets its own
    names = [c.name for c in columns]
    return [dict(zip(names, row, strict=True)) for row in zip(*expanded, strict=True)]


def sensitive_counts(
    table: EncodedTable, group: NDArray[np.integer] | ReleaseLayout
) -> list[dict[str, int]]:
    """Each group's sensitive values with their counts (docs/contract.md §4, ``sensitive``).

    Parameters
    ----------
    table : the encoded snapshot, n rows
    group : (n,) integer group id per row, ``0..G-1``, or -1 for a suppressed row; or the
        release's :class:`~stream_release.core.grouping.layout.ReleaseLayout` (read, not
        rebuilt)

    Returns a list of G dicts, value -> count (>= 1), values in sorted order.
    """
    layout = release_layout(table, group)
    return multisets(table.sensitive_values, layout.pair_ptr, layout.pair_value, layout.pair_count)


def multisets(
    names: tuple[str, ...],
    ptr: NDArray[np.int64],
    values: NDArray[np.integer],
    counts: NDArray[np.int64],
) -> list[dict[str, int]]:
    """The (group, value, count) triples of
    :func:`~stream_release.core.grouping.layout.sensitive_pairs` as one dict per group,
    value name -> count, in the triples' order."""
    labels = [names[v] for v in values.tolist()]
    numbers = counts.tolist()
    return [
        dict(zip(labels[a:b], numbers[a:b], strict=True))
        for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist(), strict=True)
    ]


def anatomy_members(
    table: EncodedTable, group: NDArray[np.integer] | ReleaseLayout
) -> list[list[dict[str, int | float | str]]]:
    """The exact QIDs of every group's members (docs/contract.md §4, ``anatomy`` format).

    Parameters
    ----------
    table : the encoded snapshot, n rows
    group : (n,) integer group id per row, ``0..G-1``, or -1 for a suppressed row; or the
        release's :class:`~stream_release.core.grouping.layout.ReleaseLayout` (read, not
        rebuilt)

    Returns
    -------
    list of G lists; each holds one dict (attribute name -> exact value) per member, sorted by
    the members' QID codes (lexicographically, in attribute order). The order is a function of
    the QIDs alone, so it carries no information about who holds which sensitive value; members
    with equal QIDs are indistinguishable in the output.
    """
    layout = layout_groups(table, group)
    if layout.n_groups == 0:
        return []
    codes = table.qid[layout.rows]
    keys: list[NDArray[np.integer]] = [codes[:, j] for j in reversed(range(codes.shape[1]))]
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


def _copied(value: QidValue) -> QidValue:
    return list(value) if isinstance(value, list) else value  # type: ignore[return-value]


def _number(x: float) -> int | float:
    return int(x) if float(x).is_integer() else float(x)
