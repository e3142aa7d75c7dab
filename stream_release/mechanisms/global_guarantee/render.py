"""The global guarantee's plan as it is published: its group lines and its manifest.

Shared by offline ``anonymize`` and the streaming worker, so both publish the same content.
The utility report's kernels release the GIL, so they run in a thread while the lines are
built and encoded (a million-row release: about a second less on two cores).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from stream_release.config import Horizon, Settings
from stream_release.core.grouping.generalize import (
    anatomy_members,
    generalized_columns,
    multisets,
)
from stream_release.core.grouping.layout import ReleaseLayout
from stream_release.core.grouping.partition import group_size_cap
from stream_release.core.table import EncodedTable
from stream_release.core.utility.report import utility_report
from stream_release.io.file_assembly import encode_generalized_lines
from stream_release.io.release_files import encode_lines, group_lines
from stream_release.mechanisms.global_guarantee.plan import ReleasePlan
from stream_release.mechanisms.release_parts import query_rng, schema_block
from stream_release.release_format import (
    GuaranteeManifest,
    StrategyBlock,
    SuppressedSetSummary,
    VirtualSummary,
)


def render_guarantee(
    table: EncodedTable,
    plan: ReleasePlan,
    *,
    label: str,
    sequence: int,
    settings: Settings,
    horizon: Horizon,
    started: float,
    first_group: int = 0,
) -> tuple[bytes, GuaranteeManifest]:
    """The bytes of ``release-NNNN.jsonl`` (:func:`encode_lines`) and the manifest of one
    release (docs/contract.md §4); the groups are numbered from ``first_group`` (a shard's
    part of a release); ``horizon`` is the series' (``strategy.horizon``).

    The manifest is public: it names no file and holds no digest of any input (a hash of the
    snapshot would let whoever knows all rows but one confirm that row's value); the source
    goes to the private record.

    The plan's :class:`~stream_release.core.grouping.layout.ReleaseLayout`, with the bounds of
    the ``generalized`` format added here once, is what the lines and the utility report read:
    neither rebuilds the groups, their bounds or their sensitive pairs.
    """
    elapsed_s = time.perf_counter() - started  # the manifest's: planning to rendering
    fmt = settings.output.format
    rng = query_rng(settings, sequence)
    layout = plan.layout.with_bounds(table) if fmt == "generalized" else plan.layout
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="utility") as pool:
        utility_future = pool.submit(
            utility_report,
            table,
            layout,
            format=fmt,
            queries=settings.output.queries,
            rng=rng,
            real=None if plan.virtual is None else plan.real,
        )
        registry = settings.virtual.registry is not None
        groups = _lines(table, plan, layout, label, sequence, fmt, registry, first_group)
        utility = utility_future.result()
    privacy = settings.privacy
    strategy = StrategyBlock(
        name=plan.strategy.name,
        l=plan.strategy.ell,
        base_ratio=plan.strategy.target,
        k_prime=plan.strategy.k_prime,
        alpha=plan.strategy.alpha,
        protected=list(privacy.protected),
        # a weakened setting, acknowledged: stated publicly
        acknowledged=list(privacy.acknowledged) if privacy.acknowledged else None,
        min_group_size=privacy.min_group_size,
        group_size_cap=group_size_cap(
            plan.strategy.base_ratio, privacy.min_group_size, settings.grouping.max_group_factor
        ),
        horizon=horizon.releases,
    )
    star = plan.suppressed_set
    manifest = GuaranteeManifest(
        release=label,
        sequence=sequence,
        records_in=plan.records_in,
        published=plan.published_real,
        suppressed=plan.suppressed,
        groups=plan.contents.n_groups,
        l=plan.strategy.ell,
        strategy=strategy,
        format=fmt,
        schema_=schema_block(settings, table),
        breach=plan.breach_summary(),
        suppressed_set=SuppressedSetSummary(
            rows=star.size,
            share_max=star.share_max(plan.protected),
            share_bound=1.0 / plan.strategy.ell,
            breach_max=plan.suppressed_breach,
        ),
        utility=utility,
        elapsed_s=round(elapsed_s, 6),
        past_horizon=horizon.past(sequence),
        first_group=first_group or None,  # a shard's part, never published as it is
        virtual=VirtualSummary(
            members=int(plan.contents.virtual.sum()), assumption=VIRTUAL_ASSUMPTION
        )
        if registry
        else None,
    )
    return groups, manifest


VIRTUAL_ASSUMPTION = (
    "Groups may hold virtual members: people of a population register absent from this "
    "snapshot, who count in a group's size and hold no sensitive value (Wong et al., ICDE "
    "2010, section 8). The guarantee holds only against an adversary who cannot tell who is "
    "in a snapshot."
)
"""What a manifest of a series with a register states (``virtual.assumption``)."""


def suppressed_record(table: EncodedTable, plan: ReleasePlan) -> dict[str, Any]:
    """The suppressed set as the private record keeps it for the audit and the operator
    (``private-NNNN.json``'s ``suppressed``): its size, its multiset of values, the ids of the
    members withheld for their history (``withheld``: the audit recomputes the rule and
    allows a pair past the bound only to them) and of those no group could take
    (``unplaced``), how many rows were taken as decoys, and how many members have a pair held
    to the per-release bound only (``exempt_members``).

    Never published. The multiset is the snapshot's value totals less the public counts: an
    adversary the guarantee allows for knows it already, but the publisher need not confirm
    it. The manifest states none of the other figures: which suppressed rows are decoys and
    which the grouping could not place is what lets the set dilute its members' values
    (:mod:`~stream_release.core.grouping.suppressed_set`).
    """
    star = plan.suppressed_set
    values = table.sensitive_values
    return {
        "rows": star.size,
        "sensitive": {values[v]: int(c) for v, c in enumerate(star.counts.tolist()) if c},
        "decoys": int(star.decoys.shape[0]),
        "withheld": [str(i) for i in table.ids[star.withheld].tolist()],
        "unplaced": [str(i) for i in table.ids[star.unplaced].tolist()],
        "exempt_members": int(star.exempt_members.shape[0]),
    }


def _lines(
    table: EncodedTable,
    plan: ReleasePlan,
    layout: ReleaseLayout,
    label: str,
    sequence: int,
    fmt: str,
    registry: bool,
    first_group: int = 0,
) -> bytes:
    """The bytes of the group lines, generalized or in anatomy form, read from the release's
    ``layout``; with a ``registry``, each states its ``virtual`` members (counted in
    ``size``). O(n d + G d): each group's generalized values from the layout's bounds, then
    one compiled pass writing every line."""
    c = plan.contents  # computed once, when the release was planned
    virtual = c.virtual if registry else None
    if fmt != "anatomy":
        return encode_generalized_lines(
            label,
            sequence,
            c.size,
            generalized_columns(table, layout),
            table.sensitive_values,
            c.pair_ptr,
            c.pair_value,
            c.pair_count,
            first_group=first_group,
            virtual=virtual,
        )
    sensitive = multisets(table.sensitive_values, c.pair_ptr, c.pair_value, c.pair_count)
    members = anatomy_members(table, layout)
    lines = list(group_lines(label, sequence, c.size, None, members, sensitive, first_group))
    if virtual is not None:
        for line, count in zip(lines, virtual.tolist(), strict=True):
            line["virtual"] = int(count)
    return encode_lines(lines)
