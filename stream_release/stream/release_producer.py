"""The worker's producer of releases: group lines and manifests, in record batches.

A million-row release is about 200,000 group messages. Faust's producer sends them one
``send`` at a time (tens of microseconds each); this :class:`mode.Service`, started and stopped
with the Faust app, owns an ``AIOKafkaProducer`` (:func:`~stream_release.stream.kafka.
producer_options`: ``acks="all"``, idempotence as ``kafka.idempotent``) and sends them with
:func:`~stream_release.stream.kafka.send_batched`. The producer is started on first use, so a
broker that is down when the worker starts delays publication (retried) instead of the start.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import groupby
from typing import TYPE_CHECKING, Any

import mode
from aiokafka import AIOKafkaProducer

from stream_release.config import KafkaSettings
from stream_release.stream.kafka import producer_options, send_batched

if TYPE_CHECKING:
    from stream_release.stream.service import Outgoing


class ReleaseProducer(mode.Service):
    """Sends :class:`~stream_release.stream.service.Outgoing` messages in record batches."""

    def __init__(self, kafka: KafkaSettings, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kafka = kafka
        self.producer: AIOKafkaProducer | None = None

    async def send(self, messages: Sequence[Outgoing]) -> None:
        """Send ``messages`` (runs of one topic in order) and wait until the broker
        acknowledged every one; raises the client's error otherwise."""
        producer = await self._connected()
        for topic, run in groupby(messages, key=lambda m: m.topic):
            await send_batched(
                producer,
                topic,
                ((m.key, m.value) for m in run),
                max_bytes=self.kafka.max_message_bytes,
            )

    async def _connected(self) -> AIOKafkaProducer:
        if self.producer is None:
            producer = AIOKafkaProducer(**producer_options(self.kafka))
            try:
                await producer.start()
            except BaseException:
                await producer.stop()
                raise
            self.producer = producer
        return self.producer

    async def on_stop(self) -> None:
        if self.producer is not None:
            await self.producer.stop()
            self.producer = None
