"""Why a series suppresses, and which settings would work: the diagnosis of
``stream-release plan``.

Paper 003 [WFLWX10] assumes *transient* sensitive values, drawn afresh every period. On a real
panel the same people keep their value year after year (an occupation, a diagnosis), and every
release links each of them to their own value again (every member of a group is linked to
every value of the group, Lemma 4). A strategy allows an individual only so many linkages to a
value before its requirement passes any group the release may form (constant-ratio: ``k'``,
§6.1; geometric: until ``alpha * n~`` passes the cap, §6.2); from then on a holder who keeps
the value is *exhausted* and suppressed, whatever the grouping. The diagnosis measures it
from the snapshots alone:

* per protected value: its share of the rows and how often a holder who appears in the next
  snapshot still holds it (``kept``);
* the linkages the configured strategy allows (:meth:`~stream_release.core.privacy.strategy.
  Strategy.lasts`);
* per release, the share of rows whose own value they held in at least that many earlier
  snapshots (:attr:`Diagnosis.stuck`): a floor under the suppression no grouping avoids.

and proposes, for a series of ``horizon`` releases, the settings that let a holder be
published that often (:func:`proposals`): constant-ratio ``k' = horizon`` protecting only the
values the frequencies allow at its ratio; and with a population register (paper §8), every
value at ``k' = horizon``. The planner runs them like any candidate.

References
----------
.. [WFLWX10] R. C.-W. Wong, A. W.-C. Fu, J. Liu, K. Wang, Y. Xu. Preserving Individual Privacy
   in Serial Data Publishing. ICDE 2010 (arXiv:0903.0682).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from aiokafka.partitioner import DefaultPartitioner
from numpy.typing import NDArray

from stream_release.config import Settings
from stream_release.core.grouping.partition import group_size_cap
from stream_release.core.privacy.breach import constant_ratio_target
from stream_release.core.privacy.strategy import MOST_LINKAGES
from stream_release.core.table import EncodedTable

__all__ = ["Diagnosis", "ValueProfile", "diagnose", "proposals"]

KEPT_NOTICE = 0.2
"""A value kept by more of its holders than this is named as a cause."""


@dataclass(frozen=True)
class ValueProfile:
    """One protected value over the snapshots."""

    value: str
    share: float
    """Rows holding it / rows, over every snapshot."""
    largest: int
    """Its most holders in one snapshot."""
    kept: float
    """Of its holders in a snapshot who appear in the next one, the share still holding it
    (NaN when no holder reappears)."""


@dataclass(frozen=True)
class Diagnosis:
    """What the snapshots say about a setting's suppression."""

    profiles: tuple[ValueProfile, ...]
    kept: float
    """Of the rows whose individual appears in the next snapshot, the share keeping its value."""
    allowed: int
    """Linkages to one value the configured strategy allows an individual."""
    stuck: tuple[float, ...]
    """Per release: the share of its rows holding a protected value they held in at least
    ``allowed`` earlier snapshots (linked to it every time: exhausted whatever the grouping)."""
    smallest: int
    """Rows of the smallest snapshot (of a snapshot's part, on shards)."""
    shards: int = 1
    """The shards each snapshot is cut in (``kafka.partitions``): each part is planned
    alone, so ``largest`` and ``smallest`` are those of the parts."""

    def lines(self, setting: str) -> list[str]:
        """The diagnosis in words, for ``setting`` (the configured setting's name)."""
        out = [
            f"diagnosis: {100 * self.kept:.0f} % of the rows whose individual is in the next "
            "snapshot still hold the same value there"
        ]
        named = [p for p in self.profiles if not math.isnan(p.kept) and p.kept > KEPT_NOTICE]
        for p in sorted(named, key=lambda p: -p.share)[:10]:
            out.append(
                f"  value {p.value!r}: {100 * p.share:.1f} % of the rows, kept by "
                f"{100 * p.kept:.0f} % of its holders"
            )
        worst = max(self.stuck, default=0.0)
        if self.allowed < MOST_LINKAGES:
            out.append(
                f"  {setting} allows an individual {self.allowed} linkages to a value: a holder "
                f"who keeps it is exhausted from its release {self.allowed + 1} on, whatever the "
                f"grouping (up to {100 * worst:.1f} % of a release's rows here"
                + (
                    "; values held by the same people year after year are not the transient "
                    "values Wong et al. 2010 assumes)"
                    if named
                    else ")"
                )
            )
        return out


def diagnose(settings: Settings, tables: Sequence[EncodedTable]) -> Diagnosis:
    """The :class:`Diagnosis` of the configured setting over ``tables`` (in release order).

    On shards (``kafka.partitions`` ``P > 1``) each snapshot is cut as the worker cuts it: a
    row in the part of its id's partition under Kafka's default partitioner (murmur2 of the
    id, as ``stream-release publish`` keys records); a value's largest count and the smallest
    snapshot are then the parts' (each part must meet the ratios on its own)."""
    privacy = settings.privacy
    strategy = privacy.make_strategy()
    cap = group_size_cap(
        strategy.base_ratio, privacy.min_group_size, settings.grouping.max_group_factor
    )
    lasts = strategy.lasts(cap)
    tally = _Tally(
        allowed=MOST_LINKAGES if lasts is None else lasts,  # the localized baseline: no bound
        wanted=set(privacy.protected),
        shards=settings.kafka.partitions,
        rows={v: 0 for t in tables for v in t.sensitive_values},
        smallest=min((t.n_rows for t in tables), default=0),
    )
    for table in tables:
        tally.add(table)
    return tally.diagnosis()


@dataclass
class _Tally:
    """What :func:`diagnose` counts over the snapshots, one :meth:`add` each in release order.

    ``rows``: value -> rows holding it, all snapshots; ``largest``: value -> its largest count
    in one snapshot (one part, on shards); ``kept_by``: value -> [holders who still hold it
    in the next snapshot, holders who appear in it]; ``held``: (id, value) -> snapshots so far;
    ``stuck``: per snapshot, the share of rows whose protected value was held ``allowed``
    times before.
    """

    allowed: int
    wanted: set[str]
    shards: int
    rows: dict[str, int]
    smallest: int
    total: int = 0
    largest: dict[str, int] = field(default_factory=dict)
    kept_by: dict[str, list[int]] = field(default_factory=dict)
    held: dict[tuple[str, str], int] = field(default_factory=dict)
    before: dict[str, str] = field(default_factory=dict)
    stuck: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.largest = dict.fromkeys(self.rows, 0)
        self.kept_by = {v: [0, 0] for v in self.rows}

    def add(self, table: EncodedTable) -> None:
        """Count the next snapshot."""
        ids = [str(i) for i in table.ids.tolist()]
        values = [table.sensitive_values[c] for c in table.sensitive.tolist()]
        self._count_values(table, ids)
        self.total += len(ids)
        self.stuck.append(self._follow(ids, values) / len(ids) if ids else 0.0)
        self.before = dict(zip(ids, values, strict=True))

    def _count_values(self, table: EncodedTable, ids: list[str]) -> None:
        counts = np.bincount(table.sensitive, minlength=len(table.sensitive_values))
        for value, count in zip(table.sensitive_values, counts.tolist(), strict=True):
            self.rows[value] += count
        shards = self.shards
        part = shard_of(ids, shards) if shards > 1 else np.zeros(len(ids), dtype=np.int64)
        for p in range(shards):
            mine = table.sensitive[part == p]
            self.smallest = min(self.smallest, int(mine.shape[0]))
            per = np.bincount(mine, minlength=len(table.sensitive_values))
            for value, count in zip(table.sensitive_values, per.tolist(), strict=True):
                self.largest[value] = max(self.largest[value], count)

    def _follow(self, ids: list[str], values: list[str]) -> int:
        """Follow each holder from the snapshot before; the rows whose protected value was
        held ``allowed`` times before."""
        over = 0
        for i, value in zip(ids, values, strict=True):
            if self._protects(value) and self.held.get((i, value), 0) >= self.allowed:
                over += 1
            if i in self.before:
                kept = self.kept_by[self.before[i]]
                kept[1] += 1
                kept[0] += self.before[i] == value
            self.held[(i, value)] = self.held.get((i, value), 0) + 1
        return over

    def _kept_share(self, value: str) -> float:
        still, appearing = self.kept_by[value]
        return still / appearing if appearing else math.nan

    def _protects(self, value: str) -> bool:
        return not self.wanted or value in self.wanted

    def diagnosis(self) -> Diagnosis:
        """The :class:`Diagnosis` of the snapshots added."""
        profiles = tuple(
            ValueProfile(
                value,
                self.rows[value] / self.total if self.total else 0.0,
                self.largest[value],
                self._kept_share(value),
            )
            for value in sorted(self.rows)
            if self._protects(value)
        )
        again = sum(k[1] for k in self.kept_by.values())
        kept = sum(k[0] for k in self.kept_by.values()) / again if again else math.nan
        return Diagnosis(
            profiles, kept, self.allowed, tuple(self.stuck), self.smallest, self.shards
        )


def shard_of(ids: Sequence[str], shards: int) -> NDArray[np.int64]:
    """(n,) the shard of each id: its partition of ``shards`` under Kafka's default
    partitioner (murmur2 of the UTF-8 id, the key ``stream-release publish`` sends)."""
    place = DefaultPartitioner()
    partitions = list(range(shards))
    return np.array([place(i.encode(), partitions, partitions) for i in ids], dtype=np.int64)


def proposals(
    settings: Settings, diagnosis: Diagnosis, horizon: int
) -> list[tuple[str, dict[str, Any]]]:
    """``(name, overrides)`` of the settings that last ``horizon`` releases (a holder may be
    published that many times; :meth:`~stream_release.core.privacy.strategy.Strategy.lasts`):

    * constant-ratio ``k' = horizon`` at the configured ``l`` protecting the values held by at
      most ``rows / n_c`` rows of every snapshot (of every part, on shards): the ratio the
      frequencies allow, rarest first; none if no value fits;
    * the largest ``l`` at that ``k'`` whose ratio every protected value allows, when it is
      below the configured one and above 1 / 0.9 (a weaker bound for every value instead of
      the configured bound for some);
    * with a register, every configured value at that ``k'`` (not on shards, where a
      register cannot run).

    ``overrides`` are ``[privacy]`` keys, ``horizon`` among them (and ``virtual`` ``None`` to
    drop the register)."""
    ell = settings.privacy.l
    target = constant_ratio_target(ell, horizon)
    out: list[tuple[str, dict[str, Any]]] = []
    room = diagnosis.smallest / (target * (1.0 + 1e-9))
    fits = sorted(p.value for p in diagnosis.profiles if p.largest <= room)
    planned = {"strategy": "constant-ratio", "k_prime": horizon, "horizon": horizon}
    if fits:
        shown = ", ".join(map(repr, fits[:8])) + (" ..." if len(fits) > 8 else "")
        out.append(
            (
                f"proposal: constant-ratio l={ell:g} k'={horizon}, protecting only {shown}",
                {**planned, "l": ell, "protected": fits, "virtual": {"registry": None}},
            )
        )
    largest = max((p.largest for p in diagnosis.profiles), default=0)
    if largest and len(fits) < len(diagnosis.profiles):
        ratio = diagnosis.smallest / largest  # the ratio every protected value allows
        weaker = _floor3(1.0 / -math.expm1(horizon * math.log1p(-1.0 / ratio))) if ratio > 1 else 0
        if WEAKEST_PROPOSED < weaker < ell:
            out.append(
                (
                    f"proposal: constant-ratio l={weaker:g} k'={horizon}, protecting every value",
                    {**planned, "l": weaker, "virtual": {"registry": None}},
                )
            )
    if settings.virtual.registry is not None and diagnosis.shards == 1:
        out.append(
            (
                f"proposal: constant-ratio l={ell:g} k'={horizon} + register",
                {**planned, "l": ell},
            )
        )
    return out


WEAKEST_PROPOSED = 1.0 / 0.9
"""No proposal has a bound ``1/l`` above 0.9."""


def _floor3(value: float) -> float:
    """``value`` rounded down to three decimals (so that the ratio it gives is still met)."""
    return math.floor(value * 1000) / 1000
