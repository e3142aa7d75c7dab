"""The release producer's transaction timeout (``kafka.transaction_timeout_ms``) on a real
Apache Kafka: the default, the broker's own ceiling, is accepted; one above it is refused at
the start, in one line that names the setting."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaProducer

from stream_release.config import KafkaSettings, Settings
from stream_release.errors import KafkaError
from stream_release.stream.access import check_access
from stream_release.stream.kafka import transactional_options

BROKER_CEILING_MS = 900_000
"""Apache Kafka's default ``transaction.max.timeout.ms`` (the tests' broker keeps it)."""


def _settings(release_kafka: KafkaSettings, timeout_ms: int | None = None) -> Settings:
    kafka = release_kafka.model_dump()
    if timeout_ms is not None:
        kafka["transaction_timeout_ms"] = timeout_ms
    return Settings(schema={"qid": ["age"]}, kafka=kafka, history={"key": "k" * 32})


def test_the_default_timeout_is_the_broker_ceiling_and_a_transaction_runs_under_it(
    release_kafka: KafkaSettings,
) -> None:
    settings = _settings(release_kafka)
    assert settings.kafka.transaction_timeout_ms == BROKER_CEILING_MS
    asyncio.run(check_access(settings))

    async def one_transaction() -> None:
        producer = AIOKafkaProducer(**transactional_options(settings.kafka))
        await producer.start()
        try:
            assert producer._txn_manager.transaction_timeout_ms == BROKER_CEILING_MS
            async with producer.transaction():
                await producer.send_and_wait(settings.kafka.topics.status, b"x")
        finally:
            await producer.stop()

    asyncio.run(one_transaction())


def test_a_timeout_above_the_broker_ceiling_is_refused_in_one_line(
    release_kafka: KafkaSettings,
) -> None:
    settings = _settings(release_kafka, BROKER_CEILING_MS + 1)
    with pytest.raises(KafkaError) as refused:
        asyncio.run(check_access(settings))
    message = str(refused.value)
    assert "InvalidTransactionTimeout" in message
    assert "kafka.transaction_timeout_ms = 900001" in message
    assert "transaction.max.timeout.ms" in message and "\n" not in message
