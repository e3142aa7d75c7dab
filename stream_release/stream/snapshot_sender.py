"""Send one snapshot to Kafka as its records and then its seal (docs/contract.md §3, §5).

Each row becomes one message on ``topics.records``: key = the individual's id (UTF-8), value =
``{"release": label, "id": ..., "qid": {name: value, ...}, "sensitive": ...}`` with every value
the string read from the snapshot (the worker encodes them). Only when every record has been
acknowledged (``acks="all"``) does the seal ``{"release": label, "records": n}`` go to
``topics.control`` under the key ``label``, ``n`` being the number of distinct ids; when the
records topic has several partitions (``kafka.partitions``) the seal adds ``"partitions": [n0,
n1, ...]``, the distinct ids sent to each, so that each shard knows when its part is complete.
A failed record therefore never leaves a seal behind: the worker cuts a release only on its
seal, so a snapshot is never released partially; publishing it again (same label) is the
recovery.

Records are sent in record batches (:func:`~stream_release.stream.kafka.send_batched`), each
to the partition its key hashes to, and collected at the end.
Nothing here logs or prints an id or a sensitive value.

:func:`check_snapshot_rows` refuses, before it is read into memory, a snapshot with more rows
than ``service.max_release_rows``, which the worker would refuse.
"""

from __future__ import annotations

import csv
import time
from array import array
from pathlib import Path
from typing import Literal, NamedTuple

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from stream_release.config import KafkaSettings
from stream_release.errors import InvalidParameter, SchemaError
from stream_release.io.snapshot import RawSnapshot
from stream_release.stream.kafka import (
    CLIENT_ERRORS,
    assign_at_end,
    check_records_partitions,
    client_options,
    ensure_topics,
    kafka_error,
    producer_options,
    send_batched,
    topic_partitions,
)

CHUNK_BYTES = 1 << 20
"""Bytes read at a time by :func:`check_snapshot_rows`."""


def check_snapshot_rows(path: Path | str, max_rows: int) -> None:
    """Refuse the CSV snapshot at ``path`` if it has more than ``max_rows`` rows
    (``service.max_release_rows``), reading it in chunks of :data:`CHUNK_BYTES`: a snapshot
    too large for memory is refused, never loaded. Rows are the lines after the header; when
    there are more lines than that and the file quotes fields (a quoted field may hold a line
    break), its records are counted exactly, still streaming. A file that cannot be read is
    left to :func:`~stream_release.io.snapshot_csv.read_snapshot` to report.

    Raises
    ------
    SchemaError
        The snapshot has more than ``max_rows`` rows; the message names the setting and the fix.
    """
    newlines, quoted, last = 0, False, b"\n"
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(CHUNK_BYTES):
                newlines += chunk.count(b"\n")
                quoted = quoted or b'"' in chunk
                last = chunk[-1:]
    except OSError:
        return
    rows = newlines + (last != b"\n") - 1  # a last line may lack its line break; the header
    if rows > max_rows and quoted:
        with open(path, encoding="utf-8", errors="replace", newline="") as text:
            rows = sum(1 for _ in csv.reader(text)) - 1
    if rows > max_rows:
        raise SchemaError(
            f"snapshot {str(path)!r} has {rows} rows, more than service.max_release_rows = "
            f"{max_rows}, and the worker refuses a release that large: split it into releases "
            f"of at most {max_rows} rows, or raise service.max_release_rows "
            "(SR_SERVICE_MAX_RELEASE_ROWS, for this command and the worker) where the worker "
            "and Redis have the memory"
        )


def seal_value(label: str, records: int, partitions: list[int] | None = None) -> bytes:
    """The seal of release ``label`` holding ``records`` distinct ids (JSON bytes), with the
    distinct ids sent to each partition of the records topic when it has several."""
    if partitions is None or len(partitions) == 1:
        return orjson.dumps({"release": label, "records": records})
    return orjson.dumps({"release": label, "records": records, "partitions": partitions})


def partition_counts(ids: list[str], placed: array[int], partitions: int) -> list[int]:
    """Distinct ids per partition: ``placed[i]`` is the partition ``ids[i]`` was sent to (an
    id sent twice went to one partition, its key's)."""
    counts = [0] * partitions
    for partition in dict(zip(ids, placed, strict=True)).values():
        counts[partition] += 1
    return counts


class Outcome(NamedTuple):
    """What became of a release :func:`send_snapshot` waited for."""

    status: Literal["published", "refused", "blocked", "held", "timeout"]
    sequence: int | None = None
    """``published``: the release's sequence."""
    reason: str = ""
    """Otherwise: why, and the fix (the worker's status message), or how long it waited."""


async def send_snapshot(
    settings: KafkaSettings, label: str, raw: RawSnapshot, *, seal: bool = True
) -> int:
    """Send the rows of ``raw`` as release ``label``, then its seal; return the rows sent.

    With ``seal=False`` only the records are sent (a producer that seals later, or never: the
    worker keeps them staged and reports the release as waiting).

    Creates ``topics.records`` and ``topics.control`` when missing (:func:`ensure_topics`).

    Raises
    ------
    InvalidParameter
        ``label`` is empty or blank.
    KafkaError
        The broker is unreachable or refused a record or the seal. No seal has been sent if a
        record failed.
    """
    if not label.strip():
        raise InvalidParameter(
            f"release label {label!r} is empty; give the producer's label, e.g. --release 2026-10"
        )
    topics = settings.topics
    await ensure_topics(settings, [topics.records, topics.control])
    await check_records_partitions(settings)
    return await _send(settings, label, raw, seal=seal)


async def send_and_wait(
    settings: KafkaSettings, label: str, raw: RawSnapshot, wait_s: float
) -> tuple[int, Outcome]:
    """:func:`send_snapshot`, then wait up to ``wait_s`` seconds for what the worker says
    of release ``label``: its manifest on ``topics.manifests`` (published, with its
    sequence) or a status message on ``topics.status`` (refused, blocked or held, with the reason
    and the fix), read as ``read_committed`` from where both topics ended before the records
    were sent. Creates both topics when missing.

    Raises
    ------
    InvalidParameter, KafkaError
        As :func:`send_snapshot`; also when the two topics cannot be read.
    """
    topics = settings.topics
    watched = [topics.manifests, topics.status]
    await ensure_topics(settings, watched)
    watch = await _Watch.start(settings, watched)
    try:
        sent = await send_snapshot(settings, label, raw)
        return sent, await watch.outcome(label, wait_s)
    finally:
        await watch.stop()


async def _send(settings: KafkaSettings, label: str, raw: RawSnapshot, *, seal: bool) -> int:
    topics = settings.topics
    producer = AIOKafkaProducer(**producer_options(settings))
    action = "connect"
    try:
        await producer.start()
        action = f"send the records to {topics.records!r}"
        names = list(raw.qid)
        columns = [raw.qid[name].tolist() for name in names]
        records = (
            (
                ident.encode(),
                orjson.dumps(
                    {
                        "release": label,
                        "id": ident,
                        "qid": dict(zip(names, values, strict=True)),
                        "sensitive": sensitive,
                    }
                ),
            )
            for ident, sensitive, *values in zip(
                raw.ids.tolist(), raw.sensitive.tolist(), *columns, strict=True
            )
        )
        placed = await send_batched(
            producer, topics.records, records, max_bytes=settings.max_message_bytes
        )
        if not seal:
            return raw.n_rows
        action = f"send the seal to {topics.control!r}"
        counts = partition_counts(raw.ids.tolist(), placed, settings.partitions)
        await producer.send_and_wait(
            topics.control, seal_value(label, sum(counts), counts), key=label.encode()
        )
    except CLIENT_ERRORS as exc:
        raise kafka_error(settings, action, exc) from exc
    finally:
        await producer.stop()
    return raw.n_rows


STATUSES = ("refused", "blocked", "held")
"""The status messages that answer ``publish --wait`` (exit 1 with the reason and the fix)."""


class _Watch:
    """A read_committed consumer of ``topics.manifests`` and ``topics.status`` positioned at
    their ends before anything is sent: it sees only what the worker says afterwards."""

    def __init__(self, settings: KafkaSettings, consumer: AIOKafkaConsumer) -> None:
        self.settings, self.consumer = settings, consumer

    @classmethod
    async def start(cls, settings: KafkaSettings, topics: list[str]) -> _Watch:
        consumer = AIOKafkaConsumer(
            **client_options(settings),
            group_id=None,
            enable_auto_commit=False,
            isolation_level="read_committed",
        )
        try:
            partitions = await topic_partitions(settings, topics)
            await consumer.start()
            await assign_at_end(consumer, partitions)
        except CLIENT_ERRORS as exc:
            await consumer.stop()
            raise kafka_error(settings, f"read the topics {topics}", exc) from exc
        return cls(settings, consumer)

    async def outcome(self, label: str, wait_s: float) -> Outcome:
        """The first manifest or status message of ``label``, or a timeout after
        ``wait_s``."""
        topics = self.settings.topics
        key = label.encode("utf-8")
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                batch = await self.consumer.getmany(timeout_ms=int(min(left, 1.0) * 1000))
            except CLIENT_ERRORS as exc:
                raise kafka_error(self.settings, f"wait for release {label!r}", exc) from exc
            for tp, messages in batch.items():
                for message in messages:
                    if message.key != key or message.value is None:
                        continue
                    body = orjson.loads(message.value)
                    if tp.topic == topics.manifests:
                        return Outcome("published", sequence=int(body["sequence"]))
                    if tp.topic == topics.status and body.get("status") in STATUSES:
                        reason = f"{body.get('reason', '')}; {body.get('fix', '')}"
                        return Outcome(body["status"], reason=reason)
        return Outcome(
            "timeout",
            reason=(
                f"no manifest or status for release {label!r} within {wait_s:g} s: is the "
                f"worker running (consuming {topics.records!r})? Its log and /health say why; "
                "raise --timeout for a large release"
            ),
        )

    async def stop(self) -> None:
        await self.consumer.stop()
