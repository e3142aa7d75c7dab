r"""Utility of a release: group sizes, information loss and the error of count queries.

Every function takes the encoded snapshot (:class:`~stream_release.core.table.EncodedTable`, n rows,
d QIDs) and the release's group assignment ``group`` (n,) integer: the group id ``0..G-1`` of
each row, ``-1`` for a suppressed row. Nothing here draws from a global random state: the query
workload takes an explicit ``rng`` (STYLE.md rule 1).

Query workload (:func:`relative_errors`)
----------------------------------------
The methodology of Xiao and Tao [XT07], used by Wong et al. 2010, §8 [WFLWX10]: random count queries

.. code-block:: sql

    SELECT COUNT(*) FROM T WHERE A_1 IN R_1 AND ... AND A_qd IN R_qd AND S = s

answered on the snapshot (the actual count, over *all* its rows, suppressed ones included) and
estimated from the release; the error of a query is ``|est - act| / act``. Precisely, with
``c_j`` the number of codes of attribute ``j`` (all leaves of a hierarchy), ``qd = min(3, d)``
and ``f = 0.1 ** (1 / qd)`` (joint selectivity about 0.1), each batch of ``m`` queries is drawn
with three calls on ``rng``, in this order:

1. ``attrs = argsort(rng.random((m, d)), axis=1)[:, :qd]``: qd distinct attributes per query;
2. ``u = rng.random((m, qd))``: the range of attribute ``j`` is ``L_j = max(1, round(f c_j))``
   consecutive codes starting at ``floor(u (c_j - L_j + 1))``;
3. ``pick = rng.integers(0, m_pub, size=m)``, ``m_pub`` the number of published rows: ``s`` is
   the sensitive value of row ``flatnonzero(group >= 0)[pick]`` (values are drawn in proportion
   to their frequency in the release).

Queries with ``act == 0`` (below ``min_count``, 1 by default) are dropped and a new batch of
the missing number is drawn, until ``queries`` are kept or ``100 * queries`` have been drawn.
Codes are order-preserving, so a code range is a numeric interval, a run of consecutive
hierarchy leaves (depth-first order), or a range of sorted set values.

:func:`draw_count_queries` draws the same workload without a release (``s`` from any chosen
rows, by default all of them) and returns the queries with their actual counts, so that
releases of *other* mechanisms can be scored on one fixed set of queries
(``benchmarks/mechanisms.py``); with the published rows and the same ``rng`` it returns exactly
the queries behind :func:`relative_errors`.

The estimate assumes values spread uniformly inside what is published:

* ``generalized``: ``est = sum_G n(G, s) * prod_j |V_j(G) ∩ R_j| / |V_j(G)|``, where ``V_j(G)``
  is the set of codes G's published value covers: numeric ``[min .. max]`` of the members'
  codes; hierarchy the leaves under the lowest common ancestor; set the members' distinct codes.
* ``anatomy``: ``est = sum_G m_R(G) * n(G, s) / |G|``, ``m_R(G)`` the members of G whose exact
  QIDs satisfy every range (the QIDs are published; only the link to ``s`` is uncertain).

Implementation: rows with identical QIDs are merged, and each query visits only the merged rows
and the groups that hold its value ``s`` (CSR indexes by ``s``), in compiled, vectorized,
single-threaded loops (safe under fork and concurrent callers). The loops may reassociate
floating-point sums (``fastmath``), so a result can differ from a sequential evaluation in the
last bits (about 1e-15 relative).

References
----------
.. [XT07] X. Xiao, Y. Tao. m-Invariance: Towards Privacy Preserving Re-publication of Dynamic
   Datasets. SIGMOD 2007.
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
.. [XWP06] J. Xu, W. Wang, J. Pei, X. Wang, B. Shi, A. W.-C. Fu. Utility-Based Anonymization
   Using Local Recoding. KDD 2006 (the normalized certainty penalty).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stream_release.core.grouping.generalize import (
    GroupLayout,
    code_bounds,
    distinct_codes,
    generalized_bounds,
    group_layout,
    leaf_range,
    lowest_common_ancestor,
    sensitive_pairs,
)
from stream_release.core.table import EncodedTable
from stream_release.errors import InvalidParameter

OutputFormat = Literal["generalized", "anatomy"]

QUERY_SELECTIVITY = 0.1
"""Expected joint selectivity of the QID predicate of a random count query."""
MAX_QUERY_ATTRIBUTES = 3
"""QIDs constrained per query (fewer when the table has fewer)."""
MAX_DRAWS_PER_QUERY = 100
"""Bound on draws per kept query (queries with an actual count of 0 are re-drawn)."""


def group_size_stats(group: NDArray[np.integer]) -> dict[str, int | float]:
    """Sizes of the groups of a release.

    Parameters
    ----------
    group : (n,) integer group id per row, ``0..G-1``, or -1 for a suppressed row

    Returns
    -------
    dict with ``avg_group_size`` (published / groups; 0.0 without groups), ``max_group_size``,
    ``min_group_size`` (0 without groups), ``groups``, ``published``, ``suppressed`` (rows) and
    ``suppression`` (suppressed / n; 0.0 for an empty snapshot).
    """
    layout = group_layout(group)
    return _size_stats(layout)


def ncp(
    table: EncodedTable,
    group: NDArray[np.integer],
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
    group : (n,) integer group id per row, ``0..G-1``, or -1 for a suppressed row
    format : ``"generalized"`` or ``"anatomy"``
    real : (n,) bool, the snapshot's rows when the table also holds virtual candidates
        (:mod:`~stream_release.core.grouping.virtual`): the average is over the published real
        rows, each group's penalty spanning all its members
    """
    _check_format(format)
    layout = group_layout(group, table.n_rows)
    d = len(table.attributes)
    if format == "anatomy" or layout.n_groups == 0 or d == 0:
        return 0.0
    penalty = np.zeros((layout.n_groups, d), dtype=np.float64)
    lo, hi = code_bounds(table, layout)
    for j, attribute in enumerate(table.attributes):
        if attribute.kind == "numeric":
            domain = np.asarray(attribute.domain, dtype=np.float64)
            width = float(domain[-1] - domain[0])
            if width > 0:
                penalty[:, j] = (domain[hi[:, j]] - domain[lo[:, j]]) / width
        elif attribute.kind == "hierarchy":
            if attribute.size > 1:
                level, node = lowest_common_ancestor(attribute, lo[:, j], hi[:, j])
                first, last = leaf_range(attribute, level, node)
                penalty[:, j] = (last - first) / (attribute.size - 1)
        elif attribute.size > 1:
            ptr, _ = distinct_codes(table, layout, j)
            penalty[:, j] = (np.diff(ptr) - 1) / (attribute.size - 1)
    weights = layout.sizes.astype(np.float64)
    if real is not None:
        grouped = np.asarray(group) >= 0
        weights = np.bincount(np.asarray(group)[grouped & real], minlength=layout.n_groups).astype(
            np.float64
        )
    total = float(weights.sum())
    return float(weights @ penalty.sum(axis=1) / (total * d)) if total else 0.0


def discernibility(group: NDArray[np.integer], n_rows: int) -> float:
    """Discernibility metric: ``sum_G |G|^2 + (suppressed rows) * n_rows``.

    Parameters
    ----------
    group : (m,) integer group id per row, ``0..G-1``, or -1 for a suppressed row
    n_rows : rows of the snapshot; the rows not in any group (``n_rows`` minus the published
        rows) are suppressed and each costs ``n_rows``
    """
    layout = group_layout(group)
    if isinstance(n_rows, bool) or not isinstance(n_rows, int | np.integer):
        raise InvalidParameter(f"n_rows = {n_rows!r}: must be an integer")
    if n_rows < layout.published:
        raise InvalidParameter(
            f"n_rows = {n_rows}: fewer than the {layout.published} published rows"
        )
    suppressed = int(n_rows) - layout.published
    sizes = layout.sizes.astype(np.float64)
    return float(sizes @ sizes + float(suppressed) * float(n_rows))


TRIM = 0.1
"""Share cut from each end of the relative errors for their trimmed mean."""


def error_figures(errors: NDArray[np.float64]) -> tuple[float, float, float]:
    """``(mean, median, trimmed mean)`` of relative query errors (NaN without any). The mean
    is dominated by queries with tiny true counts; settings are compared on the other two.
    The trimmed mean drops ``int(TRIM * q)`` errors from each end (as
    ``scipy.stats.trim_mean(errors, TRIM)``)."""
    if errors.size == 0:
        return math.nan, math.nan, math.nan
    cut = int(TRIM * errors.size)
    middle = np.sort(errors)[cut : errors.size - cut]
    return float(errors.mean()), float(np.median(errors)), float(middle.mean())


def relative_errors(
    table: EncodedTable,
    group: NDArray[np.integer],
    *,
    format: OutputFormat,
    queries: int = 5000,
    rng: np.random.Generator,
    real: NDArray[np.bool_] | None = None,
    min_count: int = 1,
) -> NDArray[np.float64]:
    """Relative error of each random count query of the workload in the module docstring.

    Parameters
    ----------
    table : the encoded snapshot, n rows, d >= 1 QIDs
    group : (n,) integer group id per row, ``0..G-1``, or -1 for a suppressed row
    format : ``"generalized"`` or ``"anatomy"``: how the release publishes QIDs
    queries : number of queries to keep, >= 0
    rng : the source of every random draw
    real : (n,) bool, the snapshot's rows when the table also holds virtual candidates: the
        sensitive value is drawn from the published real rows (virtual members hold none)
    min_count : queries whose actual count is below it are re-drawn (module docstring); 1
        keeps every query with a row. Snapshots of different sizes are compared on one
        workload with ``min_count`` in proportion to the size (``ceil(n / n_0)`` for the
        queries a snapshot of ``n_0`` rows would keep): with ``1``, a larger snapshot keeps
        queries on sparser regions, and its error rises with its size alone

    Returns
    -------
    (q,) float64 ``|est - act| / act`` of each kept query, in draw order; ``q <= queries`` (fewer
    only when the draw bound is hit). With no published row every estimate is 0 and the
    function returns ``queries`` ones.
    """
    _check_format(format)
    if isinstance(queries, bool) or not isinstance(queries, int | np.integer) or queries < 0:
        raise InvalidParameter(f"queries = {queries!r}: must be an integer >= 0 (e.g. 5000)")
    if not isinstance(rng, np.random.Generator):
        raise InvalidParameter(f"rng = {rng!r}: must be a numpy.random.Generator")
    layout = group_layout(group, table.n_rows)
    d = len(table.attributes)
    if d == 0:
        raise InvalidParameter("the table has no QID; count queries need at least one")
    if queries == 0:
        return np.empty(0, dtype=np.float64)
    if layout.published == 0:
        return np.ones(int(queries), dtype=np.float64)
    workload = _Workload(table, layout, format)
    grouped = np.asarray(group) >= 0
    published = np.flatnonzero(grouped if real is None else grouped & real)
    if published.size == 0:
        return np.ones(int(queries), dtype=np.float64)
    kept = _draw(table, int(queries), rng, published, workload.answer, _min_count(min_count))
    return np.abs(kept.estimate - kept.actual) / kept.actual


@dataclass(frozen=True)
class CountQueries:
    """Count queries of the workload in the module docstring, ``q`` of them, in draw order.

    Query ``i`` is ``COUNT(*) WHERE A_{attrs[i, t]} IN [starts[i, t], ends[i, t]] (every t)
    AND S = values[i]``, on codes of the table it was drawn from.

    Attributes
    ----------
    attrs : (q, qd) int64, the constrained QIDs (indexes into ``table.attributes``), distinct
    starts, ends : (q, qd) int64, each range's first and last code (inclusive)
    values : (q,) int64, the sensitive code ``s`` (into ``table.sensitive_values``)
    actual : (q,) float64, the query's count over every row of the table, ``>= 1``
    """

    attrs: NDArray[np.int64]
    starts: NDArray[np.int64]
    ends: NDArray[np.int64]
    values: NDArray[np.int64]
    actual: NDArray[np.float64]

    def __len__(self) -> int:
        return int(self.values.shape[0])


def draw_count_queries(
    table: EncodedTable,
    *,
    queries: int = 5000,
    rng: np.random.Generator,
    rows: NDArray[np.integer] | None = None,
    min_count: int = 1,
) -> CountQueries:
    """The random count queries of :func:`relative_errors`, drawn from a table alone.

    The same calls on ``rng`` in the same order as :func:`relative_errors` (module docstring),
    with ``s`` the sensitive value of a row drawn uniformly from ``rows`` instead of the
    published rows; queries whose actual count is 0 are re-drawn the same way. So
    ``draw_count_queries(table, queries=q, rng=default_rng(x), rows=flatnonzero(group >= 0))``
    are exactly the queries of ``relative_errors(table, group, ..., queries=q,
    rng=default_rng(x))``; with ``rows=None`` (every row) they depend on the table only, and
    every release of it, whatever its mechanism, can be scored on them.

    Parameters
    ----------
    table : the encoded snapshot, n >= 1 rows, d >= 1 QIDs
    queries : number of queries to keep, >= 0
    rng : the source of every random draw
    rows : (r,) int indexes of the rows ``s`` is drawn from, r >= 1; default every row
    min_count : the smallest actual count kept (:func:`relative_errors`)

    Returns
    -------
    CountQueries with ``q <= queries`` queries (fewer only when ``100 * queries`` draws did not
    find enough with an actual count of at least ``min_count``).
    """
    if isinstance(queries, bool) or not isinstance(queries, int | np.integer) or queries < 0:
        raise InvalidParameter(f"queries = {queries!r}: must be an integer >= 0 (e.g. 5000)")
    if not isinstance(rng, np.random.Generator):
        raise InvalidParameter(f"rng = {rng!r}: must be a numpy.random.Generator")
    if not table.attributes:
        raise InvalidParameter("the table has no QID; count queries need at least one")
    pool = (
        np.arange(table.n_rows, dtype=np.int64)
        if rows is None
        else np.asarray(rows, dtype=np.int64).reshape(-1)
    )
    if pool.shape[0] == 0:
        raise InvalidParameter("rows: empty; the sensitive value of a query is drawn from them")
    if pool.min() < 0 or pool.max() >= table.n_rows:
        raise InvalidParameter(f"rows: indexes outside 0..{table.n_rows - 1}")
    answer = _ActualCounts(table).answer
    return _draw(table, int(queries), rng, pool, answer, _min_count(min_count)).queries


def _min_count(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise InvalidParameter(f"min_count = {value!r}: must be an integer >= 1 (e.g. 1)")
    return int(value)


_Answer = Callable[
    [NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]],
    tuple[NDArray[np.float64], NDArray[np.float64]],
]


@dataclass(frozen=True)
class _Kept:
    queries: CountQueries
    estimate: NDArray[np.float64]

    @property
    def actual(self) -> NDArray[np.float64]:
        return self.queries.actual


def _draw(
    table: EncodedTable,
    queries: int,
    rng: np.random.Generator,
    pool: NDArray[np.int64],
    answer: _Answer,
    min_count: int = 1,
) -> _Kept:
    """Draw batches of the workload until ``queries`` have an actual count of at least
    ``min_count`` (or the draw bound is hit); ``answer`` gives each batch's actual and estimated
    counts. ``pool`` (r,) >= 1 rows the sensitive value is drawn from."""
    d = len(table.attributes)
    sizes = np.array([a.size for a in table.attributes], dtype=np.int64)
    qd = min(MAX_QUERY_ATTRIBUTES, d)
    fraction = QUERY_SELECTIVITY ** (1.0 / qd)
    lengths = np.maximum(1, np.rint(fraction * sizes)).astype(np.int64)
    parts: list[tuple[NDArray[np.int64], ...]] = []
    estimates: list[NDArray[np.float64]] = []
    actuals: list[NDArray[np.float64]] = []
    n_kept = 0
    draws = 0
    limit = MAX_DRAWS_PER_QUERY * queries
    while n_kept < queries and draws < limit:
        m = min(queries - n_kept, limit - draws)
        attrs = np.argsort(rng.random((m, d)), axis=1)[:, :qd].astype(np.int64)
        u = rng.random((m, qd))
        starts = np.floor(u * (sizes[attrs] - lengths[attrs] + 1)).astype(np.int64)
        ends = starts + lengths[attrs] - 1
        values = table.sensitive[pool[rng.integers(0, pool.shape[0], size=m)]].astype(np.int64)
        act, est = answer(attrs, starts, ends, values)
        ok = act >= min_count
        parts.append((attrs[ok], starts[ok], ends[ok], values[ok]))
        actuals.append(act[ok])
        estimates.append(est[ok])
        n_kept += int(np.count_nonzero(ok))
        draws += m
    if not parts:
        empty = np.empty((0, qd), dtype=np.int64)
        found = CountQueries(empty, empty, empty, np.empty(0, np.int64), np.empty(0))
        return _Kept(found, np.empty(0, dtype=np.float64))
    columns = [np.concatenate(c) for c in zip(*parts, strict=True)]
    found = CountQueries(*columns, actual=np.concatenate(actuals))
    return _Kept(found, np.concatenate(estimates))


def query_error(
    table: EncodedTable,
    group: NDArray[np.integer],
    *,
    format: OutputFormat,
    queries: int = 5000,
    rng: np.random.Generator,
) -> float:
    """Average relative error of ``queries`` random count queries (Wong et al. 2010, §8, [XT07]).

    The mean of :func:`relative_errors` (see the module docstring for the exact workload);
    ``nan`` when no query was kept (``queries == 0``).
    """
    errors = relative_errors(table, group, format=format, queries=queries, rng=rng)
    return float(errors.mean()) if errors.size else math.nan


def utility_report(
    table: EncodedTable,
    group: NDArray[np.integer],
    *,
    format: OutputFormat,
    queries: int,
    rng: np.random.Generator,
    real: NDArray[np.bool_] | None = None,
) -> dict[str, int | float | None]:
    """The utility block of a release manifest (docs/contract.md §4, ``utility``).

    ``real`` (n,) bool: the snapshot's rows when ``table`` also holds virtual candidates
    (:mod:`~stream_release.core.grouping.virtual`): ``published``, ``suppressed``,
    ``suppression``, ``ncp``, the discernibility's suppressed rows and the queries' values
    are the real rows'; group sizes count every member, and ``virtual`` the virtual ones.

    Returns
    -------
    dict with the keys of :func:`group_size_stats`, ``ncp``, ``discernibility``,
    ``query_error`` (the mean; ``None`` when no query was kept, e.g. ``queries == 0``),
    ``query_error_median`` and ``query_error_trimmed`` (:func:`error_figures`: the mean is
    dominated by queries with tiny true counts, these two are not) and ``queries`` (the number
    of queries behind them).
    """
    layout = group_layout(group, table.n_rows)
    errors = relative_errors(table, group, format=format, queries=queries, rng=rng, real=real)
    report: dict[str, int | float | None] = dict(_size_stats(layout))
    report["ncp"] = ncp(table, group, format=format, real=real)
    if real is None:
        report["discernibility"] = discernibility(group, table.n_rows)
    else:
        grouped = np.asarray(group) >= 0
        n_real = int(np.count_nonzero(real))
        published = int(np.count_nonzero(grouped & real))
        sizes = layout.sizes.astype(np.float64)
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


# --------------------------------------------------------------------------------------------


def _check_format(format: str) -> None:
    if format not in ("generalized", "anatomy"):
        raise InvalidParameter(f"format = {format!r}: must be 'generalized' or 'anatomy'")


def _size_stats(layout: GroupLayout) -> dict[str, int | float]:
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


class _ActualCounts:
    """Actual counts of queries on a table (every row), without a release: the ``actual``
    half of :class:`_Workload`, indexed the same way."""

    def __init__(self, table: EncodedTable) -> None:
        n_values = max(len(table.sensitive_values), 1)
        combos, combo_of_row = _merge_rows(table.qid)
        n_combos = combos.shape[0]
        keys = table.sensitive.astype(np.int64) * n_combos + combo_of_row
        entries, (actual,) = _aggregate(keys, n_values * n_combos, np.ones(keys.shape[0]))
        self.c_ptr = np.searchsorted(entries, np.arange(n_values + 1) * n_combos).astype(np.int64)
        self.c_codes = np.ascontiguousarray(combos[entries % n_combos].T)
        self.c_actual = actual.astype(np.float64)
        self.c_weight = np.zeros(entries.shape[0], dtype=np.float64)

    def answer(
        self,
        attrs: NDArray[np.int64],
        starts: NDArray[np.int64],
        ends: NDArray[np.int64],
        values: NDArray[np.int64],
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Actual counts of queries (attrs, [starts, ends], values) and zeros, (m,) each."""
        return _scan_combos(
            attrs, starts, ends, values, self.c_ptr, self.c_codes, self.c_actual, self.c_weight
        )


class _Workload:
    """The indexes every query of one release needs (built once per call).

    Merged rows (distinct QID combinations) and groups are both stored per sensitive value:
    entries ``ptr[s] <= k < ptr[s+1]`` belong to value ``s``, and every per-entry array is laid
    out attribute-major, ``(d, K)``, so that a query streams through contiguous memory.
    """

    def __init__(self, table: EncodedTable, layout: GroupLayout, format: OutputFormat) -> None:
        n_values = max(len(table.sensitive_values), 1)
        self.anatomy = format == "anatomy"
        combos, combo_of_row = _merge_rows(table.qid)
        n_combos = combos.shape[0]
        # Actual counts: (value, combination) -> rows of the whole snapshot.
        keys = table.sensitive.astype(np.int64) * n_combos + combo_of_row
        pair_ptr, pair_value, pair_count = sensitive_pairs(table, layout)
        space = n_values * n_combos
        if self.anatomy:
            # W[s, combination] = sum over the published rows r with that combination of
            # n(G_r, s) / |G_r|, one term for every value s held by r's group.
            group_of_row = layout.group_of_sorted()
            held = np.diff(pair_ptr)[group_of_row]  # (m,) values held by each row's group
            row = np.repeat(np.arange(layout.published), held)
            block = np.cumsum(held) - held  # where each row's terms start
            pair = np.repeat(pair_ptr[group_of_row] - block, held) + np.arange(row.shape[0])
            w_keys = pair_value[pair].astype(np.int64) * n_combos + combo_of_row[layout.rows[row]]
            w_terms = pair_count[pair] / layout.sizes[group_of_row[row]]
            entries, sums = _aggregate(
                np.concatenate([keys, w_keys]),
                space,
                np.concatenate([np.ones(keys.shape[0]), np.zeros(w_keys.shape[0])]),
                np.concatenate([np.zeros(keys.shape[0]), w_terms]),
            )
            actual, weight = sums
        else:
            entries, sums = _aggregate(keys, space, np.ones(keys.shape[0]))
            actual, weight = sums[0], np.zeros(entries.shape[0], dtype=np.float64)
        self.c_ptr = np.searchsorted(entries, np.arange(n_values + 1) * n_combos).astype(np.int64)
        self.c_codes = np.ascontiguousarray(combos[entries % n_combos].T)
        self.c_actual = actual.astype(np.float64)
        self.c_weight = weight.astype(np.float64)
        if self.anatomy:
            return
        # Generalized estimate: per value s, the groups holding it with n(G, s).
        order = np.argsort(pair_value, kind="stable")
        self.g_ptr = np.zeros(n_values + 1, dtype=np.int64)
        np.cumsum(np.bincount(pair_value, minlength=n_values), out=self.g_ptr[1:])
        group_of_pair = np.repeat(np.arange(layout.n_groups, dtype=np.int64), np.diff(pair_ptr))
        self.g_id = group_of_pair[order]
        self.g_count = pair_count[order].astype(np.float64)
        lo, hi = generalized_bounds(table, layout)
        self.g_lo = np.ascontiguousarray(lo[self.g_id].T)
        self.g_hi = np.ascontiguousarray(hi[self.g_id].T)
        d = len(table.attributes)
        # kind 0: interval of codes; 1: set over <= 64 codes (bit mask); 2: larger set (CSR).
        self.kind = np.zeros(d, dtype=np.int64)
        self.mask_row = np.full(d, -1, dtype=np.int64)
        masks: list[NDArray[np.uint64]] = []
        self.set_ptr = np.zeros((d, layout.n_groups + 1), dtype=np.int64)
        chunks: list[NDArray[np.int32]] = []
        base = 0
        for j, attribute in enumerate(table.attributes):
            if attribute.kind != "set":
                continue
            ptr, codes = distinct_codes(table, layout, j)
            if attribute.size <= 64:
                self.kind[j] = 1
                self.mask_row[j] = len(masks)
                bits = np.left_shift(np.uint64(1), codes.astype(np.uint64))
                group_mask = np.bitwise_or.reduceat(bits, ptr[:-1]) if codes.size else bits
                masks.append(group_mask[self.g_id])
            else:
                self.kind[j] = 2
                self.set_ptr[j] = ptr + base
                chunks.append(codes)
                base += codes.shape[0]
        self.masks = (
            np.stack(masks) if masks else np.zeros((0, self.g_id.shape[0]), dtype=np.uint64)
        )
        self.set_codes = np.concatenate(chunks) if chunks else np.empty(0, dtype=np.int32)

    def answer(
        self,
        attrs: NDArray[np.int64],
        starts: NDArray[np.int64],
        ends: NDArray[np.int64],
        values: NDArray[np.int64],
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Actual and estimated counts of queries (attrs, [starts, ends], values), (m,) each."""
        act, est = _scan_combos(
            attrs, starts, ends, values, self.c_ptr, self.c_codes, self.c_actual, self.c_weight
        )
        if not self.anatomy:
            est = _scan_groups(
                attrs,
                starts,
                ends,
                values,
                self.g_ptr,
                self.g_id,
                self.g_count,
                self.g_lo,
                self.g_hi,
                self.kind,
                self.mask_row,
                self.masks,
                self.set_ptr,
                self.set_codes,
            )
        return act, est


def _aggregate(
    keys: NDArray[np.int64], space: int, *weights: NDArray[np.float64]
) -> tuple[NDArray[np.int64], list[NDArray[np.float64]]]:
    """Distinct ``keys`` (ascending, all in ``0..space-1``) and the sum of each weight array
    over each key: a dense ``bincount`` when the key space is small, else a sort."""
    if space <= max(4 * keys.shape[0], 1 << 20):
        sums = [np.bincount(keys, weights=w, minlength=space) for w in weights]
        present = np.flatnonzero(np.bincount(keys, minlength=space))
        return present.astype(np.int64), [total[present] for total in sums]
    distinct, inverse = np.unique(keys, return_inverse=True)
    inverse = inverse.reshape(-1)
    return distinct, [np.bincount(inverse, weights=w, minlength=distinct.shape[0]) for w in weights]


def _merge_rows(qid: NDArray[np.int32]) -> tuple[NDArray[np.int32], NDArray[np.int64]]:
    """Distinct rows of ``qid`` (C, d) int32 and each row's combination index (n,) int64."""
    n, d = qid.shape
    if n == 0:
        return np.empty((0, d), dtype=np.int32), np.empty(0, dtype=np.int64)
    radix = qid.max(axis=0).astype(np.int64) + 1
    if float(np.prod(radix.astype(np.float64))) < 2.0**62:
        key = np.zeros(n, dtype=np.int64)
        for j in range(d):
            key = key * radix[j] + qid[:, j]
        inverse, first = _factorize_keys(key)
        return np.ascontiguousarray(qid[first]), inverse
    combos, inverse = np.unique(qid, axis=0, return_inverse=True)
    return np.ascontiguousarray(combos, dtype=np.int32), inverse.astype(np.int64).reshape(n)


@njit(cache=True)
def _factorize_keys(keys):  # pragma: no cover - jit
    """Codes of int64 ``keys`` in order of first appearance, and each code's first index
    (Fibonacci-hashed open addressing; the table doubles when half full)."""
    n = keys.shape[0]
    bits = 10
    table = np.full(1 << bits, -1, dtype=np.int64)
    codes = np.empty(n, dtype=np.int64)
    first = np.empty(n, dtype=np.int64)
    n_unique = 0
    for r in range(n):
        key = keys[r]
        mask = (1 << bits) - 1
        idx = np.int64((np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(64 - bits))
        while True:
            u = table[idx]
            if u < 0:
                table[idx] = n_unique
                first[n_unique] = r
                codes[r] = n_unique
                n_unique += 1
                break
            if keys[first[u]] == key:
                codes[r] = u
                break
            idx = (idx + 1) & mask
        if 2 * n_unique > (1 << bits):
            bits += 1
            mask = (1 << bits) - 1
            table = np.full(1 << bits, -1, dtype=np.int64)
            for v in range(n_unique):
                h = np.uint64(keys[first[v]]) * np.uint64(0x9E3779B97F4A7C15)
                idx = np.int64(h >> np.uint64(64 - bits))
                while table[idx] >= 0:
                    idx = (idx + 1) & mask
                table[idx] = v
    return codes, first[:n_unique].copy()


# The kernels run with fastmath (sums may be reassociated, so results can differ from a
# sequential sum in the last bits) and error_model="numpy" (no ZeroDivisionError branch; no
# divisor here is ever 0): both are needed for LLVM to vectorize the inner loops.
_KERNEL = {"cache": True, "fastmath": True, "error_model": "numpy", "nogil": True}


@njit(**_KERNEL)
def _scan_combos(attrs, starts, ends, values, ptr, codes, actual, weight):  # pragma: no cover
    """Per query: sums of ``actual`` and ``weight`` over the merged rows of its value whose
    QIDs fall in every range. ``codes`` (d, K) int32; ``attrs`` has 1 to 3 columns (a missing
    one repeats the first: the same test twice)."""
    m = values.shape[0]
    qd = attrs.shape[1]
    act = np.zeros(m, dtype=np.float64)
    est = np.zeros(m, dtype=np.float64)
    for q in range(m):
        s = values[q]
        t1 = min(1, qd - 1)
        t2 = min(2, qd - 1)
        act[q], est[q] = _sum_inside(
            actual,
            weight,
            codes,
            ptr[s],
            ptr[s + 1],
            attrs[q, 0],
            np.int32(starts[q, 0]),
            np.int32(ends[q, 0]),
            attrs[q, t1],
            np.int32(starts[q, t1]),
            np.int32(ends[q, t1]),
            attrs[q, t2],
            np.int32(starts[q, t2]),
            np.int32(ends[q, t2]),
        )
    return act, est


@njit(**_KERNEL)
def _sum_inside(
    actual, weight, codes, p0, p1, j0, a0, b0, j1, a1, b1, j2, a2, b2
):  # pragma: no cover
    c0 = codes[j0, p0:p1]
    c1 = codes[j1, p0:p1]
    c2 = codes[j2, p0:p1]
    w_act = actual[p0:p1]
    w_est = weight[p0:p1]
    a = 0.0
    e = 0.0
    for i in range(p1 - p0):
        inside = (
            (c0[i] >= a0)
            & (c0[i] <= b0)
            & (c1[i] >= a1)
            & (c1[i] <= b1)
            & (c2[i] >= a2)
            & (c2[i] <= b2)
        )
        f = 1.0 if inside else 0.0
        a += w_act[i] * f
        e += w_est[i] * f
    return a, e


@njit(**_KERNEL)
def _popcount(x):  # pragma: no cover - jit
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


@njit(**_KERNEL)
def _scan_groups(
    attrs,
    starts,
    ends,
    values,
    ptr,
    group,
    count,
    lo,
    hi,
    kind,
    mask_row,
    masks,
    set_ptr,
    set_codes,
):  # pragma: no cover - jit
    """Per query: ``sum_G n(G, s) prod_t |V_t(G) ∩ R_t| / |V_t(G)|`` over the groups holding s.
    ``lo``, ``hi`` (d, K) int32 code bounds of each entry's group; ``kind`` (d,) 0 interval,
    1 set as a bit mask (``masks[mask_row[j]]``), 2 set as CSR (``set_ptr``, ``set_codes``)."""
    m = values.shape[0]
    qd = attrs.shape[1]
    est = np.zeros(m, dtype=np.float64)
    for q in range(m):
        s = values[q]
        intervals = True
        for t in range(qd):
            if kind[attrs[q, t]] != 0:
                intervals = False
        if intervals:
            # A missing 2nd/3rd attribute repeats the first with its full range: a factor 1.
            t1 = min(1, qd - 1)
            t2 = min(2, qd - 1)
            a1 = np.int32(starts[q, t1]) if qd > 1 else np.int32(-2147483647)
            b1 = np.int32(ends[q, t1]) if qd > 1 else np.int32(2147483647)
            a2 = np.int32(starts[q, t2]) if qd > 2 else np.int32(-2147483647)
            b2 = np.int32(ends[q, t2]) if qd > 2 else np.int32(2147483647)
            est[q] = _interval_estimate(
                count,
                lo,
                hi,
                ptr[s],
                ptr[s + 1],
                attrs[q, 0],
                np.int32(starts[q, 0]),
                np.int32(ends[q, 0]),
                attrs[q, t1],
                a1,
                b1,
                attrs[q, t2],
                a2,
                b2,
            )
        else:
            est[q] = _mixed_estimate(
                attrs[q],
                starts[q],
                ends[q],
                ptr[s],
                ptr[s + 1],
                group,
                count,
                lo,
                hi,
                kind,
                mask_row,
                masks,
                set_ptr,
                set_codes,
            )
    return est


@njit(**_KERNEL)
def _interval_estimate(
    count, lo, hi, p0, p1, j0, a0, b0, j1, a1, b1, j2, a2, b2
):  # pragma: no cover
    """``sum_k count[k] prod_t overlap_t / width_t`` for three interval attributes."""
    l0 = lo[j0, p0:p1]
    h0 = hi[j0, p0:p1]
    l1 = lo[j1, p0:p1]
    h1 = hi[j1, p0:p1]
    l2 = lo[j2, p0:p1]
    h2 = hi[j2, p0:p1]
    c = count[p0:p1]
    total = 0.0
    for i in range(p1 - p0):
        x0 = max(min(b0, h0[i]) - max(a0, l0[i]) + 1, 0)
        x1 = max(min(b1, h1[i]) - max(a1, l1[i]) + 1, 0)
        x2 = max(min(b2, h2[i]) - max(a2, l2[i]) + 1, 0)
        inside = np.float64(x0) * np.float64(x1) * np.float64(x2)
        width = (
            np.float64(h0[i] - l0[i] + 1)
            * np.float64(h1[i] - l1[i] + 1)
            * np.float64(h2[i] - l2[i] + 1)
        )
        total += c[i] * inside / width
    return total


@njit(**_KERNEL)
def _mixed_estimate(
    attrs, starts, ends, p0, p1, group, count, lo, hi, kind, mask_row, masks, set_ptr, set_codes
):  # pragma: no cover - jit
    """The same sum when a queried attribute is a set: one pass per attribute."""
    n = p1 - p0
    share = count[p0:p1].copy()
    for t in range(attrs.shape[0]):
        j = attrs[t]
        a = starts[t]
        b = ends[t]
        if kind[j] == 0:
            lo_j = lo[j, p0:p1]
            hi_j = hi[j, p0:p1]
            for i in range(n):
                overlap = min(b, hi_j[i]) - max(a, lo_j[i]) + 1
                share[i] *= max(overlap, 0) / (hi_j[i] - lo_j[i] + 1)
        elif kind[j] == 1:
            upper = ~np.uint64(0) if b >= 63 else (np.uint64(1) << np.uint64(b + 1)) - np.uint64(1)
            window = upper & ~((np.uint64(1) << np.uint64(a)) - np.uint64(1))
            mask_j = masks[mask_row[j], p0:p1]
            for i in range(n):
                share[i] *= np.float64(_popcount(mask_j[i] & window)) / np.float64(
                    _popcount(mask_j[i])
                )
        else:
            for i in range(n):
                g = group[p0 + i]
                first = set_ptr[j, g]
                last = set_ptr[j, g + 1]
                inside = 0
                for p in range(first, last):
                    if set_codes[p] >= a and set_codes[p] <= b:
                        inside += 1
                share[i] *= inside / (last - first)
    return share.sum()
