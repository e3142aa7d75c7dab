"""Serial publishing: the one :class:`Publisher` of offline ``anonymize`` and the worker, which
keeps a series: its files, its history, its ledger and its mechanism.

A release goes through three stages, whatever its ``[mechanism] kind``: the publisher hands the
mechanism a :class:`~stream_release.mechanisms.base.ReleaseInput` (:meth:`Publisher.next_input`:
the next sequence, the rows in pseudonym order, the release's randomness), the mechanism plans
it, and :func:`~stream_release.pipeline.render.render_release` renders its files and its commit
(a :class:`~stream_release.pipeline.render.RenderedRelease`), which :meth:`Publisher.apply`
writes: stage the files, commit the history and the release record atomically, rename the
files into place. A crash before the commit leaves nothing; a crash after it leaves staged
files that the next run finalises (the store's sequence says the release happened). Public and
private files never mix (:mod:`stream_release.io.release_files`).

Before every release the store and the archive are checked against each other: a store that
lost commits (:class:`~stream_release.errors.StoreRegressed`), another key than the history's
(:class:`~stream_release.errors.KeyMismatch`), a release file that would replace a published
one (:class:`~stream_release.errors.ArchiveConflict`), a store and archives restored together
from an older backup than the series ledger (:mod:`~stream_release.pipeline.ledger_keeper`) and
a series of another kind (each manifest states its ``mechanism.kind``) stop the series instead
of reusing sequence numbers or restarting every history.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.config import Settings
from stream_release.core.grouping.threads import set_thread_cap
from stream_release.core.table import EncodedTable
from stream_release.errors import HistoryStoreError, KeyMismatch, StoreRegressed
from stream_release.faults import kill_point
from stream_release.history import REDIS_SCHEMES, make_history_store
from stream_release.history._validate import key_mismatch_message
from stream_release.history.pseudonym import KeyMaterial, Pseudonymizer, resolve_key
from stream_release.history.types import HistoryStore, argsort_pseudonyms
from stream_release.io.release_files import (
    ReleasePaths,
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
from stream_release.pipeline.series_checks import (
    ahead_message,
    refuse_old_layout,
    refuse_other_kind,
    regressed_message,
    write_new_key,
)


class Publisher:
    """A series: its public directory ``out_dir``, its private one (default
    ``out_dir.private``), its history ``store``, its ``ledger`` (``None``: none, a shard's part
    or a what-if series) and its mechanism (built here from ``settings.mechanism``: may raise
    :class:`~stream_release.errors.ConfigError`). ``new_key``: the key of a new offline
    series, whose key file is written with the first commit."""

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
        self.new_key = new_key  # until its key file is written (with the first commit)
        self.kind_checked_sequence = 0  # the last release whose kind is known to be ours
        # the highest sequence known committed or published: a store below it lost commits
        self.highest_committed = 0
        self.ledger = (
            None if ledger is None else LedgerKeeper(ledger, self.out_dir, self.private_dir)
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
        ``history``: a directory or a Redis URL (default: the private directory's ``history``);
        ``ledger``: default ``[output] ledger``, else ``out_dir.ledger``. ``what_if`` (``plan``):
        the key and the kind are checked, the archive and the ledger are not looked at."""
        out_dir = Path(out_dir)
        private = Path(private_dir) if private_dir is not None else default_private_dir(out_dir)
        if history is None:
            refuse_old_layout(out_dir, private)
        location: str | Path = history if history is not None else private / "history"
        is_url = isinstance(location, str) and location.lower().startswith(REDIS_SCHEMES)
        material = resolve_key(settings.history, default_dir=None if is_url else Path(location))
        store = make_history_store(location, settings.history.prefix)
        if not what_if:
            ledger = ledger or settings.output.ledger or default_ledger_path(out_dir)
        publisher = cls(
            settings=settings,
            out_dir=out_dir,
            store=store,
            pseudonymizer=Pseudonymizer(material.key),
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
        """Check the series before anything is published (the key, the kind, the archive
        against the store and the ledger) and finalise a release committed but not renamed.
        The staged files of a release not committed are discarded unless ``keep_staged`` (a
        shard taken over while its previous owner may still be committing)."""
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
            self.ledger.refuse_if_behind(
                recorded=len(recorded), store=self.store, committed=committed, last_file=last_file
            )
        if committed == last_file:
            if not keep_staged:
                discard_staged(self._paths(last_file + 1))
        elif committed < last_file:
            raise StoreRegressed(regressed_message(self.store, committed, last_file))
        else:
            raise HistoryStoreError(ahead_message(committed, self.out_dir, last_file))
        if self.ledger is not None:
            self.ledger.bring_to(recorded, last_file)
        self.highest_committed = max(self.highest_committed, committed, last_file, len(recorded))

    def check_key(self, store: HistoryStore) -> None:
        """Refuse a history written under another pseudonymisation key (:class:`KeyMismatch`)."""
        recorded = store.key_check()
        if recorded is not None and recorded != self.pseudonymizer.key_check():
            raise KeyMismatch(key_mismatch_message(repr(store)))

    def check_continuity(self, committed: int) -> None:
        """Refuse to cut after the store (at ``committed``) went backwards: it lost commits
        (:class:`StoreRegressed`)."""
        if committed < self.highest_committed:
            raise StoreRegressed(regressed_message(self.store, committed, self.highest_committed))

    def check_kind(self, last: int, store: HistoryStore | None = None) -> None:
        """Refuse to continue a series made by another kind up to release ``last``."""
        store = store if store is not None else self.store
        if last < 1 or self.kind_checked_sequence == last:
            return
        refuse_other_kind(store, last, self.kind)
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
        """The next release of ``store`` (default: the series') as its mechanism reads it
        (:class:`~stream_release.mechanisms.base.ReleaseInput`): the rows in pseudonym order,
        so the service (which stages rows by pseudonym) and offline runs agree. ``pseudonyms``
        (n,) S16: when the caller has them (the service); else computed from ``table.ids``."""
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
        return ReleaseInput(
            table=table,
            pseudonyms=pseudonyms,
            label=label,
            sequence=committed + 1,
            store=store,
            randomness=ReleaseRandomness.of_series(self.pseudonymizer, self.kind, committed + 1),
            started=started,
            source=source,
            ids_given=ids_given,
            cut_label=cut_label,
        )

    def prepare(self, release: ReleaseInput) -> RenderedRelease:
        """Plan and render ``release`` (:meth:`next_input`); writes nothing."""
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
        """Publish ``table`` as the next release; returns its manifest."""
        release = self.next_input(
            table, label=label, source=source, pseudonyms=pseudonyms, cut_label=cut_label
        )
        return self.apply(self.prepare(release))

    def apply(self, rendered: RenderedRelease) -> dict[str, Any]:
        """Write ``rendered`` (stage its files, commit it, rename the files into place) and
        return its manifest; nothing is committed when a file would replace a published one
        or the store moved since it was prepared."""
        self.check_continuity(rendered.sequence - 1)
        if self.ledger is not None:
            self.ledger.check_before_commit(self.store, rendered.sequence - 1)
        paths, files = self._paths(rendered.sequence), rendered.files.by_kind()
        stage_release(paths, rendered.files)
        kill_point("files_staged")
        if self.new_key is not None and self.new_key.new_file is not None:
            write_new_key(self.new_key)  # a new series: its key file, with its first release
            self.new_key = None
        commit = rendered.commit
        self.store.commit(
            sequence=rendered.sequence,
            pseudonyms=commit.pseudonyms,
            history=commit.history,
            values=commit.values,
            record=rendered.record,
            label=rendered.label if rendered.cut_label else None,
            state=commit.state,
            key_check=self.pseudonymizer.key_check(),
        )
        kill_point("committed")
        self.kind_checked_sequence = rendered.sequence
        self.highest_committed = max(self.highest_committed, rendered.sequence)
        if self.ledger is not None:
            self.ledger.append(LedgerEntry.of(rendered.sequence, rendered.label, files))
            kill_point("ledgered")
        finalize_release(paths)
        kill_point("finalized")
        return rendered.manifest

    def _paths(self, sequence: int) -> ReleasePaths:
        return ReleasePaths(self.out_dir, sequence, self.private_dir)

    def close(self) -> None:
        self.store.close()
