"""Group sizes and information loss of a release: size statistics, NCP and discernibility.

Every function takes the release's group assignment ``group`` (n,) integer (the group id
``0..G-1`` of each row, ``-1`` for a suppressed row), or the release's
:class:`~stream_release.core.grouping.layout.ReleaseLayout` built from it once (read, not
rebuilt).

References
----------
.. [XWP06] J. Xu, W. Wang, J. Pei, X. Wang, B. Shi, A. W.-C. Fu. Utility-Based Anonymization
   Using Local Recoding. KDD 2006 (the normalized certainty penalty).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

from stream_release.core.grouping.layout import (
    GroupLayout,
    ReleaseLayout,
    group_layout,
    release_layout,
)
from stream_release.core.table import EncodedTable
from stream_release.errors import InvalidParameter

OutputFormat = Literal["generalized", "anatomy"]
"""How a release publishes QIDs: generalized values, or exact QIDs apart from the values."""


def check_format(format: str) -> None:
    """Raise :class:`~stream_release.errors.InvalidParameter` unless ``format`` is an
    :data:`OutputFormat`."""
    if format not in ("generalized", "anatomy"):
        raise InvalidParameter(f"format = {format!r}: must be 'generalized' or 'anatomy'")


def group_size_stats(group: NDArray[np.integer] | ReleaseLayout) -> dict[str, int | float]:
    """Sizes of the groups of a release.

    Parameters
    ----------
    group : (n,) integer group id per row, ``0..G-1``, or -1 for a suppressed row; or the
        release's layout

    Returns
    -------
    dict with ``avg_group_size`` (published / groups; 0.0 without groups), ``max_group_size``,
    ``min_group_size`` (0 without groups), ``groups``, ``published``, ``suppressed`` (rows) and
    ``suppression`` (suppressed / n; 0.0 for an empty snapshot).
    """
    layout = _groups(group)
    groups = layout.n_groups
    return {
        "avg_group_size": layout.published / groups if groups else 0.0,
        "max_group_size": int(layout.sizes.max()) if groups else 0,
        "min_group_size": int(layout.sizes.min()) if groups else 0,
        "groups": groups,
        "published": layout.published,
        "suppressed": layout.suppressed,
        "suppression": layout.suppressed / layout.n_rows if layout.n_rows else 0.0,
    }


def ncp(
    table: EncodedTable,
    group: NDArray[np.integer] | ReleaseLayout,
    *,
    format: OutputFormat = "generalized",
    real: NDArray[np.bool_] | None = None,
) -> float:
    r"""Normalized certainty penalty of a release, in [0, 1] (GCP of [XWP06]).

    The average, over published rows and QIDs, of the penalty of the row's group on the QID:

    * numeric: ``(max - min) / (domain max - domain min)`` of the group's values;
    * hierarchy: ``(leaves under the lowest common ancestor - 1) / (leaves of the hierarchy - 1)``;
    * set: ``(distinct values in the group - 1) / (distinct values in the snapshot - 1)``;

    a one-value domain costs 0. ``format="anatomy"`` publishes exact QIDs: the penalty is 0.
    Returns 0.0 when nothing is published (see ``suppression``).

    Parameters
    ----------
    table : the encoded snapshot, n rows, d QIDs
    group : (n,) integer group id per row, ``0..G-1``, or -1 for a suppressed row; or the
        release's layout (its bounds are read when it has them)
    format : ``"generalized"`` or ``"anatomy"``
    real : (n,) bool, the snapshot's rows when the table also holds virtual candidates
        (:mod:`~stream_release.core.grouping.virtual`): the average is over the published real
        rows, each group's penalty spanning all its members
    """
    check_format(format)
    layout = release_layout(table, group)
    groups = layout.groups
    d = len(table.attributes)
    if format == "anatomy" or groups.n_groups == 0 or d == 0:
        return 0.0
    penalty = np.zeros((groups.n_groups, d), dtype=np.float64)
    bounds = layout.group_bounds(table)
    lo, hi = bounds.lo, bounds.hi  # numeric: the members' codes; hierarchy: the LCA's leaves
    for j, attribute in enumerate(table.attributes):
        if attribute.kind == "numeric":
            domain = np.asarray(attribute.domain, dtype=np.float64)
            width = float(domain[-1] - domain[0])
            if width > 0:
                penalty[:, j] = (domain[hi[:, j]] - domain[lo[:, j]]) / width
        elif attribute.kind == "hierarchy":
            if attribute.size > 1:
                penalty[:, j] = (hi[:, j].astype(np.int64) - lo[:, j]) / (attribute.size - 1)
        elif attribute.size > 1:
            ptr, _ = bounds.distinct[j]
            penalty[:, j] = (np.diff(ptr) - 1) / (attribute.size - 1)
    weights = groups.sizes.astype(np.float64)
    if real is not None:
        grouped = layout.group >= 0
        weights = np.bincount(layout.group[grouped & real], minlength=groups.n_groups).astype(
            np.float64
        )
    total = float(weights.sum())
    return float(weights @ penalty.sum(axis=1) / (total * d)) if total else 0.0


def discernibility(group: NDArray[np.integer] | ReleaseLayout, n_rows: int) -> float:
    """Discernibility metric: ``sum_G |G|^2 + (suppressed rows) * n_rows``.

    Parameters
    ----------
    group : (m,) integer group id per row, ``0..G-1``, or -1 for a suppressed row; or the
        release's layout
    n_rows : rows of the snapshot; the rows not in any group (``n_rows`` minus the published
        rows) are suppressed and each costs ``n_rows``
    """
    layout = _groups(group)
    if isinstance(n_rows, bool) or not isinstance(n_rows, int | np.integer):
        raise InvalidParameter(f"n_rows = {n_rows!r}: must be an integer")
    if n_rows < layout.published:
        raise InvalidParameter(
            f"n_rows = {n_rows}: fewer than the {layout.published} published rows"
        )
    suppressed = int(n_rows) - layout.published
    sizes = layout.sizes.astype(np.float64)
    return float(sizes @ sizes + float(suppressed) * float(n_rows))


def _groups(group: NDArray[np.integer] | ReleaseLayout) -> GroupLayout:
    """The groups of a layout, or of an assignment (validated, any length)."""
    return group.groups if isinstance(group, ReleaseLayout) else group_layout(group)
