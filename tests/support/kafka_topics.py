"""Kafka topics of one test: fresh names, snapshots sent to them as ``stream-release publish``
sends them, and every message of a topic as a consumer reads it."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from stream_release.config import KafkaSettings, TopicSettings, load_settings
from stream_release.io.snapshot_csv import read_snapshot
from stream_release.stream.kafka import ensure_topics
from stream_release.stream.snapshot_sender import send_snapshot


def fresh_topics() -> TopicSettings:
    """Topic names no other test uses: the defaults with a uuid suffix."""
    suffix = uuid.uuid4().hex
    defaults = TopicSettings()
    return TopicSettings(
        **{name: f"{topic}.{suffix}" for name, topic in defaults.model_dump().items()}
    )


def send_snapshots(kafka: KafkaSettings, config: Path, snaps: Sequence[Path]) -> None:
    """Create every topic of ``kafka`` (as the worker makes them: ``kafka.partitions`` for the
    records, one for the others), then send each of ``snaps`` (read with the schema of
    ``config``) as release ``snap.stem``: its records, then its seal."""
    schema = load_settings(config).schema
    raws = [(snap.stem, read_snapshot(snap, schema)) for snap in snaps]

    async def send() -> None:
        await ensure_topics(kafka, kafka.topics.every)
        for label, raw in raws:
            await send_snapshot(kafka, label, raw)

    asyncio.run(send())


def read_topic(
    bootstrap: str, topic: str, timeout: float = 10.0, *, committed: bool = True
) -> list[ConsumerRecord]:
    """Every message in ``topic`` (all partitions, from the start); ``[]`` if it does not exist.

    ``committed``: as a consumer with ``isolation.level = read_committed`` sees it (the
    messages of committed transactions and those sent outside any), up to the last stable
    offsets; else every message written, aborted ones included, up to the high watermarks.
    The ends are those of the first fetch, so it never waits for more messages.
    """
    return asyncio.run(_read_topic(bootstrap, topic, timeout, committed))


async def _read_topic(
    bootstrap: str, topic: str, timeout: float, committed: bool
) -> list[ConsumerRecord]:
    isolation = "read_committed" if committed else "read_uncommitted"
    consumer = AIOKafkaConsumer(
        isolation_level=isolation,
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,
        request_timeout_ms=5000,
    )
    await consumer.start()
    try:
        if topic not in await consumer.topics():  # all-topic metadata: creates nothing
            return []
        # the topic exists, so asking for its partitions creates nothing either; a topic
        # created a moment ago can be listed before its partitions are known: nothing is
        # readable yet, and callers poll again
        known = await _partitions(bootstrap, topic)
        if not known:
            return []
        partitions = [TopicPartition(topic, p) for p in known]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        records: list[ConsumerRecord] = []
        end: dict[TopicPartition, int] = {}
        deadline = time.monotonic() + timeout
        while True:
            for tp in partitions:
                last = consumer.last_stable_offset(tp) if committed else consumer.highwater(tp)
                if tp not in end and last is not None:
                    end[tp] = last
            if len(end) == len(partitions) and all(
                [await consumer.position(tp) >= end[tp] for tp in partitions]
            ):
                return records
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"read {len(records)} messages of {topic!r} but not to its end in {timeout} s"
                )
            batch = await consumer.getmany(*partitions, timeout_ms=100)
            for tp, messages in batch.items():
                records.extend(m for m in messages if tp not in end or m.offset < end[tp])
    finally:
        await consumer.stop()


async def _partitions(bootstrap: str, topic: str) -> list[int]:
    """The partitions of an existing ``topic`` (a consumer's ``topics()`` lists the names
    without adding their partitions to the consumer's own metadata)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        described = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return sorted(
        int(p["partition"])
        for t in described
        if t["topic"] == topic and t["error_code"] == 0
        for p in t["partitions"]
    )
