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

A run of several snapshots (:func:`~stream_release.pipeline.anonymize.anonymize_files`) is
planned whole before anything is written (:meth:`Publisher.dry_run`, then
:meth:`Publisher.apply`).

The store and the archive are checked against each other before every release: a store that
lost commits (:class:`~stream_release.errors.StoreRegressed`), a key other than the one the
history was written under (:class:`~stream_release.errors.KeyMismatch`) and a release file
that would replace a published one (:class:`~stream_release.errors.ArchiveConflict`) stop
the series instead of reusing sequence numbers or restarting every history. With a series
ledger (:mod:`stream_release.io.series_ledger`: offline and on one namespace, ``[output]
ledger``, default ``<archive>.ledger``), the store and both archives are also checked against
what the series published: restored together from one backup they agree with each other but
not with the ledger, which refuses them (:class:`~stream_release.errors.SeriesRewound`).

Another ``[mechanism] kind`` (:mod:`stream_release.mechanisms`) replaces "load history -> plan"
by the mechanism's release, with randomness keyed by a secret derived from the
pseudonymisation key (domain-separated from the pseudonyms), the kind and the sequence, and
commits the mechanism's state entries instead of a breach history (which it does not keep:
the commit's history is empty, and the manifest has no ``breach`` block). A series keeps one
kind: each manifest states it (``mechanism.kind``; none = the global guarantee), and a
publisher configured with another kind than the series' last release is refused
(:class:`~stream_release.errors.ConfigError`) before it publishes anything.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.config import Settings, horizon_of
from stream_release.config.hierarchy import load_hierarchy
from stream_release.core.grouping.threads import set_thread_cap
from stream_release.core.privacy.breach import RATIO_RTOL, minimum_ratio_from_log_product
from stream_release.core.privacy.linkage import HistoryRows
from stream_release.core.table import EncodedTable
from stream_release.errors import (
    NEW_SERIES_CAVEAT,
    ConfigError,
    GuaranteeUnsatisfiable,
    HistoryStoreError,
    KeyMismatch,
    SeriesRewound,
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
    ReleaseFiles,
    ReleasePaths,
    assignments_csv,
    decode_record_manifest,
    default_private_dir,
    discard_staged,
    encode_record,
    finalize_release,
    is_staged,
    published_sequences,
    stage_release,
)
from stream_release.io.series_ledger import (
    LedgerEntry,
    SeriesLedger,
    default_ledger_path,
    release_contents,
)
from stream_release.mechanisms import make_mechanism
from stream_release.mechanisms.base import Mechanism, ReleaseRandomness
from stream_release.mechanisms.companion_render import render_mechanism_release
from stream_release.mechanisms.global_guarantee.candidates import CandidatePool
from stream_release.mechanisms.global_guarantee.plan import (
    ReleasePlan,
    SuppressedUnion,
    plan_release,
    relink_suppressed,
)
from stream_release.mechanisms.global_guarantee.protected import check_protected_present
from stream_release.mechanisms.global_guarantee.render import render_release, suppressed_record
from stream_release.release_format import GLOBAL_GUARANTEE, manifest_kind

RANDOMNESS_PURPOSE = "mechanism"
"""What the mechanisms' randomness is derived for (:meth:`Pseudonymizer.derived_key`)."""


@dataclass(frozen=True, eq=False)
class PreparedRelease:
    """A planned and rendered release, not yet written: its files and its commit.

    ``pseudonyms`` (p,) S16 and ``history``: the individuals whose history the commit replaces
    (empty for another mechanism kind); ``state``: the mechanism's state entries.
    """

    sequence: int
    label: str
    files: ReleaseFiles
    pseudonyms: NDArray[np.bytes_]
    history: HistoryRows
    values: tuple[str, ...]
    record: bytes
    state: Mapping[bytes, bytes] | None
    cut_label: bool

    @property
    def manifest(self) -> dict[str, Any]:
        """The manifest as published (its JSON object)."""
        return self.files.manifest.document()


@dataclass(frozen=True, eq=False)
class PlannedRelease:
    """A release planned under the global guarantee, not yet rendered (:meth:`Publisher.plan`):
    the table and pseudonyms in pseudonym order (with any virtual candidates), the plan."""

    sequence: int
    label: str
    table: EncodedTable
    pseudonyms: NDArray[np.bytes_]
    plan: ReleasePlan
    source: dict[str, Any] | None
    cut_label: bool
    started: float
    """``time.perf_counter()`` when planning began (the manifest's ``elapsed_s``)."""
    history: HistoryRows
    """The rows' history before the release (what :meth:`Publisher.relink` links again)."""
    linked_to: SuppressedUnion | None = None
    """The union of the parts' suppressed rows :attr:`plan` links them to (``None``: its own)."""

    @property
    def groups(self) -> int:
        """The number of groups the plan publishes."""
        return int(self.plan.contents.n_groups)

    def suppressed(self) -> SuppressedUnion:
        """This part's suppressed rows: how many hold each value (the shards add them up)."""
        plan, table = self.plan, self.table
        star = (plan.group < 0) & plan.real
        counts = np.bincount(table.sensitive[star], minlength=len(table.sensitive_values))
        values = table.sensitive_values
        held = {values[v]: int(c) for v, c in enumerate(counts.tolist()) if c}
        return SuppressedUnion(held, int(np.count_nonzero(star)))

    def set_needs(self, protected: tuple[str, ...] | list[str]) -> tuple[dict[str, float], float]:
        """What the union of the parts' suppressed sets must hold for every member of this
        part's set: ``(ratios, base)``.

        ``ratios``: value by value, the ratio ``R(S,s)`` this set holds (Theorem 1, safe margin
        included) and what each member not withheld needs for any protected value of its
        history, also one this set does not hold (another part's set may bring it): its plan
        inside the horizon, Theorem 1's ratio past it (the set's ``keep_plan``). ``base``: what
        such a member needs for any other protected value (the strategy's base ratio, or ``l``
        with the safe margin past the horizon), 0 when every member is withheld for its
        history (held to the per-release bound only,
        :mod:`~stream_release.core.grouping.suppressed_set`)."""
        plan, table = self.plan, self.table
        ratios: dict[str, float] = {}
        suppressed = plan.suppressed_set
        for v, r in enumerate(suppressed.ratio.tolist()):
            if r > 0:
                ratios[table.sensitive_values[v]] = float(r)
        star = np.flatnonzero((plan.group < 0) & plan.real)
        free = np.setdiff1d(star, suppressed.exempt_members)
        strategy = plan.strategy
        floor = (
            float(strategy.base_ratio) if suppressed.keep_plan else strategy.ell * (1 + RATIO_RTOL)
        )
        base = floor if free.size else 0.0
        history = self.history
        if free.size == 0 or history.n_entries == 0:
            return ratios, base
        member = np.isin(history.owner(), free)
        log_p, links = history.log_p[member], history.links[member]
        if suppressed.keep_plan:
            need = strategy.required_ratio(log_p, links)
        else:
            need = minimum_ratio_from_log_product(strategy.ell, log_p) * (1 + RATIO_RTOL)
        wanted = set(protected)
        for gid, ratio in zip(history.value[member].tolist(), need.tolist(), strict=True):
            name = plan.values[gid]
            if not wanted or name in wanted:
                ratios[name] = max(ratios.get(name, 0.0), float(ratio))
        return ratios, base


class Publisher:
    """A series: where its public and private files go and where its history lives.

    Parameters
    ----------
    settings : Settings
        The configuration; ``settings.mechanism`` builds :attr:`mechanism`, which may raise
        :class:`~stream_release.errors.ConfigError` (e.g. a hierarchy level above the
        hierarchy's height).
    out_dir : Path
        The public directory (group lines, manifests).
    store : HistoryStore
        The series' history.
    pseudonymizer : Pseudonymizer
        The keyed hash of the ids.
    private_dir : Path or None
        The private directory (assignments, private records; offline, the history); default
        ``out_dir.private``.
    new_key : KeyMaterial or None
        The key of a new offline series, whose default key file is created just before the
        first commit (:func:`~stream_release.history.pseudonym.resolve_key`).
    ledger : Path or None
        The series ledger (:mod:`~stream_release.io.series_ledger`) this publisher checks in
        :meth:`recover` and appends to in :meth:`apply`; ``None``: none (a shard's part, a
        what-if series).
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
        self.mechanism: Mechanism | None = make_mechanism(settings)
        """The mechanism of ``[mechanism] kind``; ``None`` for the global guarantee."""
        self.new_key = new_key
        """The key of a new series until its key file is written (with the first commit),
        then ``None``."""
        self.candidates: CandidatePool | None = None
        """The population register of virtual individuals, read at the first release that
        uses it (``[virtual] registry``)."""
        self.kind_checked_sequence = 0
        """The last sequence whose record's ``mechanism.kind`` is known to be ours (0: none
        yet)."""
        self.highest_committed = 0
        """The highest sequence this publisher knows was committed or published: a store whose
        last sequence falls below it lost commits (:meth:`check_continuity`)."""
        self.sensitive_leaves: frozenset[str] | None = None
        """The leaves of the sensitive attribute's hierarchy, read at the first release that
        checks its protected values (:meth:`check_protected`); ``None`` without one."""
        self.ledger = SeriesLedger(ledger) if ledger is not None else None
        """The series ledger, if this publisher keeps one."""
        self.ledger_sequence: int | None = None
        """The ledger's last sequence as this publisher last read or wrote it (``None``: not
        read yet)."""

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

        ``private_dir`` defaults to ``out_dir.private``; ``history`` to its ``history``
        subdirectory (a directory or a Redis URL); ``ledger`` to ``[output] ledger``, else
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
        if self.ledger is not None and len(recorded) > min(committed, last_file):
            raise SeriesRewound(
                _rewound_message(self.ledger, len(recorded), self.store, committed, self, last_file)
            )
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
            self._bring_ledger_to(self.ledger, recorded, last_file)
        self.highest_committed = max(self.highest_committed, committed, last_file, len(recorded))

    def _bring_ledger_to(
        self, ledger: SeriesLedger, recorded: list[LedgerEntry], last_file: int
    ) -> None:
        """Check the ledger's last release against the archive's files, then record the
        releases ``len(recorded) + 1 .. last_file`` of the archive in it."""
        if recorded:
            last = recorded[-1]
            differs = last.differs(release_contents(self._paths(last.sequence)))
            if differs:
                raise SeriesRewound(_differs_message(ledger, last.sequence, differs, self))
        for sequence in range(len(recorded) + 1, last_file + 1):
            found = release_contents(self._paths(sequence))
            contents = {kind: data for kind, data in found.items() if data is not None}
            if len(contents) < len(found):
                missing = ", ".join(kind for kind in found if kind not in contents)
                raise SeriesRewound(
                    f"cannot record release {sequence} in the series ledger "
                    f"{str(ledger.path)!r}: its {missing} file(s) are missing from "
                    f"{str(self.out_dir)!r} / {str(self.private_dir)!r}; restore them from a "
                    "backup"
                )
            label = str(json.loads(contents["manifest"]).get("release", ""))
            ledger.append(LedgerEntry.of(sequence, label, contents))
        self.ledger_sequence = max(len(recorded), last_file)

    def decoy_rng(self, sequence: int) -> np.random.Generator:
        """The order in which release ``sequence``'s published groups become decoys where its
        suppressed set needs them (:func:`~stream_release.core.grouping.suppressed_set.
        decoy_order`): keyed by the pseudonymisation key, so that nobody without it can tell
        which groups would be taken first, and fresh per release, so that the same people
        are not the first candidates in every release."""
        secret = self.pseudonymizer.derived_key(RANDOMNESS_PURPOSE)
        return ReleaseRandomness.derive(secret, GLOBAL_GUARANTEE, sequence).generator("decoys")

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

        ``source``: where the snapshot came from (``file``, ``sha256``), kept in the private
        record only. ``pseudonyms`` (n,) S16: the rows' pseudonyms when the caller has them
        already (the streaming service stages rows under their pseudonym and ``table.ids``
        are their hex); by default they are computed from ``table.ids``. ``cut_label``:
        commit the label with the release and clear its staging in the same transaction (the
        service; Redis only).
        """
        prepared = self.prepare(
            table, label=label, source=source, pseudonyms=pseudonyms, cut_label=cut_label
        )
        return self.apply(prepared)

    def prepare(
        self,
        table: EncodedTable,
        *,
        label: str,
        source: dict[str, Any] | None = None,
        pseudonyms: NDArray[np.bytes_] | None = None,
        cut_label: bool = False,
        store: HistoryStore | None = None,
    ) -> PreparedRelease:
        """Plan and render the next release of ``store`` (default: the series' store);
        writes nothing."""
        started = time.perf_counter()
        ids_given = pseudonyms is not None
        if pseudonyms is None:
            pseudonyms = self.pseudonymizer.pseudonyms(table.ids)
        store, sequence, table, pseudonyms = self._next(table, pseudonyms, store)
        if self.mechanism is not None:
            return self._prepare_mechanism(
                self.mechanism, table, pseudonyms, label, sequence, source, cut_label, store
            )
        planned = self._plan(
            table, pseudonyms, ids_given, label, sequence, source, cut_label, store, started
        )
        return self.render(planned)

    def plan(
        self,
        table: EncodedTable,
        *,
        label: str,
        pseudonyms: NDArray[np.bytes_],
        cut_label: bool = False,
        store: HistoryStore | None = None,
        set_floor: Mapping[str, float] | None = None,
    ) -> PlannedRelease:
        """Plan the next release of ``store`` under the global guarantee without rendering it
        (a shard's part: its group numbers are known once every shard has planned, and
        :meth:`render` takes the first). ``pseudonyms`` (n,) S16 are the rows'; ``set_floor``:
        the least ratio the suppressed set must hold per value
        (:func:`~stream_release.mechanisms.global_guarantee.plan.plan_release`)."""
        started = time.perf_counter()
        if self.mechanism is not None:
            raise ConfigError(
                f"mechanism.kind = {self.kind!r} cannot run on shards (kafka.partitions > 1): "
                "its state is one per series; use kafka.partitions = 1"
            )
        store, sequence, table, pseudonyms = self._next(table, pseudonyms, store)
        return self._plan(
            table,
            pseudonyms,
            True,
            label,
            sequence,
            None,
            cut_label,
            store,
            started,
            set_floor,
        )

    def _next(
        self, table: EncodedTable, pseudonyms: NDArray[np.bytes_], store: HistoryStore | None
    ) -> tuple[HistoryStore, int, EncodedTable, NDArray[np.bytes_]]:
        """The store, the next sequence, and the rows in pseudonym order: the release does not
        depend on the input's row order, so the service (which stages rows by pseudonym) and
        offline runs agree. Refuses a store that lost commits and a series of another kind."""
        store = store if store is not None else self.store
        committed = store.last_sequence()
        if store is self.store:
            self.check_continuity(committed)
        order = argsort_pseudonyms(pseudonyms)  # distinct: one order
        if np.any(order != np.arange(order.shape[0])):
            table, pseudonyms = table.take(order), pseudonyms[order]
        self.check_kind(committed, store)
        return store, committed + 1, table, pseudonyms

    def _plan(
        self,
        table: EncodedTable,
        pseudonyms: NDArray[np.bytes_],
        ids_given: bool,
        label: str,
        sequence: int,
        source: dict[str, Any] | None,
        cut_label: bool,
        store: HistoryStore,
        started: float,
        set_floor: Mapping[str, float] | None = None,
    ) -> PlannedRelease:
        """Check the protected values against the release, load the histories and plan
        (rows in pseudonym order)."""
        self.check_protected(table, label, source, store)
        virtual = None
        register = self.settings.virtual.registry
        if register is not None:
            if self.candidates is None:
                schema = self.settings.schema
                self.candidates = CandidatePool.read(register, schema, self.pseudonymizer)
            table, pseudonyms, virtual = self.candidates.join_absent(table, pseudonyms, ids_given)
        history = store.load(pseudonyms)
        privacy = self.settings.privacy
        try:
            plan = plan_release(
                table,
                history,
                store.values(),
                privacy.make_strategy(),
                protected=privacy.protected,
                min_group_size=privacy.min_group_size,
                grouping=self.settings.grouping,
                virtual=virtual,
                set_floor=set_floor,
                rng=self.decoy_rng(sequence),
                past_horizon=horizon_of(privacy, self.settings.grouping).past(sequence),
            )
        except GuaranteeUnsatisfiable as exc:
            if source is None:  # the worker's status message and log name the release
                raise
            # offline: name the release and the file the refusal is about
            raise GuaranteeUnsatisfiable(
                f"{_where(label, source)}: {exc}", public=exc.public
            ) from exc
        kill_point("planned")
        return PlannedRelease(
            sequence, label, table, pseudonyms, plan, source, cut_label, started, history
        )

    def check_protected(
        self,
        table: EncodedTable,
        label: str,
        source: dict[str, Any] | None,
        store: HistoryStore,
    ) -> None:
        """Refuse a release whose protected values do not name its values
        (:mod:`stream_release.mechanisms.global_guarantee.protected`): before anything is
        planned or written.

        Raises
        ------
        GuaranteeUnsatisfiable
            ``public``; names the release (and its file), each value and its closest match.
        """
        privacy, schema = self.settings.privacy, self.settings.schema
        if not privacy.protected:
            return
        if self.sensitive_leaves is None and schema.sensitive in schema.hierarchies:
            hierarchy = load_hierarchy(schema.hierarchies[schema.sensitive], schema.sensitive)
            self.sensitive_leaves = frozenset(hierarchy.leaves)
        where = _where(label, source)
        check_protected_present(
            table.sensitive_values,
            privacy.protected,
            seen=store.values(),
            declared=self.sensitive_leaves,
            sensitive=schema.sensitive,
            where=where,
        )

    def relink(self, planned: PlannedRelease, union: SuppressedUnion) -> PlannedRelease:
        """``planned`` with its suppressed rows linked to the ``union`` of every shard's
        (:func:`~stream_release.mechanisms.global_guarantee.plan.relink_suppressed`);
        unchanged when the union is its own suppressed rows or already linked to it (a part
        confirmed, then committed).

        Raises
        ------
        GuaranteeUnsatisfiable
            A suppressed member's breach would pass the bound with the union's linkages.
        """
        own = planned.suppressed()
        if own.size == 0 or own == union or planned.linked_to == union:
            return planned
        plan = relink_suppressed(
            planned.table, planned.history, planned.plan, union, self.settings.privacy.protected
        )
        return replace(planned, plan=plan, linked_to=union)

    def render(
        self, planned: PlannedRelease, *, first_group: int = 0, part: bool = False
    ) -> PreparedRelease:
        """The files and the commit of a planned release; its groups are numbered from
        ``first_group``. ``part``: a shard's part of a release (the groups of the shards
        before it come first)."""
        table, plan, label, sequence = planned.table, planned.plan, planned.label, planned.sequence
        elapsed_s = time.perf_counter() - planned.started
        listed = plan.real | (plan.group >= 0)  # the candidates in no group are not in the release
        numbers = plan.group[listed]
        # the assignments file and the release record are assembled on threads beside the
        # group lines (their kernels and zlib release the GIL)
        with ThreadPoolExecutor(max_workers=2, thread_name_prefix="render") as pool:
            assignments = pool.submit(
                assignments_csv,
                table.ids[listed].tolist(),
                np.where(numbers >= 0, numbers + first_group, numbers),
                virtual=None if plan.virtual is None else plan.virtual[listed],
            )
            groups, manifest = render_release(
                table,
                plan,
                label=label,
                sequence=sequence,
                settings=self.settings,
                elapsed_s=elapsed_s,
                first_group=first_group,
            )
            record = pool.submit(encode_record, groups, manifest.document())
            private = _private_record(label, sequence, planned.source)
            private["suppressed"] = suppressed_record(table, plan)
            if self.candidates is not None:
                private["registry"] = self.candidates.registry.source
            files = ReleaseFiles(groups, manifest, assignments.result(), private)
            return PreparedRelease(
                sequence,
                label,
                files,
                planned.pseudonyms[plan.committed],
                plan.history,
                plan.values,
                record.result(),
                None,
                planned.cut_label,
            )

    def _prepare_mechanism(
        self,
        mechanism: Mechanism,
        table: EncodedTable,
        pseudonyms: NDArray[np.bytes_],
        label: str,
        sequence: int,
        source: dict[str, Any] | None,
        cut_label: bool,
        store: HistoryStore,
    ) -> PreparedRelease:
        """:meth:`prepare` through ``mechanism`` (rows already in pseudonym order)."""
        started = time.perf_counter()
        randomness = ReleaseRandomness.derive(
            self.pseudonymizer.derived_key(RANDOMNESS_PURPOSE), self.kind, sequence
        )
        out = mechanism.release(
            table,
            pseudonyms,
            sequence=sequence,
            randomness=randomness,
            load_state=store.load_state,
        )
        kill_point("planned")
        groups, manifest = render_mechanism_release(
            table,
            out,
            label=label,
            sequence=sequence,
            settings=self.settings,
            elapsed_s=time.perf_counter() - started,
        )
        files = ReleaseFiles(
            groups,
            manifest,
            assignments_csv(table.ids.tolist(), out.group),
            _private_record(label, sequence, source),
        )
        # no breach history: an empty commit of individuals, the dictionary unchanged
        return PreparedRelease(
            sequence,
            label,
            files,
            np.zeros(0, dtype="S16"),
            HistoryRows.empty(0),
            store.values(),
            encode_record(groups, manifest.document()),
            out.state,
            cut_label,
        )

    def apply(self, prepared: PreparedRelease) -> dict[str, Any]:
        """Write ``prepared``: stage its files, commit it, rename the files into place;
        returns its manifest.

        Raises
        ------
        ArchiveConflict
            A file of the release is already published with other content (nothing is
            committed).
        StoreRegressed, SequenceConflict, KeyMismatch
            The store is not where the release was prepared against (nothing is committed).
        """
        self.check_continuity(prepared.sequence - 1)
        if self.ledger is not None:
            self._check_ledger(self.ledger, prepared.sequence - 1)
        paths = self._paths(prepared.sequence)
        stage_release(paths, prepared.files)
        kill_point("files_staged")
        new_key = self.new_key
        if new_key is not None and new_key.new_file is not None:
            # a new series: its key file is written with its first release
            if write_key_file(new_key.new_file, new_key.key) != new_key.key:
                raise KeyMismatch(key_mismatch_message(repr(str(new_key.new_file))))
            self.new_key = None
        self.store.commit(
            prepared.sequence,
            prepared.pseudonyms,
            prepared.history,
            prepared.values,
            prepared.record,
            label=prepared.label if prepared.cut_label else None,
            state=prepared.state,
            key_check=self.pseudonymizer.key_check(),
        )
        kill_point("committed")
        self.kind_checked_sequence = prepared.sequence
        self.highest_committed = max(self.highest_committed, prepared.sequence)
        if self.ledger is not None:
            entry = LedgerEntry.of(prepared.sequence, prepared.label, prepared.files.by_kind())
            self.ledger.append(entry)
            self.ledger_sequence = prepared.sequence
            kill_point("ledgered")
        finalize_release(paths)
        kill_point("finalized")
        return prepared.manifest

    def _check_ledger(self, ledger: SeriesLedger, committed: int) -> None:
        """Before release ``committed + 1`` is committed: the ledger records releases
        ``1 .. committed`` (read again and brought up to the archive first when this publisher
        was not recovered, or the ledger is not where it left it).

        Raises
        ------
        SeriesRewound
            The ledger records another number of releases than the store's.
        """
        if self.ledger_sequence == committed:
            return
        done = published_sequences(self.out_dir) if self.out_dir.is_dir() else []
        last_file = done[-1] if done else 0
        recorded = ledger.entries()
        if len(recorded) <= min(committed, last_file):
            self._bring_ledger_to(ledger, recorded, last_file)
        if self.ledger_sequence != committed:
            raise SeriesRewound(
                _rewound_message(ledger, len(recorded), self.store, committed, self, last_file)
            )

    def dry_run(
        self, releases: Sequence[tuple[EncodedTable, str, dict[str, Any] | None]]
    ) -> list[PreparedRelease]:
        """Prepare ``(table, label, source)`` releases in order against an in-memory overlay
        of the history: each sees the ones before it; nothing is written."""
        return list(self.what_if(releases))

    def what_if(
        self, releases: Sequence[tuple[EncodedTable, str, dict[str, Any] | None]]
    ) -> Iterator[PreparedRelease]:
        """:meth:`dry_run` one release at a time: a refusal ends it after the releases
        before it were yielded (``stream-release plan``)."""
        overlay = OverlayHistoryStore(self.store)
        for i, (table, label, source) in enumerate(releases):
            release = self.prepare(table, label=label, source=source, store=overlay)
            keep = overlay.commit if i + 1 < len(releases) else overlay.check
            keep(
                release.sequence,
                release.pseudonyms,
                release.history,
                release.values,
                release.record,
                state=release.state,
                key_check=self.pseudonymizer.key_check(),
            )
            yield release

    def _paths(self, sequence: int) -> ReleasePaths:
        return ReleasePaths(self.out_dir, sequence, self.private_dir)

    def close(self) -> None:
        self.store.close()


def _where(label: str, source: dict[str, Any] | None) -> str:
    """``release 't01' (snapshot 't01.csv')``: what a refusal is about (the file when known)."""
    where = f"release {label!r}"
    if source is not None and "file" in source:
        where += f" (snapshot {str(source['file'])!r})"
    return where


def _private_record(label: str, sequence: int, source: dict[str, Any] | None) -> dict[str, Any]:
    """The private record of a release (``private-NNNN.json``): what the audit needs and no
    reader of the public files may see."""
    record: dict[str, Any] = {"release": label, "sequence": sequence}
    if source is not None:
        record["source"] = source
    return record


def _regressed_message(store: HistoryStore, committed: int, known: int) -> str:
    return (
        f"the history store {store!r} is at release {committed}, but release {known} was "
        "already committed or published: the store lost commits (e.g. Redis restarted "
        "without persistence). Nothing is cut until it is restored from its backup (continuing "
        f"in a new archive and history instead is a new series: {NEW_SERIES_CAVEAT})"
    )


def _rewound_message(
    ledger: SeriesLedger,
    recorded: int,
    store: HistoryStore,
    committed: int,
    publisher: Publisher,
    last_file: int,
) -> str:
    """The one line of :class:`SeriesRewound` for a store or an archive behind the ledger."""
    behind = min(committed, last_file)
    return (
        f"the series ledger {str(ledger.path)!r} records releases 1..{recorded} as published, "
        f"but the history store {store!r} is at release {committed} and "
        f"{str(publisher.out_dir)!r} holds releases up to {last_file}: they were restored from "
        f"an older backup (or belong to another series), and publishing now would reuse "
        f"sequence {behind + 1} and forget the linkages of releases {behind + 1}..{recorded}, "
        f"which are public. Restore the history store and both archives "
        f"({str(publisher.out_dir)!r}, {str(publisher.private_dir)!r}) from a backup of release "
        f"{recorded} or later; or start a new series (new --out, --private, --history and "
        f"ledger), knowing that {NEW_SERIES_CAVEAT}"
    )


def _differs_message(
    ledger: SeriesLedger, sequence: int, differs: list[str], publisher: Publisher
) -> str:
    """The one line of :class:`SeriesRewound` for an archive holding another release under a
    sequence the ledger records."""
    return (
        f"release {sequence} in {str(publisher.out_dir)!r} / {str(publisher.private_dir)!r} is "
        f"not the one the series ledger {str(ledger.path)!r} records: its "
        f"{', '.join(differs)} file(s) differ from the recorded sha256 or are missing. The "
        "archives were restored from another backup or belong to another series: restore them "
        f"and the history store from a backup of release {sequence} or later, or give this "
        "series its own ledger ([output] ledger, --ledger)"
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
