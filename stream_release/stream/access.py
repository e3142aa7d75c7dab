"""What the worker checks of its Kafka user before it starts: that the broker lets it do its job.

A missing ACL does not fail loudly once the worker runs: a consumer whose group is refused
waits forever for partitions (Faust's consumer never surfaces the error), and a refused topic
or transactional id fails each publication, to be retried. So the worker asks first, with its
own credentials, and a refusal ends the start with one line naming what to grant
(:func:`~stream_release.stream.kafka.kafka_error`).

:func:`check_access` checks, after :func:`~stream_release.stream.kafka.ensure_topics` (which
needs Describe, and Create for missing topics):

- Read on both consumer groups (``kafka.group_id`` and ``group_id + "-records"``): a
  heartbeat of a member that does not exist (:func:`_probe_read`; finding the coordinator needs
  Describe);
- Read on ``topics.records`` and ``topics.control``: one fetch at the end of each partition,
  with no group;
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
import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka import errors as aiokafka_errors
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.protocol.group import HeartbeatRequest
from tenacity import stop_after_delay

from stream_release.config import KafkaSettings, Settings
from stream_release.errors import NEW_SERIES_CAVEAT, ConfigError
from stream_release.stream.kafka import (
    CLIENT_ERRORS,
    assign_at_end,
    client_options,
    kafka_error,
    topic_partitions,
    transactional_options,
)
from stream_release.stream.peers import configuration_tag, member_tag
from stream_release.stream.retry import until_done

log = logging.getLogger(__name__)

PROBE_MEMBER = "stream-release-access-check"
"""The member id of the Read probe's heartbeat: no such member exists."""
PROBE_GENERATION = -1
REBALANCING = frozenset({"PreparingRebalance", "CompletingRebalance"})
"""Group states whose members' metadata Kafka does not return."""
FETCH_WAIT_MS = 200
"""How long the broker may hold the test fetch (there is nothing to read at the end)."""
RETRY_FOR_S = 30.0
"""How long a retriable answer (the group coordinator not yet available on a new cluster:
Kafka creates its offsets topic on the first request) is asked again."""
RETRY_EVERY_S = 0.5
"""The longest pause between two of those requests; also the period of the wait for a member
with another configuration to leave."""
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
    records = settings.records_group_id
    groups = [settings.group_id, records]
    admin = AIOKafkaAdminClient(**client_options(settings))
    action = f"join the consumer groups {groups}"
    try:
        await admin.start()
        for group in groups:
            await _retrying(partial(_probe_read, admin, group))
        # a member left by this worker's previous run stays until its session times out;
        # a group in a rebalance shows no member's metadata: both are waited for
        action = f"describe the consumer group {records!r}"
        deadline = time.monotonic() + session_timeout_s + PEER_GRACE_S
        while True:
            state, others = await _retrying(partial(_peer_tags, admin, records, tag))
            if not others and state not in REBALANCING:
                return
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(RETRY_EVERY_S)
    except CLIENT_ERRORS as exc:
        raise kafka_error(settings, action, exc) from exc
    finally:
        await admin.close()
    if others:
        raise ConfigError(
            f"consumer group {records!r} (kafka.group_id = {settings.group_id!r}) has a worker "
            "running with another configuration: two configurations in one group would split "
            "the records between them; stop that worker, or give this one its own "
            "kafka.group_id (and history.prefix) for another series (if it publishes the same "
            f"people, {NEW_SERIES_CAVEAT})"
        )
    log.warning(  # still rebalancing: the members' tags could not be read
        "consumer group %r stayed in a rebalance for %.0f s: the configurations of its "
        "members were not compared",
        records,
        session_timeout_s + PEER_GRACE_S,
    )


async def _probe_read(admin: AIOKafkaAdminClient, group: str) -> None:
    """Raise unless this user may Read ``group``: a heartbeat of a member that does not exist.

    Kafka authorizes Read on the group before it looks at the member, so the answer is
    ``GROUP_AUTHORIZATION_FAILED`` without Read and otherwise an error about the member (no
    such member or generation), which changes nothing in the group. (``DescribeGroups`` with
    authorized operations would tell without a probe, but aiokafka decodes its version 3
    answer as version 2 and drops them.)
    """
    node = await admin.find_coordinator(group)  # Describe on the group
    response = await admin._send_request(  # aiokafka's admin has no heartbeat call of its own
        HeartbeatRequest(group, PROBE_GENERATION, PROBE_MEMBER), node
    )
    error = aiokafka_errors.for_code(response.error_code)
    if error is aiokafka_errors.GroupAuthorizationFailedError or error.retriable:
        raise error(f"group {group!r}")


async def _peer_tags(admin: AIOKafkaAdminClient, group: str, tag: bytes) -> tuple[str, set[bytes]]:
    """The state of ``group`` and the configuration tags of its members that are not
    ``tag``."""
    [response] = await admin.describe_consumer_groups([group])
    [entry] = response.groups  # (error, group, state, protocol type, protocol, members)
    if entry[0]:  # e.g. NotCoordinatorForGroup while the coordinator moves: retriable
        raise aiokafka_errors.for_code(entry[0])(f"group {group!r}")
    others = {
        found
        for member in entry[5]
        if (found := member_tag(member[-2])) is not None and found != tag
    }
    return str(entry[2]), others


async def _retrying(attempt: Callable[[], Awaitable[T]]) -> T:
    """``await attempt()``, again while it raises a retriable Kafka error, for up to
    :data:`RETRY_FOR_S` (pauses growing up to :data:`RETRY_EVERY_S`)."""
    return await until_done(
        attempt,
        longest_wait_s=RETRY_EVERY_S,
        retry_if=_retriable,
        stop=stop_after_delay(RETRY_FOR_S),
    )


def _retriable(exc: BaseException) -> bool:
    """Whether ``exc`` is a Kafka error the broker marks retriable."""
    return isinstance(exc, aiokafka_errors.KafkaError) and bool(exc.retriable)


async def _check_reads(settings: KafkaSettings) -> None:
    """Fetch once at the end of each input partition: ``TopicAuthorizationFailed`` without
    Read. Waits until every partition has answered a fetch (its high watermark is known), or
    ``kafka.request_timeout_ms`` passes."""
    topics = [settings.topics.records, settings.topics.control]
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        group_id=None,
        enable_auto_commit=False,
        fetch_max_wait_ms=FETCH_WAIT_MS,
    )
    try:
        partitions = await topic_partitions(settings, topics)
        await consumer.start()
        await assign_at_end(consumer, partitions)
        deadline = time.monotonic() + settings.request_timeout_ms / 1000
        while any(consumer.highwater(tp) is None for tp in partitions):
            if time.monotonic() > deadline:
                raise aiokafka_errors.KafkaTimeoutError(f"no fetch answer from {topics}")
            await consumer.getmany(timeout_ms=2 * FETCH_WAIT_MS)
    except CLIENT_ERRORS as exc:
        raise kafka_error(settings, f"read the topics {topics}", exc) from exc
    finally:
        await consumer.stop()


async def _check_transactional_id(settings: KafkaSettings) -> None:
    producer = AIOKafkaProducer(**transactional_options(settings))
    try:
        await producer.start()
    except CLIENT_ERRORS as exc:
        action = f"use the transactional id {settings.release_transactional_id!r}"
        raise kafka_error(settings, action, exc) from exc
    finally:
        await producer.stop()
