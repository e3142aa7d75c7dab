"""The release service's core, independent of the Kafka client (docs/contract.md §5).

The worker feeds it the messages it consumes and sends what it returns:

1. :meth:`ReleaseService.accept_records` / :meth:`accept_seal`: decode, validate (schema,
   hierarchy leaves, numeric QIDs), pseudonymise and stage; every refused message comes back
   as a :class:`Rejected` for ``sr.rejected``. Offsets may be committed once this returns:
   staging is durable in Redis.
2. :meth:`cut_ready`: every ready release is planned and its history, release record, label
   and sequence are committed in one Redis transaction; the archive gets the public files of
   docs/contract.md §4 and the private archive the private ones (the assignments hold pseudonyms in
   hex, never raw ids).
3. :meth:`pending` / :meth:`outgoing` / :meth:`mark_published`: the groups and the manifest of
   each committed but unsent release, read back from its committed record, so a release sent
   again after a crash has the same content and the same ``sequence`` (consumers dedupe by it).
4. :meth:`published` / :meth:`waiting` / :meth:`redis_answers` / ``config_problem``: what
   the health endpoint and the metrics report (:mod:`stream_release.stream.observability`).

The consumed messages and batches, the check of a record and the refusals of staging are
:mod:`stream_release.stream.intake`'s; the status messages of a release not published and the
problems that hold a cut, :mod:`stream_release.stream.notices`'.

What a cut does with a release that cannot be made (:meth:`ReleaseService.cut_ready`), by
whose fault it is:

* the snapshot's (``GuaranteeUnsatisfiable``: too few rows for the bound; ``SchemaError``: a
  value outside a configured domain, a QID kind contradicting the settings): the release is
  refused (its records are late from then on), logged ``release_refused``, and the releases
  after it are cut;
* the operator's (``ConfigError``: e.g. a mechanism's series parameters changed mid-series):
  nothing is refused, the release stays staged and nothing after it is cut; every attempt logs
  ``config_error`` with the fix, and ``/health`` is degraded until a cut gets past it (once the
  configuration is fixed and the worker restarted);
* the history store's (``StoreRegressed``: Redis came back without the commits already
  published, e.g. restarted without persistence; ``ArchiveConflict``: a release file would
  replace a published one): nothing is cut or refused, the release stays staged, every attempt
  logs ``store_regressed``, ``/health`` is degraded and ``sr_store_regressed`` is 1 until the
  store is restored: cutting would reuse published sequence numbers and forget linkages;
* the infrastructure's (Redis): raised, and the cut is tried again later.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from stream_release.config import Settings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.errors import (
    ArchiveConflict,
    ConfigError,
    GuaranteeUnsatisfiable,
    SchemaError,
    StoreRegressed,
)
from stream_release.faults import kill_point
from stream_release.history.keys import RedisKeys
from stream_release.history.pseudonym import Pseudonymizer, load_key
from stream_release.history.redis_client import REDIS_ERRORS, RedisClient
from stream_release.history.redis_store import RedisHistoryStore
from stream_release.io.encoding import encode
from stream_release.io.release_files import decode_record, default_private_dir
from stream_release.io.series_ledger import default_ledger_path
from stream_release.pipeline.publisher import Publisher
from stream_release.stream.intake import (
    SEAL_ERRORS,
    STAGE_ERRORS,
    Accepted,
    Incoming,
    PreparedBatch,
    RecordValidator,
    ReleaseRows,
    kafka_coordinates,
    rejected_message,
    release_label_of,
)
from stream_release.stream.messages import (
    Rejected,
    Rejection,
    RejectReason,
    ReleaseNotice,
    decode_seal,
    decode_snapshot_record,
)
from stream_release.stream.notices import (
    CONFIG_FIX,
    STORE_FIX,
    ConfigProblem,
    StoreProblem,
    refusal_notice,
)
from stream_release.stream.redaction import Redactor, fitted
from stream_release.stream.staging import (
    RedisStaging,
    ReleaseStatus,
    SealOutcome,
    Staged,
    StageOutcome,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outgoing:
    """A message to produce."""

    topic: str
    key: bytes | None
    """The Kafka key (``None``: a rejection of a message that had none)."""
    value: bytes


class BaseReleaseService(ABC):
    """What every release service does the same way: decode, check and pseudonymise records,
    refuse bad ones, and keep the release-level publication state (published sequence,
    status outbox) in :attr:`staging`. :class:`ReleaseService` cuts one namespace; the sharded
    one (:mod:`stream_release.stream.sharded.service`) cuts shards.

    State, read by ``/health`` and the metrics:

    * ``config_problem``: set when the last cut stopped at a release the configuration cannot
      make (``None`` once a cut gets past it);
    * ``store_problem``: set when the last cut stopped because the history store is behind
      what was already published (``None`` once a cut gets past it);
    * ``refused``: the labels the last cut refused (``sr_releases_refused_total``);
    * ``last_refusal``: the last release refused, until a release after it is committed
      (kept in Redis: a restart does not forget it, :meth:`restore_refusal`).
    """

    staging: RedisStaging
    """The release-level state: labels, seals, published sequence, status outbox."""

    def __init__(
        self,
        settings: Settings,
        client: RedisClient,
        archive: Path | None = None,
        private_archive: Path | None = None,
    ) -> None:
        self.settings = settings
        if archive is None:  # the configured pair
            archive = settings.service.archive
            private_archive = private_archive or settings.service.private_archive
        self.archive = Path(archive)
        """The public directory of the series' releases."""
        self.private_archive = (
            Path(private_archive) if private_archive else default_private_dir(self.archive)
        )
        """Its private directory (assignments, private records)."""
        self.client = client
        self.config_problem: ConfigProblem | None = None
        self.store_problem: StoreProblem | None = None
        self.refused: list[str] = []
        self.last_refusal: ReleaseNotice | None = None
        self.pseudonymizer = Pseudonymizer(load_key(settings.history, default_dir=None))
        self.hierarchies = load_hierarchies(settings.schema)
        self.validator = RecordValidator(settings, self.hierarchies)
        self.redactor = Redactor(
            settings.service.rejected_raw, self.pseudonymizer, settings.schema.qid
        )

    # -- 1. staging ----------------------------------------------------------------------------

    def accept_records(self, messages: list[Incoming]) -> Accepted:
        """Stage a batch of ``sr.records`` messages: :meth:`prepare_records` then
        :meth:`stage_prepared`."""
        return self.stage_prepared(self.prepare_records(messages))

    def prepare_records(self, messages: list[Incoming]) -> PreparedBatch:
        """Decode, validate and pseudonymise a batch of ``sr.records`` messages, without
        touching Redis (the worker prepares a batch while the previous one is being staged)."""
        rejected: list[Rejected] = []
        by_label: dict[str, list[tuple[Incoming, str, bytes]]] = defaultdict(list)
        limit = self.settings.kafka.max_message_bytes
        rejected_by_label: dict[str, list[str]] = defaultdict(list)
        fast_row = self.validator.fast_row
        for message in messages:
            fast = fast_row(message.value)
            if fast is not None:
                by_label[fast[0]].append((message, fast[1], fast[2]))
                continue
            record = decode_snapshot_record(message.value, self.settings.schema, max_bytes=limit)
            if isinstance(record, Rejection):
                rejected.append(self._rejected(message, record))
                label = release_label_of(message.value, limit)
                if label is not None:
                    rejected_by_label[label].append(kafka_coordinates(message))
                continue
            row = self.validator.staged_row(record)
            if isinstance(row, Rejection):
                rejected.append(self._rejected(message, row))
                rejected_by_label[record.release].append(kafka_coordinates(message))
                continue
            by_label[record.release].append((message, record.id, row))
        releases = {
            label: ReleaseRows(
                [message for message, _, _ in items],
                self.pseudonymizer.digests([ident for _, ident, _ in items]),
                [row for _, _, row in items],
            )
            for label, items in by_label.items()
        }
        return PreparedBatch(messages, rejected, releases, dict(rejected_by_label))

    def stage_prepared(self, batch: PreparedBatch) -> Accepted:
        """Stage a prepared batch; returns its rejected messages (refused when prepared or by
        staging: duplicate id, late, over the seal) and whether a release became complete."""
        rejected = list(batch.rejected)
        blocking = defaultdict(list, {k: list(v) for k, v in batch.rejected_by_label.items()})
        complete = False
        for index, (label, release) in enumerate(batch.releases.items()):
            if index:
                kill_point("stage_partial")
            staged = self._stage(label, release)
            complete = complete or staged.complete
            for message, outcome in zip(release.messages, staged.outcomes, strict=True):
                if outcome in STAGE_ERRORS:
                    reason, error = STAGE_ERRORS[outcome]
                    limit = self.settings.service.max_release_rows
                    refusal = Rejection(error=error.format(label=label, limit=limit), reason=reason)
                    rejected.append(self._rejected(message, refusal))
                    if outcome is StageOutcome.TOO_LARGE:  # its id can never be staged
                        blocking[label].append(kafka_coordinates(message))
        for label, coordinates in blocking.items():
            self._note_rejected(label, coordinates)
        return Accepted(rejected, complete)

    @abstractmethod
    def _stage(self, label: str, release: ReleaseRows) -> Staged:
        """Stage the valid rows of one release of a batch."""

    @abstractmethod
    def _note_rejected(self, label: str, coordinates: list[str]) -> None:
        """Count rejected records of ``label`` (``topic:partition:offset`` each)."""

    @abstractmethod
    def _seal(self, label: str, counts: list[int]) -> SealOutcome:
        """Record the seal of ``label``: the distinct ids of each partition."""

    def accept_seal(self, message: Incoming) -> Rejected | None:
        """Record an ``sr.control`` seal; returns it rejected if it is bad or conflicting."""
        seal = decode_seal(message.value, max_bytes=self.settings.kafka.max_message_bytes)
        if isinstance(seal, Rejection):
            return self._rejected(message, seal)
        counts = seal.counts(self.settings.kafka.partitions)
        if isinstance(counts, str):
            return self._rejected(
                message, Rejection(error=counts, reason=RejectReason.INVALID_FIELD)
            )
        outcome = self._seal(seal.release, counts)
        if outcome in SEAL_ERRORS:
            reason, error = SEAL_ERRORS[outcome]
            text = error.format(
                label=seal.release,
                records=seal.records,
                limit=self.settings.service.max_release_rows,
            )
            refusal = Rejection(error=text, reason=reason)
            return self._rejected(message, refusal)
        return None

    def _rejected(self, message: Incoming, refusal: Rejection) -> Rejected:
        """The rejection of ``message`` as it is sent (``service.rejected_raw``), short enough
        for one Kafka message (:func:`~stream_release.stream.redaction.fitted`)."""
        sent = self.redactor.rejection(
            rejected_message(message, refusal), message.value, message.key
        )
        return fitted(sent, self.settings.kafka.max_message_bytes)

    # -- release-level state -------------------------------------------------------------------

    @abstractmethod
    def last_sequence(self) -> int:
        """The last committed release sequence (0 before the first)."""

    def pending(self) -> list[int]:
        """Committed sequences not yet marked published, ascending."""
        return list(range(self.staging.published() + 1, self.last_sequence() + 1))

    def mark_published(self, sequence: int) -> int:
        """Record that release ``sequence`` was sent, and delete the release records no step
        reads again (:meth:`drop_records`). Returns the published sequence after the call."""
        published = self.staging.mark_published(sequence)
        self.drop_records()
        return published

    def drop_records(self) -> None:
        """Delete the release records below :meth:`records_needed_from`: a record holds the
        release's group lines (about the size of its ``release-*.jsonl``) and was kept
        forever, in Redis's memory, after it was sent."""
        self.staging.drop_records(self.records_needed_from(), self.record_namespaces())

    def records_needed_from(self) -> int:
        """The first sequence whose release record a step may still read: the last one sent
        (``/health`` and the restart read the last committed record, re-sending reads those
        not sent)."""
        return self.staging.published()

    @abstractmethod
    def record_namespaces(self) -> list[RedisKeys]:
        """The namespaces that hold the release records (one hash tag each)."""

    def published(self) -> int:
        """The last sequence marked published (0 if none)."""
        return self.staging.published()

    def status_outbox(self) -> list[bytes]:
        """Status messages (:class:`ReleaseNotice` JSON) committed but not yet sent."""
        return self.staging.status_outbox()

    def status_sent(self, count: int) -> None:
        """Drop the ``count`` oldest status messages: the broker acknowledged them."""
        self.staging.status_sent(count)

    def status_messages(self, values: list[bytes]) -> list[Outgoing]:
        """``values`` (status JSON) as messages to ``topics.status``, keyed by label."""
        topic = self.settings.kafka.topics.status
        return [Outgoing(topic, orjson.loads(v)["release"].encode("utf-8"), v) for v in values]

    @abstractmethod
    def waiting(self) -> list[ReleaseStatus]:
        """The sealed releases still missing records (not ready, not cut), by label."""

    @abstractmethod
    def next_release(self) -> tuple[str, int]:
        """The label and sealed rows of the release the next cut takes (``("", 0)``: none)."""

    def blocked(self) -> list[ReleaseStatus]:
        """The sealed releases the records received cannot complete
        (:attr:`~stream_release.stream.staging.ReleaseStatus.blocked`)."""
        return [status for status in self.waiting() if status.blocked]

    @abstractmethod
    def cut_ready(self) -> list[dict[str, Any]]:
        """Cut and commit every release that can be; returns their manifests."""

    @abstractmethod
    def outgoing(self, sequence: int) -> list[Outgoing]:
        """The group messages then the manifest of committed release ``sequence``."""

    @abstractmethod
    def last_state(self) -> tuple[dict[str, Any] | None, int]:
        """The manifest of the last committed release (``None`` before the first) and the
        last published sequence."""

    def redis_answers(self) -> bool:
        """Whether Redis answers PING."""
        try:
            return bool(self.client.ping())
        except REDIS_ERRORS:
            return False

    def log_refusal(self, notice: ReleaseNotice, rows: int) -> None:
        """Log a refused release (event ``release_refused``) and keep it for ``/health``."""
        self.refused.append(notice.release)
        self.last_refusal = notice
        self.staging.note_refusal(notice.model_dump_json().encode("utf-8"))
        log.error(
            "release %r refused, nothing published: %s; %s",
            notice.release,
            notice.reason,
            notice.fix,
            extra={
                "event": "release_refused",
                "release": notice.release,
                "rows": rows,
                "error": notice.error,
                "detail": notice.reason,
                "fix": notice.fix,
            },
        )

    def restore_refusal(self) -> None:
        """The last refusal kept in Redis (a release refused before a restart, with no release
        committed after it), for ``/health``."""
        kept = self.staging.last_refusal()
        self.last_refusal = None if kept is None else ReleaseNotice.model_validate_json(kept)

    def refusal_passed(self) -> None:
        """A release after the last refused one was committed: ``/health`` forgets it."""
        if self.last_refusal is not None:
            self.staging.refusal_passed()
            self.last_refusal = None

    def hold_for_store(self, label: str, rows: int, exc: Exception) -> None:
        """A cut stopped because the history store is behind what was already published (the
        archive, the series ledger, ``topics.manifests``; event
        ``store_regressed``; ``/health`` degraded until a cut gets past it)."""
        self.store_problem = StoreProblem(label, str(exc))
        log.error(
            "release %r not cut, the history store is behind what was already published: %s; %s",
            label,
            exc,
            STORE_FIX,
            extra={
                "event": "store_regressed",
                "release": label,
                "rows": rows,
                "error": type(exc).__name__,
                "detail": str(exc),
                "fix": STORE_FIX,
            },
        )

    def hold_for_config(self, label: str, rows: int, exc: ConfigError) -> None:
        """A cut stopped at a release the configuration cannot make (event ``config_error``;
        our messages name configuration keys and values, never a record's id or value)."""
        self.config_problem = ConfigProblem(label, str(exc))
        log.error(
            "release %r not cut, the configuration cannot make it: %s; %s",
            label,
            exc,
            CONFIG_FIX,
            extra={
                "event": "config_error",
                "release": label,
                "rows": rows,
                "error": type(exc).__name__,
                "detail": str(exc),
                "fix": CONFIG_FIX,
            },
        )


class ReleaseService(BaseReleaseService):
    """Staging, cutting, committing and re-sending releases of one namespace (one shard)."""

    def __init__(
        self,
        settings: Settings,
        client: RedisClient,
        archive: Path | None = None,
        private_archive: Path | None = None,
    ) -> None:
        super().__init__(settings, client, archive, private_archive)
        self.keys = RedisKeys(settings.history.prefix)
        self.store = RedisHistoryStore(client, settings.history.prefix)
        self.staging = RedisStaging(
            client, self.keys, settings.schema, max_rows=settings.service.max_release_rows
        )
        self.publisher = Publisher(
            settings,
            self.archive,
            self.store,
            self.pseudonymizer,
            private_dir=self.private_archive,
            ledger=settings.output.ledger or default_ledger_path(self.archive),
        )
        self.publisher.recover()
        self.restore_refusal()

    def _stage(self, label: str, release: ReleaseRows) -> Staged:
        return self.staging.stage(label, release.pseudonyms, release.rows)

    def record_namespaces(self) -> list[RedisKeys]:
        return [self.keys]

    def _note_rejected(self, label: str, coordinates: list[str]) -> None:
        self.staging.note_rejected(label, coordinates)

    def _seal(self, label: str, counts: list[int]) -> SealOutcome:
        return self.staging.seal(label, sum(counts))

    # -- 2. cut and commit ---------------------------------------------------------------------

    def cut_ready(self) -> list[dict[str, Any]]:
        """Plan and commit every ready release (seal order is not assumed: label order).

        A release whose guarantee cannot be met (``GuaranteeUnsatisfiable``: too few rows for
        the required ratio, one value too frequent) or whose staged rows do not encode
        (``SchemaError``, e.g. a value outside a mechanism's configured domain) is refused
        (:meth:`RedisStaging.refuse`) and logged; the releases after it are cut as usual, so
        one bad snapshot cannot stall the series.

        A release the configuration cannot make (``ConfigError``: e.g. a mechanism's series
        parameters changed mid-series) is not the data's fault: it is not refused but left
        staged, the cut stops there (the releases after it keep their order), the problem is
        logged (event ``config_error``, with the fix) at every attempt and kept in
        :attr:`config_problem` for ``/health``; the releases committed before it are returned
        as usual. A Redis failure is raised: the cut is tried again later.
        """
        manifests = []
        self.config_problem = None
        self.store_problem = None
        self.refused = []
        for status in self.staging.ready():
            pseudonyms, raw = self.staging.load(status.label)
            kill_point("cut_loaded")
            rows = raw.n_rows
            try:
                table = encode(raw, self.settings.schema, self.hierarchies)
                del raw  # the table holds what the release needs: free the strings first
                manifest = self.publisher.publish(
                    table, label=status.label, pseudonyms=pseudonyms, cut_label=True
                )
            except (GuaranteeUnsatisfiable, SchemaError) as exc:
                notice = refusal_notice(status.label, exc)
                self.staging.refuse(status.label, notice.model_dump_json().encode("utf-8"))
                self.log_refusal(notice, rows)
                continue
            except (StoreRegressed, ArchiveConflict) as exc:
                self.hold_for_store(status.label, rows, exc)
                break
            except ConfigError as exc:
                self.hold_for_config(status.label, rows, exc)
                break
            manifests.append(manifest)
            self.refusal_passed()  # a later release made it
        return manifests

    # -- 3. publication ------------------------------------------------------------------------

    def last_sequence(self) -> int:
        return self.store.last_sequence()

    def outgoing(self, sequence: int) -> list[Outgoing]:
        """The group messages then the manifest of release ``sequence``, from its record."""
        record = self.store.record(sequence)
        if record is None:
            raise LookupError(f"release {sequence} has no committed record")
        manifest, groups = decode_record(record)
        return release_messages(self.settings, manifest, groups)

    # -- 4. health -----------------------------------------------------------------------------

    def last_state(self) -> tuple[dict[str, Any] | None, int]:
        """The manifest of the last committed release (``None`` before the first) and the
        last published sequence: what the release gauges showed before a restart."""
        last = self.store.last_sequence()
        record = self.store.record(last) if last else None
        manifest = None if record is None else decode_record(record)[0]
        return manifest, self.staging.published()

    def waiting(self) -> list[ReleaseStatus]:
        return [
            status
            for status in (self.staging.status(label) for label in self.staging.open_labels())
            if status.sealed is not None and status.committed is None and not status.ready
        ]

    def next_release(self) -> tuple[str, int]:
        ready = self.staging.ready()
        return (ready[0].label, ready[0].staged) if ready else ("", 0)


def release_messages(settings: Settings, manifest: dict[str, Any], groups: bytes) -> list[Outgoing]:
    """A release's group lines (``topics.releases``) then its manifest (``topics.manifests``),
    keyed by its label."""
    key = str(manifest["release"]).encode("utf-8")
    topics = settings.kafka.topics
    out = [Outgoing(topics.releases, key, line) for line in groups.splitlines() if line]
    out.append(Outgoing(topics.manifests, key, orjson.dumps(manifest)))
    return out
