"""Turn a planned release into what is published: group lines and the manifest.

Shared by offline ``anonymize`` and the streaming worker, so both publish the same content.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stream_release.config import Settings
from stream_release.grouping.generalize import (
    anatomy_members,
    generalize_groups,
    multisets,
)
from stream_release.io.release_files import group_lines
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
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The group lines and the manifest of one release (CONTRACT §4)."""
    fmt = settings.output.format
    c = plan.contents  # computed once, when the release was planned
    sensitive = multisets(table.sensitive_values, c.pair_ptr, c.pair_value, c.pair_count)
    if fmt == "anatomy":
        lines = list(
            group_lines(
                label,
                sequence,
                plan.contents.size,
                None,
                anatomy_members(table, plan.group),
                sensitive,
            )
        )
    else:
        lines = list(
            group_lines(
                label,
                sequence,
                plan.contents.size,
                generalize_groups(table, plan.group),
                None,
                sensitive,
            )
        )
    rng = np.random.default_rng([settings.output.query_seed, sequence])
    utility = utility_report(
        table, plan.group, format=fmt, queries=settings.output.queries, rng=rng
    )
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
    return lines, manifest
