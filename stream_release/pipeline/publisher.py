"""Serial publishing: the one :class:`Publisher` of offline ``anonymize`` and the worker.

Each snapshot becomes the next release of the series whose history is in ``history``:
read and validate -> encode -> pseudonymise ids -> load history -> plan (group, check every
bound) -> stage the files -> commit history and release record atomically -> rename the files
into place. A crash before the commit leaves nothing; a crash after it leaves staged files that
the next run finalises (the store's sequence says the release happened).

Public and private output never mix (:mod:`stream_release.io.release_files`): the group lines
and manifests go to ``out_dir``, which can be published as a whole; the assignments, the
private records, and offline the history and its key go to ``private_dir`` (default
``out_dir.private``, mode 0700).

A release goes through three stages, whatever its ``[mechanism] kind``: the series hands the
mechanism a :class:`~stream_release.mechanisms.base.ReleaseInput` (:meth:`Publisher.next_input`:
the next sequence, the rows in pseudonym order), the mechanism plans it, and
:func:`~stream_release.pipeline.render.render_release` renders its files and its commit
(:class:`~stream_release.pipeline.render.RenderedRelease`), which :meth:`Publisher.apply`
writes. A run of several snapshots
(:func:`~stream_release.pipeline.anonymize.anonymize_files`) is planned whole before anything
is written (:meth:`Publisher.what_if`, then :meth:`Publisher.apply`).

The store and the archive are checked against each other before every release: a store that
lost commits (:class:`~stream_release.errors.StoreRegressed`), a key other than the one the
history was written under (:class:`~stream_release.errors.KeyMismatch`) and a release file
that would replace a published one (:class:`~stream_release.errors.ArchiveConflict`) stop
the series instead of reusing sequence numbers or restarting every history. With a series
ledger (:mod:`stream_release.io.series_ledger`: offline and on one namespace, ``[output]
ledger``, default ``<archive>.ledger``), the store and both archives are also checked against
what the series published: restored together from one backup they agree with each other but
not with the ledger, which refuses them (:class:`~stream_release.errors.SeriesRewound`).

Every kind (:mod:`stream_release.mechanisms`) draws its randomness from a secret derived from
the pseudonymisation key (domain-separated from the pseudonyms), the kind and the sequence; a
companion kind commits its state entries instead of a breach history (which it does not keep:
the commit's history is empty, and the manifest has no ``breach`` block). A series keeps one
kind: each manifest states it (``mechanism.kind``; none = the global guarantee), and a
publisher configured with another kind than the series' last release is refused
(:class:`~stream_release.errors.ConfigError`) before it publishes anything.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.config import Settings
from stream_release.core.grouping.threads import set_thread_cap
from stream_release.core.table import EncodedTable
from stream_release.errors import (
    NEW_SERIES_CAVEAT,
    ConfigError,
    HistoryStoreError,
    KeyMismatch,
    StoreRegressed,
)
from stream_release.faults import kill_point
from stream_release.history import REDIS_SCHEMES, make_history_store
from stream_release.history._validate import key_mismatch_message
from stream_release.history.overlay_store import OverlayHistoryStore
from stream_release.history.pseudonym import (
    KeyMaterial,
    Pseudonymizer,
    resolve_key,
    write_key_file,
)
from stream_release.history.types import HistoryStore, argsort_pseudonyms
from stream_release.io.release_files import (
    ReleasePaths,
    decode_record_manifest,
    default_private_dir,
    discard_staged,
    finalize_release,
    is_staged,
    published_sequences,
    stage_release,
)
from stream_release.io.series_ledger import LedgerEntry, default_ledger_path
from stream_release.mechanisms.base import ReleaseInput, ReleaseMechanism, ReleaseRandomness
from stream_release.mechanisms.registry import make_mechanism
from stream_release.pipeline.ledger_keeper import LedgerKeeper
from stream_release.pipeline.render import RenderedRelease, render_release
from stream_release.release_format import manifest_kind

RANDOMNESS_PURPOSE = "mechanism"
"""What the mechanisms' randomness is derived for (:meth:`Pseudonymizer.derived_key`)."""


class Publisher:
    """A series: where its public and private files go, where its history lives, and its
    mechanism (``settings.mechanism``, built here: may raise
    :class:`~stream_release.errors.ConfigError`, e.g. a hierarchy level above the
    hierarchy's height).

    ``private_dir`` (assignments, private records; offline, the history) defaults to
    ``out_dir.private``. ``new_key``: the key of a new offline series, whose default key file
    is created just before the first commit
    (:func:`~stream_release.history.pseudonym.resolve_key`). ``ledger``: the series ledger
    this publisher checks in :meth:`recover` and appends to in :meth:`apply` (``None``: none,
    a shard's part or a what-if series).
    """

    def __init__(
        self,
        settings: Settings,
        out_dir: Path,
        store: HistoryStore,
        pseudonymizer: Pseudonymizer,
        *,
        private_dir: Path | None = None,
        new_key: KeyMaterial | None = None,
        ledger: Path | None = None,
    ) -> None:
        self.settings = settings
        set_thread_cap(settings.grouping.threads)  # the process's kernels: one setting each
        self.out_dir = Path(out_dir)
        self.store = store
        self.pseudonymizer = pseudonymizer
        self.private_dir = (
            Path(private_dir) if private_dir is not None else default_private_dir(self.out_dir)
        )
        self.mechanism: ReleaseMechanism[Any] = make_mechanism(settings, pseudonymizer)
        self.new_key = new_key
        """The key of a new series until its key file is written (with the first commit)."""
        self.kind_checked_sequence = 0
        """The last sequence whose record's ``mechanism.kind`` is known to be ours."""
        self.highest_committed = 0
        """The highest sequence this publisher knows was committed or published: a store whose
        last sequence falls below it lost commits (:meth:`check_continuity`)."""
        self.ledger = (
            LedgerKeeper(ledger, self.out_dir, self.private_dir) if ledger is not None else None
        )

    @property
    def kind(self) -> str:
        """The configured ``[mechanism] kind``."""
        return self.settings.mechanism.kind

    @classmethod
    def open(
        cls,
        settings: Settings,
        out_dir: Path,
        history: str | Path | None = None,
        *,
        private_dir: Path | None = None,
        what_if: bool = False,
        ledger: Path | None = None,
    ) -> Publisher:
        """Open (or start) the series; writes nothing but what :meth:`recover` finishes.

        ``history`` defaults to the private directory's ``history`` subdirectory (a
        directory or a Redis URL); ``ledger`` to ``[output] ledger``, else
        ``out_dir.ledger``. A series written before public and private files were apart (the
        history and the assignments inside ``out_dir``) is refused with the commands that
        move them. ``what_if``: only for :meth:`what_if` from ``history`` (``stream-release
        plan``): the key and the kind are checked, the archive and the ledger are not looked
        at (nothing will be written to them) and no interrupted release is finished.
        """
        out_dir = Path(out_dir)
        private = Path(private_dir) if private_dir is not None else default_private_dir(out_dir)
        if history is None:
            _refuse_old_layout(out_dir, private)
        location: str | Path = history if history is not None else private / "history"
        is_url = isinstance(location, str) and location.lower().startswith(REDIS_SCHEMES)
        material = resolve_key(settings.history, default_dir=None if is_url else Path(location))
        store = make_history_store(location, settings.history.prefix)
        if not what_if:
            ledger = ledger or settings.output.ledger or default_ledger_path(out_dir)
        publisher = cls(
            settings,
            out_dir,
            store,
            Pseudonymizer(material.key),
            private_dir=private,
            new_key=material if material.new_file is not None else None,
            ledger=None if what_if else ledger,
        )
        try:
            if what_if:
                committed = store.last_sequence()
                publisher.check_key(store)
                publisher.check_kind(committed, store)
                publisher.highest_committed = committed
            else:
                publisher.recover()
        except BaseException:
            store.close()
            raise
        return publisher

    def recover(self, *, keep_staged: bool = False) -> None:
        """Check the series before anything is published, and finish an interrupted release.

        Refuses another key than the history's (:class:`KeyMismatch`) and a series of another
        mechanism kind (:meth:`check_kind`); finalises a release whose history was committed
        but whose files were not renamed; refuses an archive and a store that disagree. The
        staged files of a release not committed are discarded unless ``keep_staged`` (a shard
        taken over while its previous owner may still be committing: its next part stages the
        same files again).

        With a ledger: refuses a store or an archive behind it, or an archive whose files of
        the ledger's last release differ from their recorded digests (:class:`SeriesRewound`),
        and records the releases the archive holds beyond the ledger (a release committed
        just before a crash, or a series older than its ledger).
        """
        committed = self.store.last_sequence()
        self.check_key(self.store)
        self.check_kind(committed, self.store)
        done = published_sequences(self.out_dir) if self.out_dir.is_dir() else []
        last_file = done[-1] if done else 0
        recorded = self.ledger.entries() if self.ledger is not None else []
        nxt = self._paths(last_file + 1)
        if committed == last_file + 1 and is_staged(nxt):
            finalize_release(nxt)
            last_file = committed
        if self.ledger is not None:
            self.ledger.refuse_if_behind(len(recorded), self.store, committed, last_file)
        if committed == last_file:
            if not keep_staged:
                discard_staged(self._paths(last_file + 1))
        elif committed < last_file:
            raise StoreRegressed(_regressed_message(self.store, committed, last_file))
        else:
            raise HistoryStoreError(
                f"the history store is at release {committed} but {str(self.out_dir)!r} holds "
                f"releases up to {last_file}: use the --out directory and --history store of "
                "the same series"
            )
        if self.ledger is not None:
            self.ledger.bring_to(recorded, last_file)
        self.highest_committed = max(self.highest_committed, committed, last_file, len(recorded))

    def check_key(self, store: HistoryStore) -> None:
        """Refuse a history written under another pseudonymisation key.

        Raises
        ------
        KeyMismatch
            ``store`` recorded a key check value other than this key's.
        """
        recorded = store.key_check()
        if recorded is not None and recorded != self.pseudonymizer.key_check():
            raise KeyMismatch(key_mismatch_message(repr(store)))

    def check_continuity(self, committed: int) -> None:
        """Refuse to cut after the store went backwards (it lost commits).

        Raises
        ------
        StoreRegressed
            ``committed`` (the store's last sequence) is below :attr:`highest_committed`.
        """
        if committed < self.highest_committed:
            raise StoreRegressed(_regressed_message(self.store, committed, self.highest_committed))

    def check_kind(self, last: int, store: HistoryStore | None = None) -> None:
        """Refuse to continue a series whose release ``last`` was made by another kind.

        Raises
        ------
        ConfigError
            The record of release ``last`` states another ``mechanism.kind`` (none = the
            global guarantee) than this configuration.
        """
        store = store if store is not None else self.store
        if last < 1 or self.kind_checked_sequence == last:
            return
        record = store.record(last)
        if record is None:
            raise HistoryStoreError(f"the history store has no record of its release {last}")
        kind = manifest_kind(decode_record_manifest(record))
        if kind != self.kind:
            raise ConfigError(
                f"mechanism.kind = {self.kind!r}, but the series in {store!r} was "
                f"published with mechanism.kind = {kind!r} (release {last}); a series keeps "
                "its mechanism: use the configuration it was started with, or start a new "
                f"series (another --out and --history, or another history.prefix): "
                f"{NEW_SERIES_CAVEAT}"
            )
        if store is self.store:
            self.kind_checked_sequence = last

    def next_input(
        self,
        table: EncodedTable,
        *,
        label: str,
        source: dict[str, Any] | None = None,
        pseudonyms: NDArray[np.bytes_] | None = None,
        cut_label: bool = False,
        store: HistoryStore | None = None,
    ) -> ReleaseInput:
        """The next release of ``store`` (default: the series' store) as its mechanism reads
        it: the next sequence, the rows in pseudonym order (a release does not depend on the
        input's row order, so the service, which stages rows by pseudonym, and offline runs
        agree), the release's randomness. Refuses a store that lost commits and a series of
        another kind.

        ``pseudonyms`` (n,) S16: the rows' pseudonyms when the caller has them already (the
        service stages rows under their pseudonym and ``table.ids`` are their hex); by default
        they are computed from ``table.ids``. ``source``: where the snapshot came from, kept in
        the private record only. ``cut_label``: commit the label with the release and clear
        its staging in the same transaction (the service; Redis only).
        """
        started = time.perf_counter()
        ids_given = pseudonyms is not None
        if pseudonyms is None:
            pseudonyms = self.pseudonymizer.pseudonyms(table.ids)
        store = store if store is not None else self.store
        committed = store.last_sequence()
        if store is self.store:
            self.check_continuity(committed)
        order = argsort_pseudonyms(pseudonyms)  # distinct: one order
        if np.any(order != np.arange(order.shape[0])):
            table, pseudonyms = table.take(order), pseudonyms[order]
        self.check_kind(committed, store)
        secret = self.pseudonymizer.derived_key(RANDOMNESS_PURPOSE)
        return ReleaseInput(
            table=table,
            pseudonyms=pseudonyms,
            label=label,
            sequence=committed + 1,
            store=store,
            randomness=ReleaseRandomness.derive(secret, self.kind, committed + 1),
            started=started,
            source=source,
            ids_given=ids_given,
            cut_label=cut_label,
        )

    def prepare(
        self,
        table: EncodedTable,
        *,
        label: str,
        source: dict[str, Any] | None = None,
        pseudonyms: NDArray[np.bytes_] | None = None,
        cut_label: bool = False,
        store: HistoryStore | None = None,
    ) -> RenderedRelease:
        """Plan and render the next release of ``store`` (:meth:`next_input` for the
        arguments); writes nothing."""
        release = self.next_input(
            table,
            label=label,
            source=source,
            pseudonyms=pseudonyms,
            cut_label=cut_label,
            store=store,
        )
        planned = self.mechanism.plan(release)
        kill_point("planned")
        return render_release(self.mechanism, planned)

    def publish(
        self,
        table: EncodedTable,
        *,
        label: str,
        source: dict[str, Any] | None = None,
        pseudonyms: NDArray[np.bytes_] | None = None,
        cut_label: bool = False,
    ) -> dict[str, Any]:
        """Publish ``table`` as the next release (:meth:`prepare`, then :meth:`apply`);
        returns its manifest."""
        rendered = self.prepare(
            table, label=label, source=source, pseudonyms=pseudonyms, cut_label=cut_label
        )
        return self.apply(rendered)

    def apply(self, rendered: RenderedRelease) -> dict[str, Any]:
        """Write ``rendered``: stage its files, commit it, rename the files into place;
        returns its manifest.

        Raises
        ------
        ArchiveConflict
            A file of the release is already published with other content (nothing is
            committed).
        StoreRegressed, SequenceConflict, KeyMismatch
            The store is not where the release was prepared against (nothing is committed).
        """
        self.check_continuity(rendered.sequence - 1)
        if self.ledger is not None:
            self.ledger.check_before_commit(self.store, rendered.sequence - 1)
        paths = self._paths(rendered.sequence)
        stage_release(paths, rendered.files)
        kill_point("files_staged")
        new_key = self.new_key
        if new_key is not None and new_key.new_file is not None:
            # a new series: its key file is written with its first release
            if write_key_file(new_key.new_file, new_key.key) != new_key.key:
                raise KeyMismatch(key_mismatch_message(repr(str(new_key.new_file))))
            self.new_key = None
        commit = rendered.commit
        self.store.commit(
            rendered.sequence,
            commit.pseudonyms,
            commit.history,
            commit.values,
            rendered.record,
            label=rendered.label if rendered.cut_label else None,
            state=commit.state,
            key_check=self.pseudonymizer.key_check(),
        )
        kill_point("committed")
        self.kind_checked_sequence = rendered.sequence
        self.highest_committed = max(self.highest_committed, rendered.sequence)
        if self.ledger is not None:
            entry = LedgerEntry.of(rendered.sequence, rendered.label, rendered.files.by_kind())
            self.ledger.append(entry)
            kill_point("ledgered")
        finalize_release(paths)
        kill_point("finalized")
        return rendered.manifest

    def dry_run(
        self, releases: Sequence[tuple[EncodedTable, str, dict[str, Any] | None]]
    ) -> list[RenderedRelease]:
        """Prepare ``(table, label, source)`` releases in order against an in-memory overlay
        of the history: each sees the ones before it; nothing is written."""
        return list(self.what_if(releases))

    def what_if(
        self, releases: Sequence[tuple[EncodedTable, str, dict[str, Any] | None]]
    ) -> Iterator[RenderedRelease]:
        """:meth:`dry_run` one release at a time: a refusal ends it after the releases
        before it were yielded (``stream-release plan``)."""
        overlay = OverlayHistoryStore(self.store)
        for i, (table, label, source) in enumerate(releases):
            release = self.prepare(table, label=label, source=source, store=overlay)
            keep = overlay.commit if i + 1 < len(releases) else overlay.check
            keep(
                release.sequence,
                release.commit.pseudonyms,
                release.commit.history,
                release.commit.values,
                release.record,
                state=release.commit.state,
                key_check=self.pseudonymizer.key_check(),
            )
            yield release

    def _paths(self, sequence: int) -> ReleasePaths:
        return ReleasePaths(self.out_dir, sequence, self.private_dir)

    def close(self) -> None:
        self.store.close()


def _regressed_message(store: HistoryStore, committed: int, known: int) -> str:
    return (
        f"the history store {store!r} is at release {committed}, but release {known} was "
        "already committed or published: the store lost commits (e.g. Redis restarted "
        "without persistence). Nothing is cut until it is restored from its backup (continuing "
        f"in a new archive and history instead is a new series: {NEW_SERIES_CAVEAT})"
    )


def _refuse_old_layout(out_dir: Path, private: Path) -> None:
    """Refuse a series whose private files are still inside its public directory."""
    old_history = out_dir / "history"
    old_assignments = sorted(out_dir.glob("assignments-*.csv")) if out_dir.is_dir() else []
    if not old_history.is_dir() and not old_assignments:
        return
    raise ConfigError(
        f"{str(out_dir)!r} holds private files next to the public ones (the layout before "
        f"public and private output were apart); move them into {str(private)!r} and run "
        f"again: mkdir -m 700 {str(private)!r} && mv {str(out_dir)!r}/history "
        f"{str(out_dir)!r}/assignments-*.csv {str(private)!r}/"
    )
