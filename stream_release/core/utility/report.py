"""The utility block of a release manifest (docs/contract.md §4, ``utility``)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from stream_release.core.grouping.layout import ReleaseLayout, release_layout
from stream_release.core.table import EncodedTable
from stream_release.core.utility.groups import OutputFormat, discernibility, group_size_stats, ncp
from stream_release.core.utility.queries import error_figures, relative_errors


def utility_report(
    table: EncodedTable,
    group: NDArray[np.integer] | ReleaseLayout,
    *,
    format: OutputFormat,
    queries: int,
    rng: np.random.Generator,
    real: NDArray[np.bool_] | None = None,
) -> dict[str, int | float | None]:
    """The utility block of a release manifest (docs/contract.md §4, ``utility``).

    ``group`` (n,) integer: the group id of each row, ``0..G-1``, or -1 for a suppressed row;
    or the release's :class:`~stream_release.core.grouping.layout.ReleaseLayout`, built once
    (for ``format="generalized"``, with its bounds) and read by every figure here.

    ``real`` (n,) bool: the snapshot's rows when ``table`` also holds virtual candidates
    (:mod:`~stream_release.core.grouping.virtual`): ``published``, ``suppressed``,
    ``suppression``, ``ncp``, the discernibility's suppressed rows and the queries' values
    are the real rows'; group sizes count every member, and ``virtual`` the virtual ones.

    Returns
    -------
    dict with the keys of :func:`~stream_release.core.utility.groups.group_size_stats`,
    ``ncp``, ``discernibility``, ``query_error`` (the mean; ``None`` when no query was kept,
    e.g. ``queries == 0``), ``query_error_median`` and ``query_error_trimmed``
    (:func:`~stream_release.core.utility.queries.error_figures`: the mean is dominated by
    queries with tiny true counts, these two are not) and ``queries`` (the number of queries
    behind them).
    """
    layout = release_layout(table, group, bounds=format == "generalized")
    errors = relative_errors(table, layout, format=format, queries=queries, rng=rng, real=real)
    report: dict[str, int | float | None] = dict(group_size_stats(layout))
    report["ncp"] = ncp(table, layout, format=format, real=real)
    if real is None:
        report["discernibility"] = discernibility(layout, table.n_rows)
    else:
        grouped = layout.group >= 0
        n_real = int(np.count_nonzero(real))
        published = int(np.count_nonzero(grouped & real))
        sizes = layout.groups.sizes.astype(np.float64)
        report.update(
            published=published,
            suppressed=n_real - published,
            suppression=(n_real - published) / n_real if n_real else 0.0,
            virtual=int(np.count_nonzero(grouped & ~real)),
            discernibility=float(sizes @ sizes + float(n_real - published) * float(n_real)),
        )
    mean, median, trimmed = error_figures(errors)
    report["query_error"] = mean if errors.size else None
    report["query_error_median"] = median if errors.size else None
    report["query_error_trimmed"] = trimmed if errors.size else None
    report["queries"] = int(errors.size)
    return report
