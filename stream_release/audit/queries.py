r"""The audit's own count-query workload: a release's query errors recomputed from its files.

A global-guarantee manifest states ``utility.query_error`` (the mean), ``query_error_median``,
``query_error_trimmed`` and ``queries`` of a workload of random count queries answered on the
release (the methodology of Xiao and Tao [XT07], as Wong et al. [WFLWX10] §8 use it). The
planner's implementation is compiled and indexed; this one is plain numpy, written from the
workload's specification alone, so a forged figure cannot pass by sharing a bug with it.

The table
---------
The snapshot's rows in the order of the release's assignments (the planner's row order), each
QID coded as the planner codes it: a hierarchy attribute by its leaves in depth-first order
(:func:`~stream_release.audit.files.leaf_order`); a numeric one (``[schema] numeric``, or
every value a finite number) by its distinct values, ascending; any other by its distinct
strings, sorted. ``c_j`` is the number of codes of attribute ``j`` (a hierarchy's every leaf).

The workload
------------
With ``rng = numpy.random.default_rng([query_seed, sequence])``, ``d`` QIDs, ``qd = min(3,
d)``, ``f = 0.1 ** (1 / qd)``, ``L_j = max(1, rint(f c_j))`` and the published rows (assigned
to a group) as the pool, batches of ``m`` queries are drawn until ``queries`` have an actual
count of at least 1 or ``100 queries`` were drawn, each batch with three calls in this order:
``attrs = argsort(rng.random((m, d)), axis=1)[:, :qd]``, ``u = rng.random((m, qd))`` (the range
of attribute ``j`` is ``L_j`` codes from ``floor(u (c_j - L_j + 1))``), and
``rng.integers(0, pool, size=m)`` (the sensitive value ``s`` of that published row). The
actual count is over the published rows; the estimate, from the published lines:

* ``generalized``: ``sum_G n(G, s) prod_j |V_j(G) ∩ R_j| / |V_j(G)|``, ``V_j(G)`` the codes
  the group's published value covers (an interval's values, a label's leaves, a list's values);
* ``anatomy``: ``sum_G m_R(G) n(G, s) / |G|``, ``m_R(G)`` the members of G inside every range.

The error of a query is ``|est - act| / act``; the figures are their mean, median and mean
with ``int(0.1 q)`` cut from each end (``q`` the queries kept). With rows but none published,
every error is 1.

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
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.audit.files import Hierarchies, Snapshot

SELECTIVITY = 0.1
"""Joint selectivity of a query's QID ranges."""
MAX_ATTRIBUTES = 3
"""QIDs a query constrains (fewer when there are fewer)."""
MAX_DRAWS = 100
"""Queries drawn at most per query kept."""
TRIM = 0.1
"""Share of the errors cut from each end for the trimmed mean."""


class CannotRecompute(Exception):
    """The files do not allow a figure to be recomputed (the reason, for ``not_done``)."""


@dataclass(frozen=True)
class AuditTable:
    """The snapshot's rows in the planner's order, coded (module docstring).

    ``codes`` (n, d) int64; ``sizes`` (d,) the codes of each attribute; ``values`` (n,) the
    sensitive value of each row; ``kinds[j]`` ``numeric``, ``hierarchy`` or ``set``;
    ``domains[j]``: the numeric values ascending (float64), or the strings in code order.
    """

    names: list[str]
    kinds: list[str]
    domains: list[Any]
    codes: NDArray[np.int64]
    sizes: NDArray[np.int64]
    values: NDArray[np.str_]
    index: list[dict[str, int]]
    """The code of each string of a hierarchy or set attribute (empty for a numeric one)."""

    def code_of(self, j: int, value: object) -> int:
        """The code of a published value of attribute ``j`` (a number or a string)."""
        if self.kinds[j] == "numeric":
            domain = self.domains[j]
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise CannotRecompute(f"{self.names[j]} = {value!r} is not a number")
            at = int(np.searchsorted(domain, float(value)))
            if at < domain.shape[0] and domain[at] == float(value):
                return at
        elif isinstance(value, str) and value in self.index[j]:
            return self.index[j][value]
        raise CannotRecompute(f"{self.names[j]} = {value!r} is no value of the snapshot")


def encode_rows(
    rows: list[list[str]],
    header: list[str],
    qids: list[str],
    sensitive: str,
    hierarchies: Hierarchies,
    numeric: tuple[str, ...] | None,
) -> AuditTable:
    """The :class:`AuditTable` of ``rows`` (snapshot rows, in the planner's order).

    Raises
    ------
    CannotRecompute
        A hierarchy value that is not one of its leaves, a declared numeric value that is
        not a number.
    """
    n, d = len(rows), len(qids)
    codes = np.zeros((n, d), dtype=np.int64)
    kinds: list[str] = []
    domains: list[Any] = []
    sizes: list[int] = []
    indexes: list[dict[str, int]] = []
    for j, name in enumerate(qids):
        column = [row[header.index(name)] for row in rows]
        if name in hierarchies.order:
            leaves = hierarchies.order[name]
            index = {leaf: c for c, leaf in enumerate(leaves)}
            unknown = {v for v in column if v not in index}
            if unknown:
                raise CannotRecompute(f"{name} value {min(unknown)!r} is not a hierarchy leaf")
            codes[:, j] = [index[v] for v in column]
            kinds.append("hierarchy")
            domains.append(leaves)
            sizes.append(len(leaves))
            indexes.append(index)
            continue
        numbers = [_number(v) for v in column]
        declared = numeric is not None and name in numeric
        if declared or (numeric is None and all(x is not None for x in numbers)):
            if any(x is None for x in numbers):
                raise CannotRecompute(f"{name}: a value is not a number")
            domain, inverse = np.unique(np.array(numbers, dtype=np.float64), return_inverse=True)
            codes[:, j] = inverse.reshape(-1)
            kinds.append("numeric")
            domains.append(domain)
            sizes.append(int(domain.shape[0]))
            indexes.append({})
            continue
        distinct = sorted(set(column))
        index = {v: c for c, v in enumerate(distinct)}
        codes[:, j] = [index[v] for v in column]
        kinds.append("set")
        domains.append(distinct)
        sizes.append(len(distinct))
        indexes.append(index)
    at = header.index(sensitive)
    values = np.array([row[at] for row in rows], dtype=np.str_)
    sizes_array = np.array(sizes, dtype=np.int64).reshape(-1)
    return AuditTable(list(qids), kinds, domains, codes, sizes_array, values, indexes)


def release_table(
    manifest: dict[str, Any],
    ids: list[str],
    snapshot: Snapshot,
    rows_of: dict[str, list[str]],
    hierarchies: Hierarchies | None,
    numeric: tuple[str, ...] | None,
) -> AuditTable | None:
    """A release's snapshot rows in assignment order (its planner's), coded as the planner
    coded them (``numeric``: ``[schema] numeric``); ``None`` without the hierarchies or when
    an assigned id is not in the snapshot (a problem the rows' check reports).

    Raises
    ------
    CannotRecompute
        As :func:`encode_rows`.
    """
    if hierarchies is None or any(i not in rows_of for i in ids):
        return None
    schema = manifest.get("schema") or {}
    return encode_rows(
        [rows_of[i] for i in ids],
        snapshot.header,
        list(schema.get("qid") or []),
        str(schema.get("sensitive")),
        hierarchies,
        numeric,
    )


def _number(text: str) -> float | None:
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


@dataclass(frozen=True)
class Coverage:
    """What each group's published QIDs cover, in codes: ``lo``, ``hi`` (G, d) int64, the
    first and last code (a numeric interval, a label's leaves, a list's least and greatest
    value) and ``count`` (G, d) the codes covered; ``members[j]`` (G, c_j + 1) int64, for a
    set attribute ``j``, the prefix sums of each group's membership of every code."""

    lo: NDArray[np.int64]
    hi: NDArray[np.int64]
    count: NDArray[np.int64]
    members: dict[int, NDArray[np.int64]]


def coverage(table: AuditTable, lines: list[dict[str, Any]], hierarchies: Hierarchies) -> Coverage:
    """The codes each ``generalized`` line covers (:class:`Coverage`).

    Raises
    ------
    CannotRecompute
        A published value that is none of the snapshot's, or a label of no hierarchy.
    """
    g, d = len(lines), len(table.names)
    lo = np.zeros((g, d), dtype=np.int64)
    hi = np.zeros((g, d), dtype=np.int64)
    count = np.zeros((g, d), dtype=np.int64)
    members: dict[int, NDArray[np.int64]] = {}
    for j, name in enumerate(table.names):
        kind = table.kinds[j]
        if kind == "set":
            member = np.zeros((g, int(table.sizes[j])), dtype=np.int64)
        for k, line in enumerate(lines):
            value = (line.get("qid") or {}).get(name)
            if value is None:
                raise CannotRecompute(f"group {k} publishes no {name}")
            if kind == "hierarchy":
                leaves = hierarchies.leaves_of[name].get(str(value))
                if leaves is None:
                    raise CannotRecompute(f"group {k}: {name} = {value!r} is no label")
                found = [table.code_of(j, leaf) for leaf in leaves]
                lo[k, j], hi[k, j], count[k, j] = min(found), max(found), len(found)
            elif kind == "numeric":
                ends = value if isinstance(value, list) else [value, value]
                if len(ends) != 2:
                    raise CannotRecompute(f"group {k}: {name} = {value!r} is no interval")
                lo[k, j], hi[k, j] = table.code_of(j, ends[0]), table.code_of(j, ends[1])
                count[k, j] = hi[k, j] - lo[k, j] + 1
            else:
                listed = value if isinstance(value, list) else [value]
                found = sorted({table.code_of(j, v) for v in listed})
                member[k, found] = 1
                lo[k, j], hi[k, j], count[k, j] = found[0], found[-1], len(found)
        if kind == "set":
            members[j] = np.concatenate(
                [np.zeros((g, 1), dtype=np.int64), np.cumsum(member, axis=1)], axis=1
            )
    return Coverage(lo, hi, count, members)


Answer = Callable[
    [NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]],
    tuple[NDArray[np.float64], NDArray[np.float64]],
]


def query_errors(
    table: AuditTable,
    lines: list[dict[str, Any]],
    group: NDArray[np.int64],
    hierarchies: Hierarchies,
    *,
    fmt: str,
    queries: int,
    seed: int,
    sequence: int,
) -> NDArray[np.float64]:
    """The relative error of every query kept, in draw order (module docstring); ``group``
    (n,) the group of each row of ``table`` (-1: suppressed)."""
    if queries == 0 or group.shape[0] == 0:
        return np.empty(0, dtype=np.float64)
    pool = np.flatnonzero(group >= 0)
    if pool.size == 0:
        return np.ones(queries, dtype=np.float64)
    value_names = sorted({str(v) for v in table.values.tolist()})
    value_code = {v: c for c, v in enumerate(value_names)}
    row_value = np.array([value_code[str(v)] for v in table.values.tolist()], dtype=np.int64)
    n_of = np.zeros((len(lines), len(value_names)), dtype=np.float64)
    for k, line in enumerate(lines):
        for value, c in line["sensitive"].items():
            if str(value) not in value_code:
                raise CannotRecompute(f"group {k} holds {value!r}, no value of the snapshot")
            n_of[k, value_code[str(value)]] = int(c)
    sizes = np.array([int(line["size"]) for line in lines], dtype=np.float64)
    if fmt == "anatomy":
        answer = _anatomy(table, group, row_value, n_of, sizes)
    else:
        answer = _generalized(table, group, row_value, n_of, coverage(table, lines, hierarchies))
    rng = np.random.default_rng([seed, sequence])
    estimate, actual = _draw(table, queries, rng, row_value[pool], answer)
    return np.abs(estimate - actual) / actual


def error_figures(errors: NDArray[np.float64]) -> dict[str, float | int | None]:
    """The manifest's query figures of ``errors``: ``query_error`` (mean),
    ``query_error_median``, ``query_error_trimmed`` (``None`` each without a query) and
    ``queries``."""
    q = int(errors.shape[0])
    if q == 0:
        return {
            "query_error": None,
            "query_error_median": None,
            "query_error_trimmed": None,
            "queries": 0,
        }
    cut = int(TRIM * q)
    middle = np.sort(errors)[cut : q - cut]
    return {
        "query_error": float(errors.mean()),
        "query_error_median": float(np.median(errors)),
        "query_error_trimmed": float(middle.mean()),
        "queries": q,
    }


def _draw(
    table: AuditTable,
    queries: int,
    rng: np.random.Generator,
    pool_values: NDArray[np.int64],
    answer: Answer,
) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Draw batches until ``queries`` have an actual count >= 1 (or the draw bound); the
    estimates and actual counts of those kept, in draw order."""
    d = len(table.names)
    qd = min(MAX_ATTRIBUTES, d)
    lengths = np.maximum(1, np.rint(SELECTIVITY ** (1.0 / qd) * table.sizes)).astype(np.int64)
    estimates: list[NDArray[np.float64]] = []
    actuals: list[NDArray[np.float64]] = []
    kept = drawn = 0
    limit = MAX_DRAWS * queries
    while kept < queries and drawn < limit:
        m = min(queries - kept, limit - drawn)
        attrs = np.argsort(rng.random((m, d)), axis=1)[:, :qd].astype(np.int64)
        u = rng.random((m, qd))
        starts = np.floor(u * (table.sizes[attrs] - lengths[attrs] + 1)).astype(np.int64)
        ends = starts + lengths[attrs] - 1
        values = pool_values[rng.integers(0, pool_values.shape[0], size=m)]
        est, act = answer(attrs, starts, ends, values)
        ok = act >= 1
        estimates.append(est[ok])
        actuals.append(act[ok])
        kept += int(np.count_nonzero(ok))
        drawn += m
    return np.concatenate(estimates), np.concatenate(actuals)


def _inside(
    codes: NDArray[np.int64],
    attrs: NDArray[np.int64],
    starts: NDArray[np.int64],
    ends: NDArray[np.int64],
) -> NDArray[np.bool_]:
    """(rows, queries): whether each row's codes lie in every range of each query."""
    inside = np.ones((codes.shape[0], attrs.shape[0]), dtype=np.bool_)
    for t in range(attrs.shape[1]):
        column = codes[:, attrs[:, t]]
        inside &= (column >= starts[None, :, t]) & (column <= ends[None, :, t])
    return inside


def _generalized(
    table: AuditTable,
    group: NDArray[np.int64],
    row_value: NDArray[np.int64],
    n_of: NDArray[np.float64],
    cover: Coverage,
) -> Answer:
    published = group >= 0

    def answer(
        attrs: NDArray[np.int64],
        starts: NDArray[np.int64],
        ends: NDArray[np.int64],
        values: NDArray[np.int64],
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        est = np.zeros(attrs.shape[0], dtype=np.float64)
        act = np.zeros(attrs.shape[0], dtype=np.float64)
        for s in np.unique(values).tolist():
            q = np.flatnonzero(values == s)
            rows = np.flatnonzero(published & (row_value == s))
            act[q] = _inside(table.codes[rows], attrs[q], starts[q], ends[q]).sum(axis=0)
            holders = np.flatnonzero(n_of[:, s] > 0)
            share = np.ones((q.shape[0], holders.shape[0]), dtype=np.float64)
            for t in range(attrs.shape[1]):
                share *= _overlap(cover, holders, attrs[q, t], starts[q, t], ends[q, t])
            est[q] = share @ n_of[holders, s]
        return est, act

    return answer


def _overlap(
    cover: Coverage,
    holders: NDArray[np.int64],
    attrs: NDArray[np.int64],
    starts: NDArray[np.int64],
    ends: NDArray[np.int64],
) -> NDArray[np.float64]:
    """(queries, groups): ``|V_j(G) ∩ R_j| / |V_j(G)|`` for each query's attribute ``j``."""
    lo = cover.lo[holders][:, attrs].T
    hi = cover.hi[holders][:, attrs].T
    inside = np.maximum(
        np.minimum(hi, ends[:, None]) - np.maximum(lo, starts[:, None]) + 1, 0
    ).astype(np.float64)
    for j, prefix in cover.members.items():
        mine = np.flatnonzero(attrs == j)
        if mine.size:
            rows = prefix[holders]
            inside[mine] = (rows[:, ends[mine] + 1] - rows[:, starts[mine]]).T
    share: NDArray[np.float64] = inside / cover.count[holders][:, attrs].T
    return share


def _anatomy(
    table: AuditTable,
    group: NDArray[np.int64],
    row_value: NDArray[np.int64],
    n_of: NDArray[np.float64],
    sizes: NDArray[np.float64],
) -> Answer:
    published = group >= 0
    order = np.argsort(group, kind="stable")
    order = order[group[order] >= 0]
    ptr = np.searchsorted(group[order], np.arange(n_of.shape[0] + 1))

    def answer(
        attrs: NDArray[np.int64],
        starts: NDArray[np.int64],
        ends: NDArray[np.int64],
        values: NDArray[np.int64],
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        est = np.zeros(attrs.shape[0], dtype=np.float64)
        act = np.zeros(attrs.shape[0], dtype=np.float64)
        for s in np.unique(values).tolist():
            q = np.flatnonzero(values == s)
            rows = np.flatnonzero(published & (row_value == s))
            act[q] = _inside(table.codes[rows], attrs[q], starts[q], ends[q]).sum(axis=0)
            holders = np.flatnonzero(n_of[:, s] > 0)
            if holders.size == 0:
                continue
            members = np.concatenate([order[ptr[g] : ptr[g + 1]] for g in holders.tolist()])
            inside = _inside(table.codes[members], attrs[q], starts[q], ends[q])
            bounds = np.concatenate([[0], np.cumsum(ptr[holders + 1] - ptr[holders])])
            per_group = np.add.reduceat(inside.astype(np.float64), bounds[:-1], axis=0)
            est[q] = (n_of[holders, s] / sizes[holders]) @ per_group
        return est, act

    return answer
