"""Offline serial publishing: ``stream-release anonymize``.

Each snapshot becomes the next release of the series whose history is in ``history``:
read and validate -> encode -> pseudonymise ids -> load history -> plan (group, check every
bound) -> stage the files -> commit history and release record atomically -> rename the files
into place. A crash before the commit leaves nothing; a crash after it leaves staged files that
the next run finalises (the store's sequence says the release happened).

Another ``[mechanism] kind`` (:mod:`stream_release.mechanisms`) replaces "load history -> plan"
by the mechanism's release, with randomness keyed by the pseudonymisation key, the kind and the
sequence, and commits the mechanism's state entries instead of a breach history (which it does
not keep: the commit's history is empty, and the manifest has no ``breach`` block). A series
keeps one kind: each manifest states it (``mechanism.kind``; none = the global guarantee), and
a publisher configured with another kind than the series' last release is refused
(:class:`~stream_release.errors.ConfigError`) before it publishes anything.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.config import Settings
from stream_release.errors import ConfigError, HistoryStoreError
from stream_release.faults import kill_point
from stream_release.grouping.encoding import encode, load_hierarchies
from stream_release.history import make_history_store
from stream_release.history.pseudonym import Pseudonymizer, load_key
from stream_release.history.types import HistoryRows, HistoryStore
from stream_release.io.release_files import (
    ReleasePaths,
    decode_record_manifest,
    discard_staged,
    encode_record,
    finalize_release,
    is_staged,
    published_sequences,
    stage_release,
)
from stream_release.io.snapshot import read_snapshot
from stream_release.mechanisms import GLOBAL_GUARANTEE, Mechanism, make_mechanism
from stream_release.mechanisms.base import ReleaseRandomness
from stream_release.publication import render_mechanism_release, render_release
from stream_release.release import plan_release
from stream_release.table import EncodedTable

RANDOMNESS_PURPOSE = "mechanism"
"""What the mechanisms' randomness is derived for (:meth:`Pseudonymizer.derived_key`)."""


@dataclass(frozen=True)
class Publisher:
    """A series: where its files go and where its history lives.

    ``mechanism`` is built from ``settings.mechanism`` (``None`` for the global guarantee);
    building it may raise :class:`~stream_release.errors.ConfigError` (e.g. a hierarchy level
    above the hierarchy's height).
    """

    settings: Settings
    out_dir: Path
    store: HistoryStore
    pseudonymizer: Pseudonymizer
    mechanism: Mechanism | None = field(default=None, init=False, repr=False)
    _kind_checked: list[int] = field(default_factory=lambda: [0], init=False, repr=False)
    """The last sequence whose ``mechanism.kind`` is known to be ours (a one-cell box: the
    dataclass is frozen)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "mechanism", make_mechanism(self.settings))

    @property
    def kind(self) -> str:
        """The configured ``[mechanism] kind``."""
        return self.settings.mechanism.kind

    @classmethod
    def open(
        cls, settings: Settings, out_dir: Path, history: str | Path | None = None
    ) -> Publisher:
        """Open (or start) the series; ``history`` defaults to ``out_dir / "history"``."""
        location: str | Path = history if history is not None else out_dir / "history"
        is_url = isinstance(location, str) and "://" in location
        key = load_key(settings.history, default_dir=None if is_url else Path(location))
        store = make_history_store(location, settings.history.prefix)
        publisher = cls(settings, out_dir, store, Pseudonymizer(key))
        publisher.recover()
        return publisher

    def recover(self) -> None:
        """Finalise a release whose history was committed but whose files were not renamed;
        refuse a series of another mechanism kind (:meth:`check_kind`)."""
        committed = self.store.last_sequence()
        self.check_kind(committed)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        done = published_sequences(self.out_dir)
        last_file = done[-1] if done else 0
        nxt = ReleasePaths(self.out_dir, last_file + 1)
        if committed == last_file + 1 and is_staged(nxt):
            finalize_release(nxt)
        elif committed == last_file:
            discard_staged(nxt)
        elif committed != last_file:
            raise HistoryStoreError(
                f"the history store is at release {committed} but {self.out_dir} holds releases up "
                f"to {last_file}: use the --out directory and --history store of the same series"
            )

    def check_kind(self, last: int) -> None:
        """Refuse to continue a series whose release ``last`` was made by another kind.

        Raises
        ------
        ConfigError
            The record of release ``last`` states another ``mechanism.kind`` (none = the
            global guarantee) than this configuration.
        """
        if last < 1 or self._kind_checked[0] == last:
            return
        record = self.store.record(last)
        if record is None:
            raise HistoryStoreError(f"the history store has no record of its release {last}")
        block = decode_record_manifest(record).get("mechanism")
        kind = block.get("kind", GLOBAL_GUARANTEE) if isinstance(block, dict) else GLOBAL_GUARANTEE
        if kind != self.kind:
            raise ConfigError(
                f"mechanism.kind = {self.kind!r}, but the series in {self.store!r} was "
                f"published with mechanism.kind = {kind!r} (release {last}); a series keeps "
                "its mechanism: use the configuration it was started with, or start a new "
                "series (another --out and --history, or another history.prefix)"
            )
        self._kind_checked[0] = last

    def publish(
        self,
        table: EncodedTable,
        *,
        label: str,
        source: dict[str, Any] | None = None,
        pseudonyms: NDArray[np.bytes_] | None = None,
        cut_label: bool = False,
    ) -> dict[str, Any]:
        """Publish ``table`` as the next release; returns its manifest.

        ``pseudonyms`` (n,) S16: the rows' pseudonyms when the caller has them already (the
        streaming service stages rows under their pseudonym and ``table.ids`` are their hex);
        by default they are computed from ``table.ids``. ``cut_label``: commit the label with
        the release and clear its staging in the same transaction (the service; Redis only).
        """
        started = time.perf_counter()
        sequence = self.store.last_sequence() + 1
        if pseudonyms is None:
            pseudonyms = self.pseudonymizer.pseudonyms(table.ids)
        order = np.argsort(pseudonyms, kind="stable")
        if np.any(order != np.arange(order.shape[0])):
            # rows in pseudonym order: the release does not depend on the input's row order,
            # so the service (which stages rows by pseudonym) and offline runs agree
            table, pseudonyms = table.take(order), pseudonyms[order]
        if self.mechanism is not None:
            return self._publish_mechanism(
                self.mechanism, table, pseudonyms, label, sequence, source, cut_label, started
            )
        self.check_kind(sequence - 1)
        history = self.store.load(pseudonyms)
        privacy = self.settings.privacy
        plan = plan_release(
            table,
            history,
            self.store.values(),
            privacy.make_strategy(),
            protected=privacy.protected,
            min_group_size=privacy.min_group_size,
            grouping=self.settings.grouping,
        )
        kill_point("planned")
        elapsed = time.perf_counter() - started
        groups, manifest = render_release(
            table,
            plan,
            label=label,
            sequence=sequence,
            settings=self.settings,
            elapsed_s=elapsed,
            source=source,
        )
        record = self._stage(sequence, groups, manifest, table.ids, plan.group)
        self.store.commit(
            sequence,
            pseudonyms[plan.published],
            plan.history,
            plan.values,
            record,
            label=label if cut_label else None,
        )
        return self._finalize(sequence, manifest)

    def _publish_mechanism(
        self,
        mechanism: Mechanism,
        table: EncodedTable,
        pseudonyms: NDArray[np.bytes_],
        label: str,
        sequence: int,
        source: dict[str, Any] | None,
        cut_label: bool,
        started: float,
    ) -> dict[str, Any]:
        """:meth:`publish` through ``mechanism`` (rows already in pseudonym order)."""
        self.check_kind(sequence - 1)
        randomness = ReleaseRandomness.derive(
            self.pseudonymizer.derived_key(RANDOMNESS_PURPOSE), self.kind, sequence
        )
        out = mechanism.release(
            table,
            pseudonyms,
            sequence=sequence,
            randomness=randomness,
            load_state=self.store.load_state,
        )
        kill_point("planned")
        groups, manifest = render_mechanism_release(
            table,
            out,
            label=label,
            sequence=sequence,
            settings=self.settings,
            elapsed_s=time.perf_counter() - started,
            source=source,
        )
        record = self._stage(sequence, groups, manifest, table.ids, out.group)
        # no breach history: an empty commit of individuals, the dictionary unchanged
        self.store.commit(
            sequence,
            np.zeros(0, dtype="S16"),
            HistoryRows.empty(0),
            self.store.values(),
            record,
            label=label if cut_label else None,
            state=out.state,
        )
        return self._finalize(sequence, manifest)

    def _stage(
        self,
        sequence: int,
        groups: bytes,
        manifest: dict[str, Any],
        ids: NDArray[np.object_],
        group: NDArray[np.integer],
    ) -> bytes:
        """Stage the files of release ``sequence`` (fsynced, temporary names); its record."""
        stage_release(ReleasePaths(self.out_dir, sequence), groups, manifest, ids, group)
        kill_point("files_staged")
        return encode_record(groups, manifest)

    def _finalize(self, sequence: int, manifest: dict[str, Any]) -> dict[str, Any]:
        """After the commit: rename the files of release ``sequence`` into place."""
        kill_point("committed")
        self._kind_checked[0] = sequence
        finalize_release(ReleasePaths(self.out_dir, sequence))
        kill_point("finalized")
        return manifest

    def close(self) -> None:
        self.store.close()


def anonymize_files(
    settings: Settings,
    out_dir: Path,
    snapshots: Sequence[Path],
    history: str | Path | None = None,
    *,
    on_release: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Publish each CSV snapshot, in order, as the next release; returns the manifests.

    Every snapshot is read and validated before the first is published, so a bad file
    publishes nothing.
    """
    hierarchies = load_hierarchies(settings.schema)
    tables = []
    for path in snapshots:
        raw = read_snapshot(path, settings.schema)
        tables.append((path, raw, encode(raw, settings.schema, hierarchies)))
    publisher = Publisher.open(settings, out_dir, history)
    manifests = []
    try:
        for path, raw, table in tables:
            manifest = publisher.publish(
                table, label=Path(path).stem, source={"file": str(path), "sha256": raw.sha256}
            )
            manifests.append(manifest)
            if on_release is not None:
                on_release(manifest)
    finally:
        publisher.close()
    return manifests
