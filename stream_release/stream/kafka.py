"""aiokafka clients configured from :class:`~stream_release.config.KafkaSettings`.

:func:`client_options` maps our settings to the keyword arguments every aiokafka client takes
(``AIOKafkaProducer``, ``AIOKafkaConsumer``, ``AIOKafkaAdminClient``); :func:`producer_options`
adds the producer's delivery settings. :func:`ensure_topics` creates missing topics.
:func:`send_batched` sends many messages through aiokafka's batch API.

Every failure of the Kafka client (unreachable bootstrap, refused credentials, timeout, a
broker error code) is raised as :class:`~stream_release.errors.KafkaError` by
:func:`kafka_error`: one line naming the bootstrap address, what failed and the fix
(STYLE.md rule 8). Passwords never appear in a message or a ``repr``.

Notes
-----
The local Kafka-protocol broker of the tests and the demo (Tansu) does not implement the
idempotent producer: ``InitProducerId`` answers ``UnknownError``. Settings for it must say
``idempotent = false``; the error message says so.
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from array import array
from collections.abc import Iterable
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka import errors as aiokafka_errors
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.conn import collect_hosts, create_conn
from aiokafka.helpers import create_ssl_context
from aiokafka.partitioner import DefaultPartitioner

from stream_release.config import KafkaSettings
from stream_release.errors import ConfigError, InvalidParameter, KafkaError

CLIENT_ERRORS: tuple[type[BaseException], ...] = (aiokafka_errors.KafkaError, OSError)
"""What an aiokafka call raises when the cluster fails (``TimeoutError`` is an ``OSError``)."""

_CONNECT_ERRORS: tuple[type[BaseException], ...] = (*CLIENT_ERRORS, KeyError)
"""What a connection attempt raises: a ``KeyError`` is a SCRAM reply without ``'v'``."""

_BOOTSTRAP_FIX = (
    "check that kafka.bootstrap (SR_KAFKA_BOOTSTRAP) names a running broker reachable from here"
)
_AUTH_FIX = (
    "check kafka.security_protocol, sasl_mechanism, sasl_username and sasl_password "
    "(SR_KAFKA_SASL_*)"
)
_IDEMPOTENT_FIX = (
    "if the broker does not support idempotent producers or transactions (the demo's Tansu "
    "broker does not), set kafka.idempotent = false and kafka.transactions = false "
    "(SR_KAFKA_IDEMPOTENT=false, SR_KAFKA_TRANSACTIONS=false)"
)


def quiet_client_logs() -> None:
    """Keep aiokafka's own log lines off stderr until logging is configured.

    aiokafka logs each failed attempt (``Unable connect to ...``); with no handler configured
    Python prints them on stderr, beside the one line of :class:`KafkaError` that ends a
    command. A :class:`logging.NullHandler` on the ``aiokafka`` logger stops that fallback;
    its records still reach the root logger's handlers once a worker configures them.
    """
    logger = logging.getLogger("aiokafka")
    if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())


def client_options(settings: KafkaSettings) -> dict[str, Any]:
    """Keyword arguments of any aiokafka client for ``settings``.

    Always ``bootstrap_servers``, ``client_id``, ``request_timeout_ms`` and
    ``security_protocol``; for ``SASL_*`` protocols also ``sasl_mechanism`` (default
    ``PLAIN``), ``sasl_plain_username`` and ``sasl_plain_password`` (the secret's value); for
    ``SSL`` and ``SASL_SSL`` an ``ssl_context`` verifying the broker against ``ssl_cafile``
    (else the system's CAs) and presenting ``ssl_certfile``/``ssl_keyfile`` when given.

    Raises
    ------
    ConfigError
        An SSL file cannot be loaded (names the setting and the file).
    """
    options: dict[str, Any] = {
        "bootstrap_servers": settings.bootstrap,
        "client_id": settings.client_id,
        "request_timeout_ms": settings.request_timeout_ms,
        "security_protocol": settings.security_protocol,
    }
    if settings.security_protocol.startswith("SASL_"):
        password = settings.sasl_password
        options["sasl_mechanism"] = settings.sasl_mechanism or "PLAIN"
        options["sasl_plain_username"] = settings.sasl_username
        options["sasl_plain_password"] = None if password is None else password.get_secret_value()
    if settings.security_protocol.endswith("SSL"):
        options["ssl_context"] = _ssl_context(settings)
    return options


def producer_options(settings: KafkaSettings) -> dict[str, Any]:
    """:func:`client_options` plus the producer's: every write acknowledged by all in-sync
    replicas (``acks="all"``), idempotence as ``settings.idempotent``, and requests up to
    ``settings.max_message_bytes``."""
    return {
        **client_options(settings),
        "acks": "all",
        "enable_idempotence": settings.idempotent,
        "max_request_size": settings.max_message_bytes,
        "max_batch_size": min(settings.max_message_bytes, BATCH_BYTES),
    }


def transactional_options(settings: KafkaSettings) -> dict[str, Any]:
    """:func:`producer_options` of the worker's release producer: its transactional id
    (``None`` without ``settings.transactions``) and its transaction timeout."""
    return {
        **producer_options(settings),
        "transactional_id": settings.release_transactional_id,
        "transaction_timeout_ms": settings.transaction_timeout_ms,
    }


BATCH_BYTES = 1 << 20
"""Largest record batch the producer builds (aiokafka's default, 16 KiB, holds about a hundred
group lines: a million-row release would need two thousand requests)."""


async def send_batched(
    producer: AIOKafkaProducer,
    topic: str,
    messages: Iterable[tuple[bytes | None, bytes]],
    *,
    max_bytes: int,
) -> array[int]:
    """Send ``(key, value)`` messages to ``topic`` and wait until the broker acknowledged every
    one; returns the partition each was sent to, in order (its length: how many were sent).

    Each message goes to the partition aiokafka's default partitioner gives its key (murmur2,
    as :meth:`AIOKafkaProducer.send` would; a random one for ``None``), in order within its
    partition, in as few record batches as fit (``create_batch`` / ``send_batch``): a few
    microseconds per message instead of the tens ``send`` costs. aiokafka keeps at most one
    batch per partition in flight, so the order holds across batches.

    Raises
    ------
    aiokafka.errors.MessageSizeTooLargeError
        A message's key and value exceed ``max_bytes`` (``kafka.max_message_bytes``, the
        producer's ``max_request_size``, which ``send`` would enforce); the messages before it
        may have been sent.
    aiokafka.errors.KafkaError
        A batch was refused or timed out (:data:`CLIENT_ERRORS`; the caller maps it with
        :func:`kafka_error`). Batches sent before it may have been written.
    """
    partitions = sorted(await producer.partitions_for(topic))
    place = DefaultPartitioner()
    batches: dict[int, Any] = {}
    deliveries: list[asyncio.Future[Any]] = []
    placed = array("i")
    for key, value in messages:
        if len(value) + (0 if key is None else len(key)) > max_bytes:
            raise aiokafka_errors.MessageSizeTooLargeError(
                f"a message of {len(value)} bytes is larger than {max_bytes} bytes"
            )
        partition = partitions[0] if len(partitions) == 1 else place(key, partitions, partitions)
        batch = batches.get(partition)
        if batch is None:
            batch = batches[partition] = producer.create_batch()
        if batch.append(key=key, value=value, timestamp=None) is None:
            batch.close()
            deliveries.append(await producer.send_batch(batch, topic, partition=partition))
            batch = batches[partition] = producer.create_batch()
            if batch.append(key=key, value=value, timestamp=None) is None:
                raise aiokafka_errors.MessageSizeTooLargeError(
                    f"a message of {len(value)} bytes does not fit in a record batch"
                )
        placed.append(partition)
    for partition, batch in batches.items():
        batch.close()
        deliveries.append(await producer.send_batch(batch, topic, partition=partition))
    outcomes = await asyncio.gather(*deliveries, return_exceptions=True)
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return placed


TOPIC_METADATA_WAIT_S = 5.0
"""How long :func:`topic_partitions` waits for a topic just created to show in the metadata."""


async def topic_partitions(settings: KafkaSettings, topics: list[str]) -> list[TopicPartition]:
    """Every partition of ``topics`` (a consumer's ``topics()`` lists the names without adding
    their partitions to its own metadata, so they are described here), waiting up to
    :data:`TOPIC_METADATA_WAIT_S` for a topic to appear.

    Raises
    ------
    aiokafka.errors.UnknownTopicOrPartitionError
        A topic does not exist (or this user may not describe it).
    aiokafka.errors.KafkaError
        The cluster is unreachable or refuses (:data:`CLIENT_ERRORS`).
    """
    admin = AIOKafkaAdminClient(**client_options(settings))
    deadline = time.monotonic() + TOPIC_METADATA_WAIT_S
    try:
        await admin.start()
        while True:
            described = {t["topic"]: t for t in await admin.describe_topics(topics)}
            missing = [
                topic
                for topic in topics
                if topic not in described
                or described[topic]["error_code"]
                or not described[topic]["partitions"]
            ]
            if not missing:
                break
            if time.monotonic() > deadline:
                code = next(
                    (described[t]["error_code"] for t in missing if t in described), 3
                )  # 3: UNKNOWN_TOPIC_OR_PARTITION
                raise aiokafka_errors.for_code(code or 3)(f"topics {missing}")
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
    return [
        TopicPartition(topic, int(p["partition"]))
        for topic in topics
        for p in sorted(described[topic]["partitions"], key=lambda p: int(p["partition"]))
    ]


def _partitions_of(settings: KafkaSettings, topic: str, partitions: int | None) -> int:
    if partitions is not None:
        return partitions
    return settings.partitions if topic == settings.topics.records else 1


async def check_records_partitions(settings: KafkaSettings) -> int:
    """The partition count of ``topics.records``, which must be ``settings.partitions``.

    Raises
    ------
    ConfigError
        The topic has another number of partitions: the shards (and the histories they hold)
        are fixed for a series.
    aiokafka.errors.KafkaError
        As :func:`topic_partitions`.
    """
    topic = settings.topics.records
    found = len(await topic_partitions(settings, [topic]))
    if found != settings.partitions:
        raise ConfigError(
            f"kafka.partitions = {settings.partitions}, but the topic {topic!r} has {found} "
            f"partitions: set kafka.partitions = {found} (SR_KAFKA_PARTITIONS={found}). The "
            "partitions are the shards that hold each individual's history, fixed for a series "
            "(docs/scale-out.md)"
        )
    return found


TAIL_OFFSETS = 16
"""Offsets :func:`last_manifest_sequence` reads back from a partition's end at first (each
release is a manifest and a transaction marker there), widened fourfold while it holds none."""


async def last_manifest_sequence(settings: KafkaSettings) -> int:
    """The highest ``sequence`` of the manifests committed to ``topics.manifests`` (0: none).

    Reads only the end of each partition, as a ``read_committed`` consumer: its last stable
    offset, then the last :data:`TAIL_OFFSETS` offsets before it (the window widened while it
    holds no manifest: transaction markers and aborted messages take offsets too), never the
    whole topic. Manifests are sent in sequence order, so the last one holds the highest;
    a message that is not a manifest (no integer ``sequence``) is skipped.

    Raises
    ------
    aiokafka.errors.KafkaError
        The cluster is unreachable, refuses, or the read did not reach the end within
        ``request_timeout_ms`` (:data:`CLIENT_ERRORS`).
    """
    topic = settings.topics.manifests
    partitions = await topic_partitions(settings, [topic])
    consumer = AIOKafkaConsumer(
        **client_options(settings),
        group_id=None,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    try:
        await consumer.start()
        consumer.assign(partitions)
        first = await consumer.beginning_offsets(partitions)
        ends = await consumer.end_offsets(partitions)  # read_committed: the last stable ones
        best = 0
        for tp in partitions:
            stop, window = ends[tp], TAIL_OFFSETS
            while stop > first[tp]:
                start = max(first[tp], stop - window)
                found = await _sequences_between(consumer, tp, start, stop, settings)
                if found:
                    best = max(best, *found)
                    break
                stop, window = start, window * 4
        return best
    finally:
        await consumer.stop()


async def _sequences_between(
    consumer: AIOKafkaConsumer, tp: TopicPartition, start: int, stop: int, settings: KafkaSettings
) -> list[int]:
    """The ``sequence`` of every manifest at offsets ``start .. stop - 1`` of ``tp``."""
    consumer.seek(tp, start)
    deadline = time.monotonic() + settings.request_timeout_ms / 1000
    found: list[int] = []
    while await consumer.position(tp) < stop:
        if time.monotonic() > deadline:
            raise aiokafka_errors.KafkaTimeoutError(
                f"reading offsets {start}..{stop - 1} of {tp.topic!r} partition {tp.partition}"
            )
        batch = await consumer.getmany(tp, timeout_ms=200)
        for message in batch.get(tp, []):
            if message.offset >= stop or message.value is None:
                continue
            try:
                sequence = json.loads(message.value).get("sequence")
            except (ValueError, AttributeError):
                continue
            if isinstance(sequence, int) and not isinstance(sequence, bool):
                found.append(sequence)
    return found


async def assign_at_end(consumer: AIOKafkaConsumer, partitions: list[TopicPartition]) -> None:
    """Assign ``partitions`` to the started, group-less ``consumer`` at their end, resolved now
    (before anything is sent)."""
    consumer.assign(partitions)
    await consumer.seek_to_end(*partitions)
    for tp in partitions:
        await consumer.position(tp)


async def ensure_topics(
    settings: KafkaSettings, names: Iterable[str], partitions: int | None = None
) -> list[str]:
    """Create the topics among ``names`` that do not exist yet; return those created.

    New topics get ``partitions`` partitions (by default ``settings.partitions`` for
    ``topics.records``, the shards, and one for every other topic: the seals, the releases and
    the status messages each keep one order) and ``settings.replication_factor`` replicas;
    existing ones are left unchanged (:func:`check_records_partitions` compares). Only missing
    topics are requested, so a client allowed to describe but not to create topics works once
    they exist; a topic created concurrently by another client counts as existing.

    Raises
    ------
    InvalidParameter
        ``partitions < 1``.
    KafkaError
        The cluster is unreachable or refuses (see :func:`kafka_error`).
    """
    if partitions is not None and partitions < 1:
        raise InvalidParameter(f"ensure_topics: partitions = {partitions}; it must be >= 1")
    wanted = list(dict.fromkeys(names))
    admin = AIOKafkaAdminClient(**client_options(settings))
    try:
        await admin.start()
        existing = set(await admin.list_topics())
        missing = [name for name in wanted if name not in existing]
        if not missing:
            return []
        response = await admin.create_topics(
            [
                NewTopic(
                    name, _partitions_of(settings, name, partitions), settings.replication_factor
                )
                for name in missing
            ]
        )
        for entry in response.topic_errors:  # (topic, code[, message]) by version
            topic, code = entry[0], entry[1]
            if code and code != aiokafka_errors.TopicAlreadyExistsError.errno:
                detail = entry[2] if len(entry) > 2 and entry[2] else ""
                raise aiokafka_errors.for_code(code)(f"topic {topic!r} {detail}".strip())
        return missing
    except CLIENT_ERRORS as exc:
        cause = await connection_problem(settings) if _is_bootstrap_failure(exc) else None
        raise kafka_error(settings, f"create the topics {wanted}", cause or exc) from exc
    finally:
        await admin.close()


async def connection_problem(settings: KafkaSettings) -> BaseException | None:
    """Why no client could bootstrap from ``settings.bootstrap``, or ``None`` if a connection
    now succeeds.

    aiokafka's clients only say "Unable to bootstrap" and log each address's error; this
    connects to each address once more, as they do (login included), and returns the most
    telling error: a refused login or TLS handshake over a refused connection, since then a
    broker did answer.
    """
    options = client_options(settings)
    found: BaseException | None = None
    for host, port, _ in collect_hosts(settings.bootstrap, randomize=False):
        try:
            connection = await create_conn(
                host,
                port,
                client_id=options["client_id"],
                request_timeout_ms=options["request_timeout_ms"],
                ssl_context=options.get("ssl_context"),
                security_protocol=options["security_protocol"],
                sasl_mechanism=options.get("sasl_mechanism", "PLAIN"),
                sasl_plain_username=options.get("sasl_plain_username"),
                sasl_plain_password=options.get("sasl_plain_password"),
            )
        except _CONNECT_ERRORS as exc:
            if not isinstance(exc, OSError | aiokafka_errors.KafkaConnectionError):
                return exc
            found = exc
        else:
            connection.close()
            return None
    return found


def _is_bootstrap_failure(exc: BaseException) -> bool:
    return isinstance(exc, aiokafka_errors.KafkaConnectionError) and "bootstrap" in str(exc)


def kafka_error(settings: KafkaSettings, action: str, exc: BaseException) -> KafkaError:
    """A :class:`KafkaError` for ``exc``, raised while trying to ``action``: one line naming
    ``settings.bootstrap``, the cause and the fix."""
    if _is_bootstrap_failure(exc):
        reason = "no broker answered at the bootstrap address"
    elif isinstance(exc, KeyError):
        reason = "the broker ended the SCRAM login without a server signature (unknown user?)"
    else:
        text = " ".join(str(exc).split())
        name = type(exc).__name__
        reason = text if text.startswith(name) else f"{name}: {text}" if text else name
    return KafkaError(
        f"Kafka at {settings.bootstrap}: cannot {action}: {reason}; {_fix(settings, exc)}"
    )


def _fix(settings: KafkaSettings, exc: BaseException) -> str:
    e = aiokafka_errors
    if settings.idempotent and isinstance(
        exc, e.UnknownError | e.UnsupportedVersionError | e.ClusterAuthorizationFailedError
    ):
        return _IDEMPOTENT_FIX
    if isinstance(
        exc,
        e.AuthenticationFailedError
        | e.SaslAuthenticationFailed
        | e.UnsupportedSaslMechanismError
        | KeyError,
    ):
        return _AUTH_FIX
    if isinstance(exc, e.TopicAuthorizationFailedError | e.ClusterAuthorizationFailedError):
        return "grant this client's user access to the topics, or create them beforehand"
    if isinstance(exc, e.GroupAuthorizationFailedError):
        return (
            f"grant this client's user Read and Describe on the consumer groups "
            f"{settings.group_id!r} and {settings.records_group_id!r} (kafka.group_id)"
        )
    if isinstance(exc, e.InvalidTransactionTimeout):
        return (
            f"kafka.transaction_timeout_ms = {settings.transaction_timeout_ms} is above the "
            "broker's transaction.max.timeout.ms: lower it (SR_KAFKA_TRANSACTION_TIMEOUT_MS) "
            "or raise the broker's ceiling"
        )
    if isinstance(exc, e.TransactionalIdAuthorizationFailed):
        return (
            f"grant this client's user Write and Describe on the transactional id "
            f"{settings.release_transactional_id!r} (kafka.transactional_id)"
        )
    if isinstance(exc, e.MessageSizeTooLargeError):
        return "raise kafka.max_message_bytes and the broker's message.max.bytes"
    if isinstance(exc, e.KafkaTimeoutError | TimeoutError):
        return f"{_BOOTSTRAP_FIX}, or raise kafka.request_timeout_ms for a slow cluster"
    if isinstance(exc, e.KafkaConnectionError | OSError):
        return _BOOTSTRAP_FIX
    return "see the broker's log"


def _ssl_context(settings: KafkaSettings) -> ssl.SSLContext:
    files = {
        "ssl_cafile": settings.ssl_cafile,
        "ssl_certfile": settings.ssl_certfile,
        "ssl_keyfile": settings.ssl_keyfile,
    }
    try:
        context: ssl.SSLContext = create_ssl_context(
            cafile=settings.ssl_cafile,
            certfile=settings.ssl_certfile,
            keyfile=settings.ssl_keyfile,
        )
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        given = ", ".join(f"{k} = {str(v)!r}" for k, v in files.items() if v is not None)
        raise ConfigError(
            f"config kafka: cannot load the TLS files ({given or 'system CAs'}): "
            f"{getattr(exc, 'strerror', None) or exc}; check that they exist and are PEM"
        ) from exc
    return context
