"""The worker's consumer of ``topics.records``: batches straight from aiokafka.

Snapshot records are the one high-volume input (a release is tens of thousands to millions of
them), so they bypass Faust's per-event stream, which tops out near 14,000 events/s on the
machines we measured even with an empty agent body (``benchmarks/service.py`` notes). This
:class:`mode.Service`, started and stopped with the Faust app, reads them with
``AIOKafkaConsumer.getmany`` in batches of up to ``service.batch_records`` (waiting at most
``service.batch_window_s``), prepares each (:meth:`ServiceRunner.prepare_records`: decode,
validate, pseudonymise) while the previous batch is being staged, then stages it
(:meth:`ServiceRunner.stage_records`; batches are staged one at a time, in order) and commits
its offsets only after that returned, i.e. after the rows are staged in Redis and the
rejections acknowledged by the broker. Offsets are never committed ahead of
staging; a batch whose offsets could not be committed (a rebalance moved its partition, the
broker was away) is simply consumed again later, which staging makes harmless (a re-delivered
record changes nothing).

The consumer joins its own group, ``kafka.records_group_id`` (``kafka.group_id + "-records"``): a
plain aiokafka group cannot share the Faust group's assignor protocol.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any, Protocol

import mode
from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition

from stream_release.config import Settings
from stream_release.faults import kill_point
from stream_release.stream.intake import Incoming, PreparedBatch
from stream_release.stream.kafka import CLIENT_ERRORS, client_options
from stream_release.stream.peers import configuration_tag, tagged_assignor
from stream_release.stream.retry import until_done


class RecordStager(Protocol):
    """What the consumer needs of the service (:class:`~stream_release.stream.app.
    ServiceRunner` is one): prepare a batch without the service's lock, then stage it."""

    async def prepare_records(self, messages: list[Incoming]) -> PreparedBatch: ...

    async def stage_records(self, batch: PreparedBatch) -> None: ...

    async def assigned(self, partitions: set[int]) -> None: ...

    async def revoked(self, partitions: set[int]) -> None: ...


log = logging.getLogger(__name__)


FETCH_BYTES = 8 << 20
"""Bytes fetched per partition per request (aiokafka's default, 1 MiB, holds only a few
thousand records: a batch would wait for several round trips)."""


def consumer_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments of the records consumer's ``AIOKafkaConsumer``: the client options,
    its group, manual commits, earliest offset for a new group, the group timeouts of
    ``settings.service`` and the assignor that shows the configuration's tag."""
    kafka, conf = settings.kafka, settings.service
    return {
        **client_options(kafka),
        "group_id": kafka.records_group_id,
        "enable_auto_commit": False,
        "auto_offset_reset": "earliest",
        "session_timeout_ms": int(conf.session_timeout_s * 1000),
        "heartbeat_interval_ms": int(conf.heartbeat_interval_s * 1000),
        "rebalance_timeout_ms": int(conf.rebalance_timeout_s * 1000),
        "max_partition_fetch_bytes": max(kafka.max_message_bytes, FETCH_BYTES),
        # the group's members show their configuration's tag (stream_release.stream.peers)
        "partition_assignment_strategy": (tagged_assignor(configuration_tag(settings)),),
    }


class RecordConsumer(mode.Service):
    """Consumes ``topics.records`` in batches and stages them through ``runner``."""

    def __init__(self, runner: RecordStager, settings: Settings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runner = runner
        self.settings = settings
        self.consumer: AIOKafkaConsumer | None = None
        self.committed: dict[TopicPartition, int] = {}
        """The offsets this consumer committed, by partition (consumer-lag metric)."""
        self._staging: asyncio.Future[None] | None = None
        """The batch being staged (then committed), if any."""

    @property
    def end_offsets(self) -> Mapping[TopicPartition, int]:
        """The end offset of each assigned partition as of the last fetch."""
        consumer = self.consumer
        if consumer is None:
            return {}
        ends = {tp: consumer.highwater(tp) for tp in consumer.assignment()}
        return {tp: end for tp, end in ends.items() if end is not None}

    async def on_stop(self) -> None:
        if self._staging is not None and not self._staging.done():
            # its offsets stay uncommitted: the batch is consumed again after a restart
            self._staging.cancel()
        if self.consumer is not None:
            await self.consumer.stop()
            self.consumer = None

    @mode.Service.task
    async def _consume(self) -> None:
        consumer = await self._connect()
        window_ms = int(self.settings.service.batch_window_s * 1000)
        limit = self.settings.service.batch_records
        while not self.should_stop:
            batch = await consumer.getmany(timeout_ms=window_ms, max_records=limit)
            if not batch:
                continue
            offsets = {tp: records[-1].offset + 1 for tp, records in batch.items()}
            prepared = await self.runner.prepare_records(
                [
                    Incoming(r.topic, r.partition, r.offset, r.key, r.value or b"")
                    for records in batch.values()
                    for r in records
                ]
            )
            # batches are staged one at a time and in order; this one was prepared while the
            # previous one was being staged
            if self._staging is not None:
                await self._staging
            self._staging = asyncio.ensure_future(self._stage(prepared, offsets))

    async def _stage(self, prepared: PreparedBatch, offsets: dict[TopicPartition, int]) -> None:
        """Stage a batch (retried until Redis takes it), then commit its offsets."""
        await self.runner.stage_records(prepared)
        kill_point("staged_uncommitted")
        await self._commit(offsets)

    async def _connect(self) -> AIOKafkaConsumer:
        """A started consumer subscribed to ``topics.records``; retried until the broker
        answers (:func:`~stream_release.stream.retry.until_done`: pauses growing up to
        ``service.retry_interval_s``)."""
        topic = self.settings.kafka.topics.records

        async def start() -> AIOKafkaConsumer:
            consumer = AIOKafkaConsumer(**consumer_options(self.settings))
            consumer.subscribe([topic], listener=_Assignments(self.runner))
            try:
                await consumer.start()
            except CLIENT_ERRORS:
                await consumer.stop()
                raise
            return consumer

        def retrying(exc: BaseException) -> None:
            log.error("cannot start the consumer of %s, retrying: %s", topic, exc)

        self.consumer = await until_done(
            start,
            longest_wait_s=self.settings.service.retry_interval_s,
            on_retry=retrying,
            retry_if=lambda exc: isinstance(exc, CLIENT_ERRORS),
        )
        return self.consumer

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit ``offsets``; a failure is logged, not raised: the batch is staged, and if it
        is consumed again its records change nothing."""
        consumer = self.consumer
        if consumer is None:  # stopped meanwhile: the batch is consumed again at the next start
            return
        try:
            await consumer.commit(offsets)
        except CLIENT_ERRORS as exc:
            log.warning("offsets not committed (the batch may be consumed again): %s", exc)
            return
        self.committed.update(offsets)


class _Assignments(ConsumerRebalanceListener):  # type: ignore[misc]
    """Tells the runner which partitions of ``topics.records`` the group gave this worker."""

    def __init__(self, runner: RecordStager) -> None:
        self.runner = runner

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        """Staging is in Redis and offsets are committed per batch: the runner only stops
        cutting these shards (after the step in flight)."""
        await self.runner.revoked({tp.partition for tp in revoked})

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        await self.runner.assigned({tp.partition for tp in assigned})
