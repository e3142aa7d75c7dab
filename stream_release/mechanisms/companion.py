"""The companion kinds (every ``[mechanism] kind`` but the global guarantee) behind the
publisher's protocol (:class:`~stream_release.mechanisms.base.ReleaseMechanism`): a kind's
release step (:class:`~stream_release.mechanisms.base.Mechanism`) is its plan, and its
:class:`~stream_release.mechanisms.base.MechanismRelease` is rendered here, checked, into the
group lines and the manifest it states."""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from stream_release.config import Settings
from stream_release.core.table import EncodedTable
from stream_release.core.utility.groups import group_size_stats
from stream_release.core.utility.report import utility_report
from stream_release.io.release_files import encode_lines, group_lines
from stream_release.mechanisms.base import (
    Assignment,
    Mechanism,
    MechanismRelease,
    ReleaseCommit,
    ReleaseContent,
    ReleaseInput,
)
from stream_release.mechanisms.release_parts import query_rng, schema_block
from stream_release.release_format import MechanismBlock, MechanismManifest


@dataclass(frozen=True, eq=False)
class CompanionPlan:
    """A companion kind's release as its release step made it, from ``inputs``."""

    inputs: ReleaseInput
    out: MechanismRelease
    started: float
    """``time.perf_counter()`` when the release step began (the manifest's ``elapsed_s``, for a
    kind that states it: the release step and its rendering)."""


class CompanionMechanism:
    """A companion kind as a :class:`~stream_release.mechanisms.base.ReleaseMechanism`:
    ``kind``'s release step plans, :func:`render_companion` renders."""

    shardable = False
    """A companion kind's state is one per series: no shards."""

    def __init__(self, kind: Mechanism, settings: Settings) -> None:
        self.kind = kind.kind
        self.release_step = kind
        self.settings = settings

    def plan(self, release: ReleaseInput) -> CompanionPlan:
        started = time.perf_counter()
        out = self.release_step.release(
            release.table,
            release.pseudonyms,
            sequence=release.sequence,
            randomness=release.randomness,
            load_state=release.store.load_state,
        )
        return CompanionPlan(release, out, started)

    def assignment(self, planned: CompanionPlan) -> Assignment:
        return Assignment(planned.inputs.table.ids.tolist(), planned.out.group)

    def render(self, planned: CompanionPlan, *, first_group: int = 0) -> ReleaseContent:
        if first_group:
            raise ValueError(f"first_group = {first_group}: a companion kind has no shards")
        inputs, out = planned.inputs, planned.out
        lines, manifest = render_companion(
            inputs.table,
            out,
            label=inputs.label,
            sequence=inputs.sequence,
            settings=self.settings,
            elapsed_s=time.perf_counter() - planned.started,
        )
        # no breach history: an empty commit of individuals, the dictionary unchanged
        commit = ReleaseCommit.without_history(inputs.store.values(), out.state)
        return ReleaseContent(lines, manifest, {}, commit)


PUBLISHED_SIZE_FIGURES = (
    "avg_group_size",
    "max_group_size",
    "min_group_size",
    "groups",
    "published",
)
"""The figures of :func:`~stream_release.core.utility.groups.group_size_stats` a mechanism's
manifest may state without ``input_statistics``: functions of the published group sizes alone."""

LINE_FIELDS = frozenset(
    {"release", "sequence", "group", "size", "qid", "sensitive", "members", "virtual"}
)
"""Keys of a group line (docs/contract.md §4) that a mechanism's extra fields may not use."""


def render_companion(
    table: EncodedTable,
    out: MechanismRelease,
    *,
    label: str,
    sequence: int,
    settings: Settings,
    elapsed_s: float,
) -> tuple[bytes, MechanismManifest]:
    """The bytes of ``release-NNNN.jsonl`` and the manifest of a mechanism's release.

    Group lines (docs/contract.md §4): ``release``, ``sequence``, ``group``, ``size``, ``qid``,
    ``sensitive``, then the mechanism's extra fields. The manifest: ``release``,
    ``sequence``, ``published`` (rows with a group), ``groups``, ``format``, ``schema``,
    ``mechanism`` (the mechanism's guarantee block) and ``utility`` (``avg_group_size``,
    ``max_group_size``, ``min_group_size``, ``groups``, ``published`` from the published
    sizes, plus the mechanism's own figures). No ``l``, ``strategy`` or ``breach``: those are
    the global guarantee's, and no breach history is kept for another kind.

    Figures of the input (``records_in``, ``suppressed``, ``elapsed_s``, and the utility
    report against the input: ``suppression``, ``query_error``, ``ncp``, ...) are added only
    when ``out.input_statistics`` is true (:mod:`stream_release.mechanisms.base`). No source
    file or digest of it is ever in the manifest (the private record keeps them).

    Raises
    ------
    ValueError
        ``out`` is inconsistent: ``group`` not one entry per row, a group id outside
        ``0..G-1``, sizes different from the rows assigned, per-line lists of another
        length, or an extra field that shadows a line field.
    """
    _check_mechanism_release(table, out)
    lines = list(group_lines(label, sequence, out.sizes, out.qids, None, out.sensitive))
    for line, extra in zip(lines, out.extra or [{}] * len(lines), strict=True):
        line.update(extra)
    groups = encode_lines(lines)
    published = int(np.count_nonzero(out.group >= 0))
    if out.input_statistics:
        rng = query_rng(settings, sequence)
        utility = utility_report(
            table,
            out.group,
            format="generalized",
            queries=settings.output.queries,
            rng=rng,
        )
    else:  # the published sizes only (sizes == rows per group: checked above)
        stats = group_size_stats(out.group)
        utility = {k: stats[k] for k in PUBLISHED_SIZE_FIGURES}
    utility.update(out.utility)
    stated = out.input_statistics
    manifest = MechanismManifest(
        release=label,
        sequence=sequence,
        records_in=table.n_rows if stated else None,
        published=published,
        suppressed=table.n_rows - published if stated else None,
        groups=int(out.sizes.shape[0]),
        format="generalized",
        schema_=schema_block(settings, table),
        mechanism=MechanismBlock(**out.guarantee),
        utility=utility,
        elapsed_s=round(elapsed_s, 6) if stated else None,
    )
    return groups, manifest


def _check_mechanism_release(table: EncodedTable, out: MechanismRelease) -> None:
    n = table.n_rows
    if out.group.shape != (n,):
        raise ValueError(f"mechanism release: group has shape {out.group.shape}, expected ({n},)")
    g = int(out.sizes.shape[0])
    for name in ("qids", "sensitive"):
        if len(getattr(out, name)) != g:
            raise ValueError(
                f"mechanism release: {len(getattr(out, name))} {name} for {g} group sizes"
            )
    if out.extra and len(out.extra) != g:
        raise ValueError(f"mechanism release: {len(out.extra)} extra dicts for {g} groups")
    clash = sorted({key for extra in out.extra for key in extra} & LINE_FIELDS)
    if clash:
        raise ValueError(f"mechanism release: extra fields {clash} shadow group line fields")
    assigned = out.group[out.group >= 0]
    if assigned.size and int(assigned.max()) >= g:
        raise ValueError(f"mechanism release: a row is in group {int(assigned.max())} of {g}")
    counts = np.bincount(assigned, minlength=g)
    if not np.array_equal(counts, out.sizes):
        bad = int(np.flatnonzero(counts != out.sizes)[0])
        raise ValueError(
            f"mechanism release: group {bad} has size {int(out.sizes[bad])} but "
            f"{int(counts[bad])} rows"
        )
