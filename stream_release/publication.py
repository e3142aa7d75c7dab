"""Turn a planned release into what is published: group lines and the manifest.

Shared by offline ``anonymize`` and the streaming worker, so both publish the same content.
The utility report's kernels release the GIL, so they run in a thread while the lines are
built and encoded (a million-row release: about a second less on two cores).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from stream_release.config import Settings
from stream_release.grouping.generalize import (
    anatomy_members,
    generalize_groups,
    multisets,
)
from stream_release.io.release_files import encode_lines, group_lines
from stream_release.metrics import utility_report
from stream_release.release import ReleasePlan
from stream_release.table import EncodedTable


def render_release(
    table: EncodedTable,
    plan: ReleasePlan,
    *,
    label: str,
    sequence: int,
    settings: Settings,
    elapsed_s: float,
    source: dict[str, Any] | None = None,
) -> tuple[bytes, dict[str, Any]]:
    """The bytes of ``release-NNNN.jsonl`` (:func:`encode_lines`) and the manifest of one
    release (CONTRACT §4)."""
    fmt = settings.output.format
    rng = np.random.default_rng([settings.output.query_seed, sequence])
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="utility") as pool:
        utility_future = pool.submit(
            utility_report, table, plan.group, format=fmt, queries=settings.output.queries, rng=rng
        )
        groups = encode_lines(_lines(table, plan, label, sequence, fmt))
        utility = utility_future.result()
    strategy = plan.strategy.describe()
    strategy["protected"] = list(settings.privacy.protected)
    strategy["min_group_size"] = settings.privacy.min_group_size
    manifest: dict[str, Any] = {
        "release": label,
        "sequence": sequence,
        "records_in": table.n_rows,
        "published": int(plan.published.shape[0]),
        "suppressed": plan.suppressed,
        "suppressed_by_history": plan.suppressed_by_history,
        "groups": plan.contents.n_groups,
        "l": plan.strategy.ell,
        "strategy": strategy,
        "format": fmt,
        "schema": {
            "id": settings.schema.id,
            "qid": list(table.qid_names),
            "sensitive": settings.schema.sensitive,
        },
        "breach": plan.breach_summary(),
        "utility": utility,
        "elapsed_s": round(elapsed_s, 6),
    }
    if source is not None:
        manifest["source"] = source
    return groups, manifest


def _lines(
    table: EncodedTable, plan: ReleasePlan, label: str, sequence: int, fmt: str
) -> list[dict[str, Any]]:
    """The JSON objects of the group lines, generalized or in anatomy form."""
    c = plan.contents  # computed once, when the release was planned
    sensitive = multisets(table.sensitive_values, c.pair_ptr, c.pair_value, c.pair_count)
    if fmt == "anatomy":
        members = anatomy_members(table, plan.group)
        return list(group_lines(label, sequence, c.size, None, members, sensitive))
    qids = generalize_groups(table, plan.group)
    return list(group_lines(label, sequence, c.size, qids, None, sensitive))
