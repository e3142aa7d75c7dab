"""What a series will cost, before anything is published: ``stream-release plan``.

Each candidate setting publishes the snapshots as a what-if series
(:func:`what_if`: planned against an in-memory overlay
of the history, nothing written or committed) and reports, per release, whether it is feasible
(else the refusal, which names the largest feasible setting), suppression, the individuals
withheld for their history, group sizes and the relative error of count queries (mean, median and
10 % trimmed mean of the manifest's ``utility``: the mean is dominated by queries with tiny
true counts). Candidates: the configured setting, then constant-ratio ``k'`` in
:data:`K_PRIMES` and geometric ``alpha`` in :data:`ALPHAS` at the configured ``l``; with a
``[virtual] registry``, each with the register and without it.

The forecast extrapolates the individuals withheld for their history (a plan above the cap
for some protected value: the release holds them to the per-release bound only,
docs/guarantee.md) linearly: the distinct individuals withheld so far plus the mean number newly
withheld per release over the later half of the what-if series, for each release up to the
horizon. It assumes the snapshots' churn goes on as measured.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stream_release.config import (
    SchemaSettings,
    Settings,
    VirtualSettings,
    horizon_of,
    load_settings,
    plan_digest,
)
from stream_release.config.hierarchy import Hierarchy, load_hierarchies
from stream_release.core.table import EncodedTable
from stream_release.errors import ConfigError, GuaranteeUnsatisfiable
from stream_release.history.overlay_store import OverlayHistoryStore
from stream_release.io.encoding import encode
from stream_release.io.snapshot import RawSnapshot, snapshot_from_columns
from stream_release.io.snapshot_csv import read_snapshot
from stream_release.mechanisms.global_guarantee.parts import merge_part_manifests
from stream_release.pipeline.diagnosis import Diagnosis, diagnose, proposals, shard_of
from stream_release.pipeline.publisher import Publisher
from stream_release.pipeline.render import RenderedRelease

__all__ = [
    "ALPHAS",
    "K_PRIMES",
    "PlanReport",
    "PlannedSetting",
    "WhatIfRelease",
    "candidates",
    "plan_report",
    "plan_series",
]

CONFIGURED = " (configured)"
"""The end of the configured candidate's name."""

K_PRIMES = (2, 3, 4, 5, 10, 20)
"""Constant-ratio ``k'`` tried by :func:`candidates`."""

ALPHAS = (1.5, 2.0, 3.0, 5.0)
"""Geometric ``alpha`` tried by :func:`candidates`."""


@dataclass(frozen=True)
class WhatIfRelease:
    """One release of a what-if series."""

    sequence: int
    label: str
    rows: int
    suppressed: int
    withheld: tuple[str, ...]
    """The individuals withheld for their history, as the private record names them: counted,
    never printed."""
    avg_group: float
    max_group: int
    error_mean: float
    error_median: float
    error_trimmed: float

    @property
    def suppression(self) -> float:
        return self.suppressed / self.rows if self.rows else 0.0


@dataclass
class PlannedSetting:
    """A candidate setting's what-if series: its releases until the first refusal."""

    name: str
    privacy: dict[str, Any]
    releases: list[WhatIfRelease] = field(default_factory=list)
    refused: str | None = None
    """The refusal of the first infeasible release (``None``: every release is feasible)."""
    lasts: int | None = None
    """The releases the setting keeps everyone inside its plan (``None``: no horizon)."""
    skipped: bool = False
    """Not run: the setting does not last the horizon the plan is made for."""
    digest: str | None = None
    """On shards, for a setting that lasts the horizon and publishes every snapshot on every
    shard: what ``[privacy] planned`` must hold for a worker to run it with that horizon
    (:func:`~stream_release.config.plan_digest`)."""

    @property
    def feasible(self) -> bool:
        return self.refused is None and not self.skipped

    def withheld_so_far(self) -> int:
        """Distinct individuals withheld for their history in any release of the series."""
        return len({p for r in self.releases for p in r.withheld})

    def forecast(self, horizon: int) -> int | None:
        """Individuals withheld after ``horizon`` releases at the measured churn (linear in
        the newly withheld per release over the later half); ``None`` without two releases."""
        if len(self.releases) < 2:
            return None
        seen: set[str] = set()
        new = []
        for r in self.releases:
            fresh = set(r.withheld) - seen
            new.append(len(fresh))
            seen |= fresh
        later = new[len(new) // 2 :]
        rate = sum(later) / len(later)
        return round(len(seen) + rate * max(horizon - len(self.releases), 0))


def candidates(settings: Settings) -> list[tuple[str, dict[str, Any]]]:
    """``(name, [privacy] overrides)``: the configured setting first, then the grid; with a
    register, each setting with it (its name ending in ``+ register``) then without it
    (``virtual`` ``{"registry": None}`` in the overrides); on shards, without it only."""
    plain = _grid(settings)
    if settings.virtual.registry is None:
        return plain
    if settings.kafka.partitions > 1:  # a register cannot run on shards: ShardedCut refuses it
        return [(name, {**privacy, "virtual": {"registry": None}}) for name, privacy in plain]
    out = []
    for name, privacy in plain:
        out.append((f"{name} + register", privacy))
        out.append((name, {**privacy, "virtual": {"registry": None}}))
    return out


def _grid(settings: Settings) -> list[tuple[str, dict[str, Any]]]:
    privacy = settings.privacy
    configured: dict[str, Any] = {"strategy": privacy.strategy, "l": privacy.l}
    if privacy.strategy == "constant-ratio":
        configured["k_prime"] = privacy.k_prime
    elif privacy.strategy == "geometric":
        configured["alpha"] = privacy.alpha
    out = [(_name(configured) + CONFIGURED, configured)]
    grid: list[dict[str, Any]] = [
        {"strategy": "constant-ratio", "l": privacy.l, "k_prime": k} for k in K_PRIMES
    ]
    grid += [{"strategy": "geometric", "l": privacy.l, "alpha": a} for a in ALPHAS]
    out += [(_name(g), g) for g in grid if g != configured]
    return out


def _name(privacy: dict[str, Any]) -> str:
    if privacy["strategy"] == "constant-ratio":
        return f"constant-ratio l={privacy['l']:g} k'={privacy['k_prime']}"
    if privacy["strategy"] == "geometric":
        return f"geometric l={privacy['l']:g} alpha={privacy['alpha']:g}"
    return f"{privacy['strategy']} l={privacy['l']:g}"


@dataclass
class PlanReport:
    """What ``stream-release plan`` prints: the candidates' series, the diagnosis of the
    configured setting, and the proposed settings' series."""

    settings: list[PlannedSetting]
    diagnosis: Diagnosis
    proposals: list[PlannedSetting]
    horizon: int
    """The releases the series is planned for (``--horizon``, else ``[privacy] horizon``,
    else the number of snapshots): the candidates that do not last it are not run, and the
    proposals last it."""
    snapshots: int = 0
    """The snapshots the series was planned on."""
    fixed_key: bool = False
    """Planned under :data:`WHAT_IF_KEY` (no key configured): the figures are those of its row
    order, not the series key's."""


WHAT_IF_KEY = "stream-release what-if series key, not a secret"
"""The pseudonymisation key of a what-if series on a new history (no ``--history``, no key
configured): a plan writes nothing, so no secret is at stake, and a fixed key makes its figures
the same on every run (the grouping orders individuals by pseudonym)."""


def plan_series(
    config: Path | None,
    snapshots: Sequence[Path],
    *,
    history: str | Path | None = None,
    settings_overrides: dict[str, Any] | None = None,
) -> list[PlannedSetting]:
    """Every candidate setting's what-if series over ``snapshots`` (CSV files), from
    ``history`` (a store to continue: read, never written) or from an empty one."""
    return plan_report(
        config, snapshots, history=history, settings_overrides=settings_overrides
    ).settings


def plan_report(
    config: Path | None,
    snapshots: Sequence[Path],
    *,
    history: str | Path | None = None,
    settings_overrides: dict[str, Any] | None = None,
    advise: bool = False,
    horizon: int | None = None,
    on_step: Callable[[int, int, str], None] | None = None,
) -> PlanReport:
    """:func:`plan_series`, and with ``advise`` the diagnosis of the configured setting
    (:mod:`~stream_release.pipeline.diagnosis`) and the what-if series of its proposals for a
    series of ``horizon`` releases (default ``[privacy] horizon``, else as many as
    ``snapshots``). A candidate that does not last the horizon
    (:meth:`~stream_release.core.privacy.strategy.Strategy.lasts`) is listed, not run, but the
    configured one, which is run whatever it lasts. ``on_step(done, total, name)`` after each
    setting (``total`` grows by the proposals once the diagnosis has made them)."""
    overrides = settings_overrides or {}
    settings = load_settings(config, **overrides)
    fixed_key = settings.history.key is None and settings.history.key_file is None
    if history is None and fixed_key:
        history_overrides = {**overrides.get("history", {}), "key": WHAT_IF_KEY}
        overrides = {**overrides, "history": history_overrides}
        settings = load_settings(config, **overrides)
    schema, shards = settings.schema, settings.kafka.partitions
    if history is not None and shards > 1:
        raise ConfigError(
            f"plan --history with kafka.partitions = {shards}: a series on shards keeps each "
            "shard's histories under its own tag, which plan does not read; plan the series "
            "from its first snapshot (without --history), or with kafka.partitions = 1"
        )
    hierarchies = load_hierarchies(schema)
    raws = [(read_snapshot(path, schema), path.stem) for path in snapshots]
    tables = [(encode(raw, schema, hierarchies), label) for raw, label in raws]
    parts = [tables] if shards == 1 else _parts(raws, shards, schema, hierarchies)
    del raws

    planned_for = horizon or settings.privacy.horizon or len(tables)

    def run(name: str, chosen: dict[str, Any]) -> PlannedSetting:
        privacy = {k: v for k, v in chosen.items() if k != "virtual"}
        # a candidate is judged against the plan's horizon here, not refused by the file's
        privacy.setdefault("horizon", None)
        update = {**overrides, "privacy": {**overrides.get("privacy", {}), **privacy}}
        candidate = load_settings(config, **update)
        if "virtual" in chosen:
            candidate = candidate.model_copy(update={"virtual": VirtualSettings()})
        lasts = horizon_of(candidate.privacy, candidate.grouping).lasts
        if lasts is not None and lasts < planned_for and not name.endswith(CONFIGURED):
            return PlannedSetting(name, privacy, lasts=lasts, skipped=True)
        out = _what_if(candidate, name, privacy, parts, history)
        out.lasts = lasts
        if out.feasible and shards > 1 and lasts is not None and lasts >= planned_for:
            c = candidate
            out.digest = plan_digest(c.privacy, c.grouping, c.schema, shards, planned_for)
        return out

    listed = candidates(settings)
    total = len(listed)

    def step(name: str, chosen: dict[str, Any], done: int) -> PlannedSetting:
        out = run(name, chosen)
        if on_step is not None:
            on_step(done, total, name)
        return out

    planned = [step(name, chosen, i) for i, (name, chosen) in enumerate(listed, start=1)]
    diagnosis = diagnose(settings, [table for table, _ in tables])
    offered = proposals(settings, diagnosis, planned_for) if advise else []
    total += len(offered)
    offered_runs = [step(n, c, len(listed) + i) for i, (n, c) in enumerate(offered, start=1)]
    return PlanReport(planned, diagnosis, offered_runs, planned_for, len(tables), fixed_key)


def _what_if(
    settings: Settings,
    name: str,
    privacy: dict[str, Any],
    parts: list[list[tuple[EncodedTable, str]]],
    history: str | Path | None,
) -> PlannedSetting:
    """The what-if series of one setting over each shard's ``parts`` (:func:`_parts`; the
    snapshots themselves on one shard). Each shard's parts are a series of their own, planned
    against the histories of the shard's individuals as its owner plans them; a release is
    feasible when every part is, and its figures are the parts' merged as the worker merges
    them (:func:`~stream_release.mechanisms.global_guarantee.parts.merge_part_manifests`)."""
    planned = PlannedSetting(name, privacy)
    with tempfile.TemporaryDirectory(prefix="stream-release-plan-") as tmp:
        out = Path(tmp) / "out"
        publisher = Publisher.open(
            settings, out, history, private_dir=Path(tmp) / "private", what_if=True
        )
        try:
            # each call keeps its own overlay of the history: the shards' series side by side
            series = [
                what_if(publisher, [(table, label, None) for table, label in part])
                for part in parts
            ]
            for release in zip(*parts, strict=True):
                prepared = []
                for shard, releases in enumerate(series):
                    try:
                        prepared.append(next(releases))
                    except GuaranteeUnsatisfiable as exc:
                        where = (
                            f"shard {shard} of {len(parts)}, its part: " if len(parts) > 1 else ""
                        )
                        planned.refused = f"{where}{exc}"
                        return planned
                rows = sum(table.n_rows for table, _ in release)
                planned.releases.append(_measure(rows, release[0][1], prepared))
        finally:
            publisher.close()
    return planned


def _parts(
    raws: list[tuple[RawSnapshot, str]],
    shards: int,
    schema: SchemaSettings,
    hierarchies: dict[str, Hierarchy],
) -> list[list[tuple[EncodedTable, str]]]:
    """Each shard's parts of the snapshots, cut as the worker's records are (a row in the
    partition of its id under Kafka's default partitioner,
    :func:`~stream_release.pipeline.diagnosis.shard_of`) and each encoded from its own rows,
    as the worker encodes the rows a shard staged (its values, its QID ranges); one part per
    snapshot, empty ones included: a shard's sequence is the release's."""
    out: list[list[tuple[EncodedTable, str]]] = [[] for _ in range(shards)]
    for raw, label in raws:
        shard = shard_of([str(i) for i in raw.ids.tolist()], shards)
        for number, part in enumerate(out):
            mine = shard == number
            rows = snapshot_from_columns(
                raw.ids[mine],
                {name: column[mine] for name, column in raw.qid.items()},
                raw.sensitive[mine],
                source=f"{raw.source} (shard {number})",
            )
            part.append((encode(rows, schema, hierarchies), label))
    return out


def _measure(rows: int, label: str, parts: list[RenderedRelease]) -> WhatIfRelease:
    """The figures of one release of ``rows`` rows of a what-if series from its parts (one on
    one shard)."""
    manifests = [p.manifest for p in parts]
    sequence = parts[0].sequence
    manifest = manifests[0] if len(parts) == 1 else merge_part_manifests(label, sequence, manifests)
    withheld = [
        w for p in parts for w in (p.files.private.get("suppressed") or {}).get("withheld", [])
    ]
    u = manifest["utility"]
    return WhatIfRelease(
        sequence=sequence,
        label=label,
        rows=rows,
        suppressed=int(manifest["suppressed"]),
        withheld=tuple(withheld),
        avg_group=float(u["avg_group_size"]),
        max_group=int(u["max_group_size"]),
        error_mean=_figure(u, "query_error"),
        error_median=_figure(u, "query_error_median"),
        error_trimmed=_figure(u, "query_error_trimmed"),
    )


def _figure(utility: dict[str, Any], key: str) -> float:
    """A query-error figure of a manifest's utility block (NaN when no query was kept)."""
    value = utility.get(key)
    return float(value) if value is not None else math.nan


def what_if(
    publisher: Publisher, releases: Sequence[tuple[EncodedTable, str, dict[str, Any] | None]]
) -> Iterator[RenderedRelease]:
    """Prepare ``(table, label, source)`` releases of ``publisher``'s series in order against
    an in-memory overlay of its history: each sees the ones before it; nothing is written. One
    release at a time: a refusal ends it after the releases before it were yielded."""
    overlay = OverlayHistoryStore(publisher.store)
    key_check = publisher.pseudonymizer.key_check()
    for i, (table, label, source) in enumerate(releases):
        inputs = publisher.next_input(table, label=label, source=source, store=overlay)
        release = publisher.prepare(inputs)
        keep = overlay.commit if i + 1 < len(releases) else overlay.check
        commit = release.commit
        keep(
            release.sequence,
            commit.pseudonyms,
            commit.history,
            commit.values,
            release.record,
            state=commit.state,
            key_check=key_check,
        )
        yield release
