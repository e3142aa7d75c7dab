"""The indexes that answer the count queries of :mod:`~stream_release.core.utility.queries`.

:class:`TableCounts` answers a batch with the actual counts on a table alone;
:class:`ReleaseCounts` with the actual counts and the estimates from one release (the estimates
of the module docstring of :mod:`~stream_release.core.utility.queries`). Both are built once per
call (rows with identical QIDs merged by :func:`merge_rows`) and handed to the compiled scans
of :mod:`~stream_release.core.utility.query_kernels`.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numpy.typing import NDArray

from stream_release.core.grouping.layout import ReleaseLayout
from stream_release.core.grouping.threads import available_threads
from stream_release.core.table import EncodedTable
from stream_release.core.utility.groups import OutputFormat
from stream_release.core.utility.query_kernels import factorize_keys, scan_combos, scan_groups


class TableCounts:
    """Actual counts of queries on a table (every row, or the rows of ``rows``), without a
    release: the ``actual`` half of :class:`ReleaseCounts`, indexed the same way."""

    def __init__(self, table: EncodedTable, rows: NDArray[np.int64] | None = None) -> None:
        n_values = max(len(table.sensitive_values), 1)
        combos, combo_of_row = merge_rows(table.qid)
        n_combos = combos.shape[0]
        keys = table.sensitive.astype(np.int64) * n_combos + combo_of_row
        if rows is not None:
            keys = keys[rows]
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
        min_count: int = 0,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Actual counts of queries (attrs, [starts, ends], values) and zeros, (m,) each
        (``min_count``: as :meth:`ReleaseCounts.answer` takes it; every count here is cheap)."""
        counts: tuple[NDArray[np.float64], NDArray[np.float64]] = scan_combos(
            attrs, starts, ends, values, self.c_ptr, self.c_codes, self.c_actual, self.c_weight
        )
        return counts


class ReleaseCounts:
    """The indexes every query of one release needs (built once per call): actual counts and
    the estimates from the release.

    Merged rows (distinct QID combinations) and groups are both stored per sensitive value:
    entries ``ptr[s] <= k < ptr[s+1]`` belong to value ``s``, and every per-entry array is laid
    out attribute-major, ``(d, K)``, so that a query streams through contiguous memory.
    """

    def __init__(self, table: EncodedTable, layout: ReleaseLayout, format: OutputFormat) -> None:
        n_values = max(len(table.sensitive_values), 1)
        self.anatomy = format == "anatomy"
        groups = layout.groups
        combos, combo_of_row = merge_rows(table.qid)
        n_combos = combos.shape[0]
        # Actual counts: (value, combination) -> published rows of the snapshot. Never the
        # suppressed rows: their values are what suppression hides, and an error computed
        # from them would change when they are permuted among themselves (a published figure
        # that depends on which suppressed person holds which value).
        shown = layout.group >= 0
        keys = (table.sensitive.astype(np.int64) * n_combos + combo_of_row)[shown]
        pair_ptr, pair_value, pair_count = layout.pair_ptr, layout.pair_value, layout.pair_count
        space = n_values * n_combos
        if self.anatomy:
            # W[s, combination] = sum over the published rows r with that combination of
            # n(G_r, s) / |G_r|, one term for every value s held by r's group.
            group_of_row = groups.group_of_sorted()
            held = np.diff(pair_ptr)[group_of_row]  # (m,) values held by each row's group
            row = np.repeat(np.arange(groups.published), held)
            block = np.cumsum(held) - held  # where each row's terms start
            pair = np.repeat(pair_ptr[group_of_row] - block, held) + np.arange(row.shape[0])
            w_keys = pair_value[pair].astype(np.int64) * n_combos + combo_of_row[groups.rows[row]]
            w_terms = pair_count[pair] / groups.sizes[group_of_row[row]]
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
        group_of_pair = np.repeat(np.arange(groups.n_groups, dtype=np.int64), np.diff(pair_ptr))
        self.g_id = group_of_pair[order]
        self.g_count = pair_count[order].astype(np.float64)
        bounds = layout.group_bounds(table)
        lo, hi = bounds.lo, bounds.hi
        self.g_lo = np.ascontiguousarray(lo[self.g_id].T)
        self.g_hi = np.ascontiguousarray(hi[self.g_id].T)
        d = len(table.attributes)
        # kind 0: interval of codes; 1: set over <= 64 codes (bit mask); 2: larger set (CSR).
        self.kind = np.zeros(d, dtype=np.int64)
        self.mask_row = np.full(d, -1, dtype=np.int64)
        masks: list[NDArray[np.uint64]] = []
        self.set_ptr = np.zeros((d, groups.n_groups + 1), dtype=np.int64)
        chunks: list[NDArray[np.int32]] = []
        base = 0
        for j, attribute in enumerate(table.attributes):
            if attribute.kind != "set":
                continue
            ptr, codes = bounds.distinct[j]
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
        min_count: int = 0,
    ) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """Actual and estimated counts of queries (attrs, [starts, ends], values), (m,) each.

        The estimate of a query whose actual count is below ``min_count`` is not computed
        (NaN): the workload drops it. In the generalized format each estimate scans every
        group holding the query's value, O(groups) per query, the costliest figure of a large
        release; the kept queries are scanned in parts on the threads the grouping may use
        (:func:`~stream_release.core.grouping.threads.available_threads`: the free cores, at
        most ``[grouping] threads``; the kernel releases the GIL), each estimate the same as
        on one.
        """
        act, est = scan_combos(
            attrs, starts, ends, values, self.c_ptr, self.c_codes, self.c_actual, self.c_weight
        )
        if self.anatomy:
            return act, est
        kept = np.flatnonzero(act >= min_count)
        est = np.full(act.shape[0], np.nan)
        parts = np.array_split(kept, available_threads())
        with ThreadPoolExecutor(max_workers=len(parts)) as pool:
            batch = [(attrs, starts, ends, values)] * len(parts)
            for rows, part in zip(parts, pool.map(self._estimate, parts, batch), strict=True):
                est[rows] = part
        return act, est

    def _estimate(
        self,
        rows: NDArray[np.int64],
        queries: tuple[NDArray[np.int64], NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]],
    ) -> NDArray[np.float64]:
        """The generalized estimates of the queries ``rows`` of the batch ``queries``."""
        attrs, starts, ends, values = (np.ascontiguousarray(q[rows]) for q in queries)
        estimates: NDArray[np.float64] = scan_groups(
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
        return estimates


def _aggregate(
    keys: NDArray[np.int64], space: int, *weights: NDArray[np.float64]
) -> tuple[NDArray[np.int64], list[NDArray[np.float64]]]:
    """Distinct ``keys`` (ascending, all in ``0..space-1``) and the sum of each weight array
    over each key: a dense ``bincount`` when the key space is small, else a sort."""
    if space <= max(4 * keys.shape[0], 1 << 20):
        sums = [_weighted_count(keys, w, space) for w in weights]
        present = np.flatnonzero(np.bincount(keys, minlength=space))
        return present.astype(np.int64), [total[present] for total in sums]
    distinct, inverse = np.unique(keys, return_inverse=True)
    inverse = inverse.reshape(-1)
    return distinct, [_weighted_count(inverse, w, distinct.shape[0]) for w in weights]


def _weighted_count(
    keys: NDArray[np.int64], weights: NDArray[np.float64], size: int
) -> NDArray[np.float64]:
    """(size,) float64 sum of ``weights`` over each key ``0..size-1``."""
    return np.bincount(keys, weights=weights, minlength=size).astype(np.float64, copy=False)


def pack_key(qid: NDArray[np.int32]) -> NDArray[np.int64] | None:
    """(n,) int64: each row of ``qid`` (n, d), n >= 1, as one mixed-radix key (equal rows, equal
    keys), or ``None`` when the product of the radixes reaches 2**62 (no room in an int64)."""
    radix = qid.max(axis=0).astype(np.int64) + 1
    if float(np.prod(radix.astype(np.float64))) >= 2.0**62:
        return None
    key = np.zeros(qid.shape[0], dtype=np.int64)
    for j in range(qid.shape[1]):
        key = key * radix[j] + qid[:, j]
    return key


def merge_rows(qid: NDArray[np.int32]) -> tuple[NDArray[np.int32], NDArray[np.int64]]:
    """Distinct rows of ``qid`` (C, d) int32 and each row's combination index (n,) int64."""
    n, d = qid.shape
    if n == 0:
        return np.empty((0, d), dtype=np.int32), np.empty(0, dtype=np.int64)
    key = pack_key(qid)
    if key is not None:
        inverse, first = factorize_keys(key)
        return np.ascontiguousarray(qid[first]), inverse
    combos, inverse = np.unique(qid, axis=0, return_inverse=True)
    return np.ascontiguousarray(combos, dtype=np.int32), inverse.astype(np.int64).reshape(n)
