"""A series cut on shards without Kafka: its settings, and a snapshot staged as the worker
stages it (each row in the shard of its id's partition under Kafka's default partitioner, the
one ``stream-release publish`` and third-party producers key records with, then the seal with
each shard's count). :func:`shard_of` is the one ``stream-release plan`` cuts snapshots with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from stream_release.config import Settings, load_settings
from stream_release.config.hierarchy import load_hierarchies
from stream_release.history.pseudonym import Pseudonymizer, load_key
from stream_release.pipeline.diagnosis import shard_of
from stream_release.stream.intake import RecordValidator
from stream_release.stream.messages import SnapshotRecord, decode_snapshot_record
from stream_release.stream.sharded.cut import ShardedCut
from support.service_runs import record_messages


def shard_settings(
    config: Path, key: str, prefix: str, shards: int, *, cluster: bool = False, **sections: Any
) -> Settings:
    """The settings of ``config`` for a series on ``shards`` shards under ``prefix`` with the
    pseudonym key ``key`` (on a Redis Cluster when ``cluster``), ``sections`` overriding more."""
    return load_settings(
        config,
        history={"key": key, "prefix": prefix},
        kafka={"partitions": shards},
        redis={"cluster": cluster},
        **sections,
    )


def stage(cut: ShardedCut, settings: Settings, snapshot: Path, label: str) -> list[int]:
    """Stage every row of ``snapshot`` in its shard, as the service does (a shard that gets no
    row is not staged at all), then seal it; returns the count of each shard."""
    validator = RecordValidator(settings, load_hierarchies(settings.schema))
    pseudonymizer = Pseudonymizer(load_key(settings.history, default_dir=None))
    by_shard: dict[int, tuple[list[bytes], list[bytes]]] = {}
    schema = settings.schema
    messages = record_messages(
        snapshot, label, schema.qid, 0, id_column=schema.id, sensitive=schema.sensitive
    )
    for message in messages:
        record = decode_snapshot_record(message.value, settings.schema, max_bytes=1 << 20)
        assert isinstance(record, SnapshotRecord)
        row = validator.staged_row(record)
        assert isinstance(row, bytes)
        [shard] = shard_of([record.id], cut.partitions).tolist()
        pseudonyms, rows = by_shard.setdefault(shard, ([], []))
        pseudonyms.append(pseudonymizer.digests([record.id])[0])
        rows.append(row)
    for shard, (pseudonyms, rows) in by_shard.items():
        cut.shards[shard].staging.stage(label, pseudonyms, rows)
    counts = [len(by_shard.get(p, ([], []))[0]) for p in range(cut.partitions)]
    assert cut.seal(label, counts) == 0
    return counts
