r"""The error of count queries on a release: the random query workload and its relative errors.

Every function takes the encoded snapshot (:class:`~stream_release.core.table.EncodedTable`, n rows,
d QIDs) and, to score a release, its group assignment ``group`` (n,) integer (the group id
``0..G-1`` of each row, ``-1`` for a suppressed row) or the release's
:class:`~stream_release.core.grouping.layout.ReleaseLayout` built from it once. Nothing here
draws from a global random state: the query workload takes an explicit ``rng`` (STYLE.md
rule 1).

Query workload (:func:`relative_errors`)
----------------------------------------
The methodology of Xiao and Tao [XT07], used by Wong et al. 2010, §8 [WFLWX10]: random count queries

.. code-block:: sql

    SELECT COUNT(*) FROM T WHERE A_1 IN R_1 AND ... AND A_qd IN R_qd AND S = s

answered on the published rows of the snapshot (the actual count; suppressed rows are left out,
so that no published figure depends on which suppressed person holds which value, and
``suppression`` reports what they cost) and estimated from the release; the error of a query is
``|est - act| / act``. Precisely, with
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
and the groups that hold its value ``s`` (CSR indexes by ``s``,
:mod:`~stream_release.core.utility.query_index`), in compiled, vectorized, single-threaded loops
(:mod:`~stream_release.core.utility.query_kernels`; safe under fork and concurrent callers).
The loops may reassociate floating-point sums (``fastmath``), so a result can differ from a
sequential evaluation in the last bits (about 1e-15 relative).

References
----------
.. [XT07] X. Xiao, Y. Tao. m-Invariance: Towards Privacy Preserving Re-publication of Dynamic
   Datasets. SIGMOD 2007.
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from stream_release.core.grouping.layout import ReleaseLayout, release_layout
from stream_release.core.table import EncodedTable
from stream_release.core.utility.groups import OutputFormat, check_format
from stream_release.core.utility.query_index import ReleaseCounts, TableCounts
from stream_release.errors import InvalidParameter

QUERY_SELECTIVITY = 0.1
"""Expected joint selectivity of the QID predicate of a random count query."""
MAX_QUERY_ATTRIBUTES = 3
"""QIDs constrained per query (fewer when the table has fewer)."""
MAX_DRAWS_PER_QUERY = 100
"""Bound on draws per kept query (queries with an actual count of 0 are re-drawn)."""
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
    group: NDArray[np.integer] | ReleaseLayout,
    *,
    format: OutputFormat,
    queries: int = 5000,
    rng: np.random.Generator,
    real: NDArray[np.bool_] | None = None,
    min_count: int = 1,
) -> NDArray[np.float64]:
    """Relative error of each random count query of the workload in the module docstring.

    O(n log n) to index the release (its rows merged by QID combination and sensitive value,
    its groups by value), then per query O(c_s) for the actual count and, in the generalized
    format, O(g_s) for the estimate, c_s and g_s the combinations and groups holding the
    query's value: O(q G) in all at worst, the costliest figure of a large release (5,000
    queries on 250,000 groups: about 1 s on two threads).

    Parameters
    ----------
    table : the encoded snapshot, n rows, d >= 1 QIDs
    group : (n,) integer group id per row, ``0..G-1``, or -1 for a suppressed row; or the
        release's layout (its bounds are read when it has them)
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
    only when the draw bound is hit). With rows but none published every estimate is 0 and
    the function returns ``queries`` ones; with no row at all no query has a count to draw,
    and it returns none (a shard's empty part of a release adds no query to its figures).
    """
    check_format(format)
    if isinstance(queries, bool) or not isinstance(queries, int | np.integer) or queries < 0:
        raise InvalidParameter(f"queries = {queries!r}: must be an integer >= 0 (e.g. 5000)")
    if not isinstance(rng, np.random.Generator):
        raise InvalidParameter(f"rng = {rng!r}: must be a numpy.random.Generator")
    layout = release_layout(table, group)
    d = len(table.attributes)
    if d == 0:
        raise InvalidParameter("the table has no QID; count queries need at least one")
    if queries == 0 or table.n_rows == 0:
        return np.empty(0, dtype=np.float64)
    if layout.groups.published == 0:
        return np.ones(int(queries), dtype=np.float64)
    counts = ReleaseCounts(table, layout, format)
    grouped = layout.group >= 0
    published = np.flatnonzero(grouped if real is None else grouped & real)
    if published.size == 0:
        return np.ones(int(queries), dtype=np.float64)
    kept = _draw(table, int(queries), rng, published, counts.answer, _min_count(min_count))
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
    actual : (q,) float64, the query's count over the rows it was drawn from (the
        published rows of a release), ``>= 1``
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
    published rows, and the actual counts over ``rows``; queries whose actual count is 0 are
    re-drawn the same way. So
    ``draw_count_queries(table, queries=q, rng=default_rng(x), rows=flatnonzero(group >= 0))``
    are exactly the queries of ``relative_errors(table, group, ..., queries=q,
    rng=default_rng(x))``; with ``rows=None`` (every row) they depend on the table only, and
    every release of it, whatever its mechanism, can be scored on them.

    Parameters
    ----------
    table : the encoded snapshot, n >= 1 rows, d >= 1 QIDs
    queries : number of queries to keep, >= 0
    rng : the source of every random draw
    rows : (r,) int indexes of the rows ``s`` is drawn from and counted, r >= 1; default
        every row
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
    answer = TableCounts(table, None if rows is None else pool).answer
    return _draw(table, int(queries), rng, pool, answer, _min_count(min_count)).queries


def _min_count(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise InvalidParameter(f"min_count = {value!r}: must be an integer >= 1 (e.g. 1)")
    return int(value)


_Answer = Callable[
    [NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], int],
    tuple[NDArray[np.float64], NDArray[np.float64]],
]
"""Actual and estimated counts of a batch of queries; the estimate of a query whose actual
count is below the last argument may be left out."""


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
        act, est = answer(attrs, starts, ends, values, min_count)
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
    attrs, starts, ends, values = (np.concatenate(c) for c in zip(*parts, strict=True))
    found = CountQueries(attrs, starts, ends, values, np.concatenate(actuals))
    return _Kept(found, np.concatenate(estimates))


def query_error(
    table: EncodedTable,
    group: NDArray[np.integer] | ReleaseLayout,
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
