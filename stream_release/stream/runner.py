"""What the worker's app does with each batch of messages, at each publication and for each
probe (:class:`ServiceRunner`): the app (:mod:`stream_release.stream.app`) only wires it to
Kafka. Every call into the release service holds one lock, so staging and the cut never
interleave; logs name releases by sequence and counts only, never an id, a key or a value."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, NoReturn, TypeVar

import faust
from faust.types import EventT

from stream_release.config import Settings, horizon_of
from stream_release.errors import StoreRegressed
from stream_release.faults import kill_point
from stream_release.release_format import Manifest
from stream_release.stream.intake import Incoming, PreparedBatch
from stream_release.stream.kafka import (
    connection_problem,
    kafka_error,
    last_manifest_sequence,
)
from stream_release.stream.logs import describe_failure, unexpected
from stream_release.stream.messages import Rejected
from stream_release.stream.notices import blocked_notice, held_notice, published_ahead_message
from stream_release.stream.observability import Metrics, health_payload
from stream_release.stream.records_consumer import RecordConsumer
from stream_release.stream.redaction import SentRejected
from stream_release.stream.release_producer import Releases
from stream_release.stream.retry import until_done
from stream_release.stream.service import BaseReleaseService, Outgoing
from stream_release.stream.sharded.service import ShardedReleaseService
from stream_release.stream.shutdown import exit_on_bug
from stream_release.stream.staging import ReleaseStatus

log = logging.getLogger(__name__)

T = TypeVar("T")


A = TypeVar("A")


PROBE_TIMEOUT_S = 2.0
"""Longest wait for Redis when answering ``/health`` or refreshing ``/metrics``."""


class ServiceRunner:
    """The asynchronous side of a release service (:class:`~stream_release.stream.service.
    ReleaseService`, or :class:`~stream_release.stream.sharded.service.ShardedReleaseService`
    on shards): one lock, threads, the producer."""

    def __init__(
        self,
        app: faust.App,
        service: BaseReleaseService,
        settings: Settings,
        metrics: Metrics | None = None,
    ) -> None:
        self.app = app
        self.service = service
        self.settings = settings
        self.metrics = metrics if metrics is not None else Metrics()
        if settings.service.release_period_s is not None:
            self.metrics.release_period_s = settings.service.release_period_s
        self.lock = asyncio.Lock()
        self.publication_ok = True
        """Whether the last publication attempt succeeded (``/health``)."""
        self.publication_error: str | None = None
        """Why it failed (exception type and message: addresses and codes, no ids)."""
        self.notified: set[tuple[str, int, int]] = set()
        """Blocked releases (label, staged, rejected) whose status message this process has
        sent: a release blocked again with other counts (records sent again) gets another."""
        self.records: RecordConsumer | None = None
        """The consumer of ``topics.records`` (set by :func:`create_app`)."""
        self.releases: Releases | None = None
        """The producer of group lines and manifests (set by :func:`create_app`)."""
        self.shards: set[int] = set()
        """The partitions of ``topics.records`` the records consumer holds (the shards this
        worker cuts, on shards)."""
        self.on_bug: Callable[[str, BaseException], NoReturn] = exit_on_bug
        """What a failure of this program while staging a batch does (the action, the
        exception): end the process before anything of the batch is committed."""
        self.horizon = (
            horizon_of(settings.privacy, settings.grouping).releases
            if settings.mechanism.kind == "global-guarantee"
            else None
        )
        """The releases the series is planned for (``/health`` says when it is past them)."""
        self.manifests_sequence: int | None = None
        """The highest sequence on ``topics.manifests``: read from the topic before this
        process's first cut (``None`` until then), raised by every release it sends. A history
        store below it holds the cut (:meth:`behind_published`)."""
        self.held_notified: set[tuple[str, str]] = set()
        """Held releases (label, reason) whose status message this process has sent."""

    async def assigned(self, partitions: set[int]) -> None:
        """The records consumer was given ``partitions`` of ``topics.records`` (after a
        rebalance): on shards, the worker cuts the parts of those from now on."""
        self.shards = set(partitions)
        async with self.lock:
            await self._own_shards()
        log.info(
            "shards %s assigned",
            sorted(partitions),
            extra={"event": "shards_assigned", "shards": sorted(partitions)},
        )
        self.metrics.observe_shards(partitions)

    async def revoked(self, partitions: set[int]) -> None:
        """The group takes ``partitions`` away (a rebalance starts): waits for the step in
        flight (the lock), then cuts them no more, before the group gives them to another
        worker, so two workers never commit one shard's part at once."""
        self.shards -= set(partitions)
        async with self.lock:
            await self._own_shards()

    async def _own_shards(self) -> None:
        """Make the service cut :attr:`shards` (lock held); a failure (Redis away, a shard's
        store behind its archive) is logged and tried again at the next publication. Without
        shard 0, stop the release producer's transactional one: the next sender's fences it
        (:mod:`~stream_release.stream.release_producer`, "Fencing")."""
        service = self.service
        if not isinstance(service, ShardedReleaseService):
            return
        if service.cut.owned != self.shards:
            await self._take_shards(service)
        if not self.sends_releases() and self.releases is not None:
            await self.releases.end_transactions()

    async def _take_shards(self, service: ShardedReleaseService) -> None:
        try:
            await asyncio.to_thread(service.own, self.shards)
        except Exception as exc:
            self.publication_ok, self.publication_error = False, describe_failure(exc)
            log.error(
                "cannot take shards %s yet, will retry: %s",
                sorted(self.shards),
                self.publication_error,
                exc_info=unexpected(exc),
                extra={"event": "shards_not_taken", "error": type(exc).__name__},
            )

    def sends_releases(self) -> bool:
        """Whether this worker sends the committed releases and the status messages: always
        on one namespace; on shards, the owner of shard 0 (one sender at a time, which moves
        with the shard; its transactional id fences the previous one)."""
        service = self.service
        return not isinstance(service, ShardedReleaseService) or 0 in service.cut.owned

    async def prepare_records(self, messages: list[Incoming]) -> PreparedBatch:
        """Decode, validate and pseudonymise a batch of ``topics.records`` messages in a
        thread, without the lock: it may run while the previous batch is being staged."""
        return await asyncio.to_thread(self.service.prepare_records, messages)

    async def stage_records(self, batch: PreparedBatch) -> None:
        """Stage a prepared batch, send its rejections, then publish if the batch completed a
        release (otherwise the periodic check or a seal does)."""
        accepted, seconds = await self._until_done(
            "stage records", lambda: self._locked(self.service.stage_prepared, batch)
        )
        rejected = accepted.rejected
        messages = batch.messages
        await self._until_done("send the rejections", lambda: self._reject(messages, rejected))
        self.metrics.observe_batch(len(messages), rejected, seconds)
        if accepted.complete:
            await self.cut_and_send()

    async def stage_seals(self, events: Sequence[EventT[bytes]]) -> None:
        """Record a batch of ``topics.control`` seals, send their rejections, then publish."""
        messages = [_incoming(event) for event in events]

        def accept(batch: list[Incoming]) -> list[Rejected | None]:
            return [self.service.accept_seal(message) for message in batch]

        rejected, seconds = await self._until_done(
            "stage seals", lambda: self._locked(accept, messages)
        )
        await self._until_done("send the rejections", lambda: self._reject(messages, rejected))
        self.metrics.observe_batch(0, rejected, seconds)
        kill_point("sealed")
        await self.cut_and_send()

    async def cut_and_send(self) -> None:
        """Cut every ready release, then send every committed but unsent one, in sequence.

        A failure (an infeasible release, Redis or the broker down) is logged and left for
        the next call: nothing is marked published unless all its messages were acknowledged.
        """
        async with self.lock:
            await self._own_shards()
            try:
                if await self.behind_published():
                    await self._send_held()
                    self.publication_ok, self.publication_error = True, None
                    return
                started = time.perf_counter()
                manifests = await asyncio.to_thread(self.service.cut_ready)
                cut_s = time.perf_counter() - started
                self.metrics.observe_cut(manifests, cut_s)
                self.metrics.observe_refusals(
                    len(self.service.refused),
                    self.service.config_problem is not None,
                    self.service.store_problem is not None,
                )
                for manifest in manifests:
                    fields = Manifest.parse(manifest).logged()
                    fields["cut_s"] = round(cut_s, 3)  # of every release of this cut
                    counts = ("published", "suppressed", "groups")
                    figures = ", ".join(f"{fields[k]} {k}" for k in counts if k in fields)
                    log.info(
                        "release %d committed: %s",
                        fields["sequence"],
                        figures,
                        extra={"event": "committed", **fields},
                    )
                if not self.sends_releases():
                    self.publication_ok, self.publication_error = True, None
                    return
                for sequence in await asyncio.to_thread(self.service.pending):
                    started = time.perf_counter()
                    outgoing = await asyncio.to_thread(self.service.outgoing, sequence)
                    await self._send_release(outgoing)
                    self.manifests_sequence = max(self.manifests_sequence or 0, sequence)
                    await asyncio.to_thread(self.service.mark_published, sequence)
                    kill_point("marked")
                    send_s = time.perf_counter() - started
                    self.metrics.observe_publish(sequence, send_s)
                    log.info(
                        "release %d sent: %d messages",
                        sequence,
                        len(outgoing),
                        extra={
                            "event": "sent",
                            "sequence": sequence,
                            "messages": len(outgoing),
                            "send_s": round(send_s, 3),
                        },
                    )
                await self._send_statuses()
                await self._send_held()
                self.publication_ok, self.publication_error = True, None
            except Exception as exc:
                self.publication_ok, self.publication_error = False, describe_failure(exc)
                self.metrics.observe_publication_failure()
                log.error(  # the type alone of anything but Redis or Kafka: a message of a
                    # mechanism's check can quote a value of the data; the traceback of a
                    # failure of this program, its messages withheld (stream.logs)
                    "publication failed, will retry: %s",
                    self.publication_error,
                    exc_info=unexpected(exc),
                    extra={"event": "publication_failed", "error": type(exc).__name__},
                )

    async def behind_published(self) -> bool:
        """Whether the history store is behind the releases already on ``topics.manifests``
        (lock held); if so the cut is held: the release due is named in ``store_problem``
        (``/health``), logged (``store_regressed``) and counted (``sr_store_regressed``).

        The topic is read once per process (its end only); then the releases this worker
        sends raise the mark. Raises what reading the topic raises (the publication fails and
        is tried again; nothing is cut before the topic was read)."""
        if self.manifests_sequence is None:
            self.manifests_sequence = await last_manifest_sequence(self.settings.kafka)
        committed = await asyncio.to_thread(self.service.last_sequence)
        if committed >= self.manifests_sequence:
            return False
        label, rows = await asyncio.to_thread(self.service.next_release)
        topic = self.settings.kafka.topics.manifests
        reason = published_ahead_message(topic, self.manifests_sequence, committed)
        self.service.hold_for_store(label, rows, StoreRegressed(reason))
        self.metrics.observe_refusals(0, False, True)
        return True

    async def _send_held(self) -> None:
        """The status message of the release the store holds (once per label and reason per
        process), so that ``publish --wait`` answers instead of waiting out its timeout."""
        problem = self.service.store_problem
        if problem is None or not problem.release or not self.sends_releases():
            return
        key = (problem.release, problem.error)
        if key in self.held_notified:
            return
        notice = held_notice(problem)
        await self._send(self.service.status_messages([notice.model_dump_json().encode("utf-8")]))
        self.held_notified.add(key)

    async def _send_statuses(self) -> None:
        """Send the status messages committed with refusals (the outbox, then trim it), and
        one for each release newly blocked by its rejected records (each label once per
        process: again after a restart, which a consumer keyed by label does not mind)."""
        outbox = await asyncio.to_thread(self.service.status_outbox)
        if outbox:
            await self._send(self.service.status_messages(outbox))
            await asyncio.to_thread(self.service.status_sent, len(outbox))
        blocked = await asyncio.to_thread(self.service.blocked)
        fresh = [status for status in blocked if _blocked_key(status) not in self.notified]
        if not fresh:
            return
        notices = [blocked_notice(status) for status in fresh]
        values = [notice.model_dump_json().encode("utf-8") for notice in notices]
        await self._send(self.service.status_messages(values))
        self.notified.update(_blocked_key(status) for status in fresh)
        for notice in notices:
            log.error(
                "release %r blocked: %s; %s",
                notice.release,
                notice.reason,
                notice.fix,
                extra={
                    "event": "release_blocked",
                    "release": notice.release,
                    "sealed": notice.sealed,
                    "staged": notice.staged,
                    "rejected": notice.rejected,
                },
            )

    async def restore_metrics(self) -> None:
        """The release gauges as the committed state has them (at start)."""
        manifest, published = await asyncio.to_thread(self.service.last_state)
        self.metrics.observe_restored(manifest, published)

    async def refresh_metrics(self) -> None:
        """The scrape-time metrics: consumer lag (seals: Faust's monitor; records: the records
        consumer) and waiting seals (Redis)."""
        monitor = self.app.monitor
        committed = {**monitor.tp_committed_offsets}
        ends = {**monitor.tp_end_offsets}
        if self.records is not None:
            committed.update(self.records.committed)
            ends.update(self.records.end_offsets)
        self.metrics.observe_lag(committed, ends)
        waiting = await asyncio.wait_for(asyncio.to_thread(self.service.waiting), PROBE_TIMEOUT_S)
        self.metrics.observe_waiting(waiting)

    async def health(self) -> tuple[int, dict[str, Any]]:
        """``/health``: Redis answers PING, the last publication succeeded, the published
        sequence, a release the configuration cannot make (:func:`~stream_release.stream.
        observability.health_payload`)."""

        def probe() -> tuple[bool, int | None, list[ReleaseStatus]]:
            if not self.service.redis_answers():
                return False, None, []
            return True, self.service.published(), self.service.blocked()

        try:
            redis_ok, published, blocked = await asyncio.wait_for(
                asyncio.to_thread(probe), PROBE_TIMEOUT_S
            )
        except Exception as exc:  # Redis away or too slow; a failure of ours is logged too
            _log_probe_bug("Redis", exc)
            redis_ok, published, blocked = False, None, []
        kafka_problem = await self.kafka_problem()
        problem, store = self.service.config_problem, self.service.store_problem
        refusal = self.service.last_refusal
        return health_payload(
            redis_ok=redis_ok,
            published=published,
            publication_ok=self.publication_ok,
            publication_error=self.publication_error,
            config_error=None if problem is None else problem._asdict(),
            store_error=None if store is None else store._asdict(),
            kafka_error=kafka_problem,
            refused=None if refusal is None else refusal.model_dump(),
            blocked=[blocked_notice(status).model_dump() for status in blocked],
            horizon=self.horizon,
        )

    async def kafka_problem(self) -> str | None:
        """``None`` when a broker of ``kafka.bootstrap`` accepts a connection and this
        worker's login within :data:`PROBE_TIMEOUT_S`, else why not."""
        kafka = self.settings.kafka
        try:
            cause = await asyncio.wait_for(connection_problem(kafka), PROBE_TIMEOUT_S)
        except TimeoutError:
            return f"no answer from {kafka.bootstrap} within {PROBE_TIMEOUT_S:g} s"
        except Exception as exc:  # a probe that fails otherwise still answers /health
            _log_probe_bug("Kafka", exc)
            return f"cannot probe {kafka.bootstrap}: {type(exc).__name__}"
        return None if cause is None else str(kafka_error(kafka, "connect", cause))

    async def _reject(
        self, messages: Sequence[Incoming], rejected: Sequence[Rejected | None]
    ) -> None:
        refused = [r for r in rejected if r is not None]
        if not refused:
            return
        keys = {(m.topic, m.partition, m.offset): m.key for m in messages}

        def key(r: Rejected) -> bytes | None:  # the service's carry their (redacted) key
            return r.key if isinstance(r, SentRejected) else keys[(r.topic, r.partition, r.offset)]

        topic = self.settings.kafka.topics.rejected
        await self._send(
            [Outgoing(topic, key(r), r.model_dump_json().encode("utf-8")) for r in refused]
        )
        log.info(
            "%d messages rejected",
            len(refused),
            extra={"event": "rejected", "rejected": len(refused)},
        )

    async def _send_release(self, outgoing: Sequence[Outgoing]) -> None:
        """Send a release in one transaction (``kafka.transactions``): its group messages (in
        two halves), then, once the broker has acknowledged every group, its manifest (the
        last of ``outgoing``), so a consumer that sees a manifest has every group of its
        release before it; a ``read_committed`` consumer sees all of it or none."""
        if self.releases is None:
            raise RuntimeError("the release producer is not set (create_app sets it)")
        groups, manifest = outgoing[:-1], outgoing[-1:]
        half = len(groups) // 2
        async with self.releases.transaction():
            await self._send(groups[:half])
            kill_point("groups_partial")
            await self._send(groups[half:])
            kill_point("groups_sent")
            await self._send(manifest)
        kill_point("manifest_sent")

    async def _send(self, messages: Sequence[Outgoing]) -> None:
        """Send ``messages`` in order and wait until the broker acknowledged every one."""
        if self.releases is None:
            raise RuntimeError("the release producer is not set (create_app sets it)")
        await self.releases.send(messages)

    async def _locked(self, call: Callable[[A], T], argument: A) -> tuple[T, float]:
        """``call(argument)`` in a thread, holding the lock; with the seconds the call took."""
        async with self.lock:
            started = time.perf_counter()
            result = await asyncio.to_thread(call, argument)
            return result, time.perf_counter() - started

    async def _until_done(self, action: str, attempt: Callable[[], Awaitable[T]]) -> T:
        """``await attempt()`` until it succeeds: a batch is never skipped, so its offsets are
        never committed before it is staged and its rejections are sent.

        A failure of Redis or the broker is logged and tried again
        (:func:`~stream_release.stream.retry.until_done`: pauses growing up to
        ``service.retry_interval_s``); any other is a bug, handed to :attr:`on_bug`, which
        ends the process without committing the batch.
        """

        def retrying(exc: BaseException) -> None:
            log.error(
                "cannot %s, retrying: %s",
                action,
                describe_failure(exc),
                extra={"event": "retrying", "action": action, "error": type(exc).__name__},
            )

        try:
            return await until_done(
                attempt, longest_wait_s=self.settings.service.retry_interval_s, on_retry=retrying
            )
        except Exception as exc:  # not a dependency's failure: trying again would not help
            self.on_bug(action, exc)


def _incoming(event: EventT[bytes]) -> Incoming:
    message = event.message
    return Incoming(
        message.topic, message.partition, message.offset, message.key, message.value or b""
    )


def _log_probe_bug(probe: str, exc: BaseException) -> None:
    """Log a ``/health`` probe's failure that is not its dependency's, with its traceback."""
    if unexpected(exc) is not None:
        log.error(
            "the %s probe of /health failed: %s",
            probe,
            describe_failure(exc),
            exc_info=exc,
            extra={"event": "probe_failed", "error": type(exc).__name__},
        )


def _blocked_key(status: ReleaseStatus) -> tuple[str, int, int]:
    return status.label, status.staged, status.rejected
