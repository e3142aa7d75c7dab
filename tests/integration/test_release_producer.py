"""The worker's release producer on the real broker when another producer takes its
transactional id (issue 26, item 7): on shards the id goes with shard 0, and the next
sender's producer fences the previous one's (``stream/release_producer.py``, "Fencing").

A fenced producer's transaction fails with the broker's ``ProducerFenced``, not with the
``AssertionError`` aiokafka raises when asked to abort a transaction it has put in its fatal
state; the next transaction runs on a new producer, which fences the other one in turn. A
producer stopped by :meth:`ReleaseProducer.end_transactions` (shard 0 revoked) starts a new
one for its next transaction, however often the id changed hands meanwhile.
"""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import ProducerFenced
from aiokafka.producer.transaction_manager import TransactionState
from support.kafka_topics import read_topic

from stream_release.config import KafkaSettings
from stream_release.stream.kafka import transactional_options
from stream_release.stream.release_producer import ReleaseProducer, transaction_state
from stream_release.stream.service import Outgoing

pytestmark = pytest.mark.integration


async def _send(producer: ReleaseProducer, kafka: KafkaSettings, value: bytes) -> None:
    """``value`` on the manifests topic, in a transaction of its own."""
    async with producer.transaction():
        await producer.send([Outgoing(kafka.topics.manifests, b"k", value)])


async def _take_the_id(kafka: KafkaSettings) -> None:
    """Start and stop another producer under the same transactional id (another worker
    taking shard 0): its ``init_transactions`` fences every earlier producer of the id."""
    other = AIOKafkaProducer(**transactional_options(kafka))
    await other.start()
    await other.stop()


def test_a_fenced_transaction_fails_with_the_fencing_and_the_next_one_succeeds(
    release_kafka: KafkaSettings, loop: asyncio.Runner
) -> None:
    releases = ReleaseProducer(release_kafka)

    async def scenario() -> None:
        try:
            await _send(releases, release_kafka, b"1")
            started = releases.producer
            assert started is not None and transaction_state(started) is TransactionState.READY
            await _take_the_id(release_kafka)
            with pytest.raises(ProducerFenced):  # was: AssertionError, from the abort
                await _send(releases, release_kafka, b"2")
            assert releases.producer is None  # dropped: a fenced producer cannot go on
            await _send(releases, release_kafka, b"3")  # a new producer fences the other
        finally:
            await releases.stop()

    loop.run(scenario())
    committed = read_topic(release_kafka.bootstrap, release_kafka.topics.manifests)
    assert [m.value for m in committed] == [b"1", b"3"]


def test_a_producer_let_go_of_its_id_starts_a_new_one(
    release_kafka: KafkaSettings, loop: asyncio.Runner
) -> None:
    releases = ReleaseProducer(release_kafka)

    async def scenario() -> None:
        try:
            await _send(releases, release_kafka, b"1")
            await releases.end_transactions()  # shard 0 revoked
            assert releases.producer is None
            await _take_the_id(release_kafka)  # the next sender's
            await _send(releases, release_kafka, b"2")  # shard 0 back: no failure at all
        finally:
            await releases.stop()

    loop.run(scenario())
    committed = read_topic(release_kafka.bootstrap, release_kafka.topics.manifests)
    assert [m.value for m in committed] == [b"1", b"2"]
