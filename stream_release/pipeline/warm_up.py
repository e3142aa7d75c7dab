"""Compile every kernel a release uses before the first release needs it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

from stream_release.core.grouping.layout import ReleaseLayout
from stream_release.core.grouping.requirements import Requirements
from stream_release.core.table import EncodedTable
from stream_release.mechanisms.global_guarantee.plan import plan_release


def warm_up() -> None:
    """Compile (or load from numba's disk cache) every kernel a release uses, on a tiny table.

    The first compilation takes tens of seconds; later processes load the cache in about a
    second. Services call this at start so that no release pays for it.
    """
    from stream_release.core.grouping.generalize import generalized_columns
    from stream_release.core.grouping.partition import group_rules, kernel_table
    from stream_release.core.grouping.passes import compile_parallel
    from stream_release.core.privacy.linkage import HistoryRows as _Rows
    from stream_release.core.privacy.strategy import make_strategy
    from stream_release.core.table import Attribute
    from stream_release.core.utility.report import utility_report
    from stream_release.history.file_store import FileHistoryStore
    from stream_release.history.overlay_store import OverlayHistoryStore
    from stream_release.history.pseudonym import Pseudonymizer
    from stream_release.history.resp import mset_command
    from stream_release.io.file_assembly import encode_generalized_lines
    from stream_release.io.release_files import assignments_csv

    n = 12
    table = EncodedTable(
        ids=np.array([f"w{i}" for i in range(n)], dtype=object),
        qid=np.stack([np.arange(n) % 4, np.arange(n) % 3], axis=1).astype(np.int32),
        sensitive=(np.arange(n) % 4).astype(np.int32),
        sensitive_values=("a", "b", "c", "d"),
        attributes=(
            Attribute("x", "numeric", np.arange(4, dtype=np.float64)),
            Attribute("y", "set", np.array(["p", "q", "r"], dtype=object)),
        ),
    )
    plan = plan_release(
        table, _Rows.empty(n), (), make_strategy("constant-ratio", ell=2, k_prime=1)
    )
    # every row linked at the bound (k' = 1): all withheld for their history, one set
    again = plan_release(
        table, plan.history, plan.values, make_strategy("constant-ratio", ell=2, k_prime=1)
    )
    plan_release(table, again.history, again.values, make_strategy("geometric", ell=2, alpha=2))
    # passes 1 and 2 on their parallel kernels, which a table this small never reaches
    compile_parallel(
        kernel_table(table),
        group_rules(np.ones(4, np.bool_), Requirements.uniform(2.0, n), min_group_size=2, cap=4),
    )
    # a fixed grouping that publishes every row: the plans above may suppress the tiny table
    # whole, and then the query kernels would compile at the first real release instead
    groups = np.arange(n, dtype=np.int64) // 3
    for fmt in ("generalized", "anatomy"):
        utility_report(table, groups, format=fmt, queries=10, rng=np.random.default_rng(0))
    # the file kernels (stream_release.io.file_assembly): one signature with or without the
    # virtual column, so one call each
    layout = ReleaseLayout.of(table, groups, bounds=True)
    sizes = np.bincount(groups).astype(np.int64)
    encode_generalized_lines(
        "w",
        1,
        sizes,
        generalized_columns(table, layout),
        table.sensitive_values,
        layout.pair_ptr,
        layout.pair_value,
        layout.pair_count,
        virtual=np.zeros(sizes.shape[0], dtype=np.int64),
    )
    assignments_csv(table.ids.tolist(), groups, np.zeros(n, dtype=np.bool_))
    # the commit's MSET (stream_release.history.resp)
    indptr = np.arange(n + 1, dtype=np.int64)
    mset_command(
        np.zeros((n, 8), dtype=np.uint8), np.arange(n), indptr, np.zeros(16 * n, np.uint8), 16
    )
    # the pseudonyms' hash (stream_release.history._blake2b)
    pseudonyms = Pseudonymizer(b"warm-up key, not a secret").pseudonyms(table.ids)
    # the file store's segments (stream_release.history._segments: a commit, a merge, a load)
    # and the dry run's overlay (stream_release.history._csr)
    with tempfile.TemporaryDirectory() as directory:
        store = FileHistoryStore(Path(directory))
        store.commit(1, pseudonyms, plan.history, plan.values, b"")
        store.commit(2, pseudonyms, again.history, again.values, b"")
        overlay = OverlayHistoryStore(store)
        overlay.commit(3, pseudonyms[:1], again.history.take(np.zeros(1, np.int64)),
                       again.values, b"")  # fmt: skip
        overlay.load(pseudonyms)
        store.close()
