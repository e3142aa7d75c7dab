"""What the worker checks of its Kafka user before it starts: that the broker lets it do its job.

A missing ACL does not fail loudly once the worker runs: a consumer whose group is refused
waits forever for partitions (Faust's consumer never surfaces the error), and a refused topic
or transactional id fails each publication, to be retried. So the worker asks first, with its
own credentials, and a refusal ends the start with one line naming what to grant
(:func:`~stream_release.stream.kafka.kafka_error`).

:func:`check_access` checks, after :func:`~stream_release.stream.kafka.ensure_topics` (which
needs Describe, and Create for missing topics):

- Read on both consumer groups (``kafka.group_id`` and ``group_id + "-records"``): the groups'
  authorized operations (``DescribeGroups``, which needs Describe);
- Read on ``topics.records`` and ``topics.control``: one fetch at their end, with no group;
- Write on the transactional id (``kafka.transactions``): the producer's ``InitProducerId``
  (this fences a predecessor under the same id, as the worker's own start does);
- that no member of the records group runs another configuration
  (:mod:`stream_release.stream.peers`).

Write on the three topics the worker sends to is not checked: Kafka checks it only when a
transaction adds a partition or a message is produced. A refusal there shows as
``publication_failed`` with ``TopicAuthorizationFailedError`` in the log and on ``/health``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka import errors as aiokafka_errors
from aiokafka.admin import AIOKafkaAdminClient

from stream_release.config import KafkaSettings, Settings
from stream_release.errors import ConfigError
from stream_release.stream.kafka import CLIENT_ERRORS, client_options, kafka_error, producer_options
from stream_release.stream.peers import configuration_tag, member_tag
from stream_release.stream.records_consumer import records_group

READ = 3
"""Kafka's ``AclOperation.READ`` code: bit ``1 << READ`` of an authorized-operations field."""
FETCH_WAIT_MS = 200
"""How long the broker may hold the test fetch (there is nothing to read at the end)."""
RETRY_FOR_S = 30.0
"""How long a retriable answer (the group coordinator not yet available on a new cluster:
Kafka creates its offsets topic on the first request) is asked again."""
RETRY_EVERY_S = 0.5
PEER_GRACE_S = 2.0
"""Seconds past the session timeout a member with another configuration may still linger
(a previous run of this worker) before the start is refused."""
T = TypeVar("T")


async def check_access(settings: Settings) -> None:
    """Raise :class:`~stream_release.errors.KafkaError` (one line: what failed and what to
    grant) unless the broker lets the worker's user read its groups and input topics and use
    its transactional id; raise :class:`~stream_release.errors.ConfigError` when the records
    group has a member with another configuration (:mod:`stream_release.stream.peers`)."""
    kafka = settings.kafka
    await _check_groups(kafka, configuration_tag(settings), settings.service.session_timeout_s)
    await _check_reads(kafka)
    if kafka.release_transactional_id is not None:
        await _check_transactional_id(kafka)


async def _check_groups(settings: KafkaSettings, tag: bytes, session_timeout_s: float) -> None:
    records = records_group(settings)
    groups = [settings.group_id, records]
    admin = AIOKafkaAdminClient(**client_options(settings))
    action = f"describe the consumer groups {groups}"
    try:
        await admin.start()
        for group in groups:
            response = await _retrying(partial(_describe_group, admin, group))
            for entry in response.groups:
                operations = entry[-1]
                # an int from v3 on; INT32_MIN when the broker did not compute it
                if isinstance(operations, int) and operations >= 0 and not operations & (1 << READ):
                    raise aiokafka_errors.GroupAuthorizationFailedError(
                        f"no Read on group {group!r}"
                    )
        # a member left by this worker's previous run stays until its session times out
        deadline = time.monotonic() + session_timeout_s + PEER_GRACE_S
        while _other_tags(response, tag):
            if time.monotonic() > deadline:
                raise ConfigError(
                    f"consumer group {records!r} (kafka.group_id = {settings.group_id!r}) has a "
                    "worker running with another configuration: two configurations in one group "
                    "would split the records between them; stop that worker, or give this one "
                    "its own kafka.group_id (and history.prefix) for another series"
                )
            await asyncio.sleep(RETRY_EVERY_S)
            response = await _retrying(partial(_describe_group, admin, records))
    except CLIENT_ERRORS as exc:
        raise kafka_error(settings, action, exc) from exc
    finally:
        await admin.close()


def _other_tags(response: Any, tag: bytes) -> set[bytes]:
    """The configuration tags of the described group's members that differ from ``tag``."""
    return {
        found
        for entry in response.groups
        for member in entry[5]
        if (found := member_tag(member[-2])) is not None and found != tag
    }


async def _describe_group(admin: AIOKafkaAdminClient, group: str) -> Any:
    """The ``DescribeGroups`` response for ``group``, with its authorized operations when the
    broker has them."""
    try:
        [response] = await admin.describe_consumer_groups(
            [group], include_authorized_operations=True
        )
    except aiokafka_errors.IncompatibleBrokerVersion:  # before Kafka 2.3: no such field
        [response] = await admin.describe_consumer_groups([group])
    for entry in response.groups:
        if entry[0]:  # e.g. NotCoordinatorForGroup while the coordinator moves: retriable
            raise aiokafka_errors.for_code(entry[0])(f"group {group!r}")
    return response


async def _retrying(attempt: Callable[[], Awaitable[T]]) -> T:
    """``await attempt()``, again while it raises a retriable Kafka error, for up to
    :data:`RETRY_FOR_S`."""
    deadline = time.monotonic() + RETRY_FOR_S
    while True:
        try:
            return await attempt()
        except aiokafka_errors.KafkaError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
        await asyncio.sleep(RETRY_EVERY_S)


async def _check_reads(settings: KafkaSettings) -> None:
    topics = [settings.topics.records, settings.topics.control]
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=FETCH_WAIT_MS,
    )
    try:
        await consumer.start()
        partitions = [
            TopicPartition(topic, partition)
            for topic in topics
            for partition in sorted(consumer.partitions_for_topic(topic) or {0})
        ]
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        await consumer.getmany(timeout_ms=2 * FETCH_WAIT_MS)
    except CLIENT_ERRORS as exc:
        raise kafka_error(settings, f"read the topics {topics}", exc) from exc
    finally:
        await consumer.stop()


async def _check_transactional_id(settings: KafkaSettings) -> None:
    producer = AIOKafkaProducer(
        **producer_options(settings), transactional_id=settings.release_transactional_id
    )
    try:
        await producer.start()
    except CLIENT_ERRORS as exc:
        action = f"use the transactional id {settings.release_transactional_id!r}"
        raise kafka_error(settings, action, exc) from exc
    finally:
        await producer.stop()
