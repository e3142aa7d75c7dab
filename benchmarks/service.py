"""Service benchmark: ingest throughput and seal-to-manifest latency of one worker.

Starts the local Tansu broker and a Redis (``stream_release.local_services``) and one worker
subprocess, warms it up with a small release, then publishes the 30,162-row Adult snapshot and
measures, in the same run:

* the raw consume rate of those records with a plain aiokafka consumer (the ceiling);
* ingest: records staged in Redis per second by the worker (first record sent -> all staged);
* seal-to-manifest: from the seal's acknowledgement to the manifest on ``sr.manifests``, and
  from "all staged" to the manifest (cut + commit + send).

Targets (issue 3): >= 100k records/s ingest, <= 1 s seal-to-manifest for 30k rows.

    python benchmarks/service.py [--data-dir ../shared/data]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import redis
from aiokafka import AIOKafkaConsumer, TopicPartition

from stream_release.config import KafkaSettings, load_settings
from stream_release.datasets import ADULT_QID, ADULT_SENSITIVE, read_csv_table
from stream_release.demo import write_demo_config
from stream_release.history.keys import RedisKeys
from stream_release.io.snapshot import snapshot_from_columns
from stream_release.local_services import (
    free_port,
    kafka_answers,
    managed_process,
    redis_answers,
    redis_argv,
    tansu_argv,
    worker_env,
)
from stream_release.stream.kafka import ensure_topics
from stream_release.stream.publish import publish_snapshot

REPO = Path(__file__).resolve().parents[1]
INGEST_TARGET = 100_000
LATENCY_TARGET_S = 1.0


def snapshot(table, rows: slice):  # type: ignore[no-untyped-def]
    cols = table.columns
    return snapshot_from_columns(
        cols["id"][rows], {q: cols[q][rows] for q in ADULT_QID}, cols[ADULT_SENSITIVE][rows]
    )


async def raw_consume_rate(kafka: KafkaSettings, topic: str, n: int) -> float:
    """Records/s of a plain aiokafka consumer reading ``n`` records of ``topic`` from offset 0."""
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        seen = 0
        started = time.perf_counter()
        while seen < n:
            batch = await consumer.getmany(partition, timeout_ms=1000, max_records=10_000)
            seen += sum(len(v) for v in batch.values())
        return n / (time.perf_counter() - started)
    finally:
        await consumer.stop()


async def wait_manifest(kafka: KafkaSettings, topic: str, label: str, timeout: float) -> float:
    """perf_counter time at which the manifest of ``label`` is read from ``topic``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            batch = await consumer.getmany(partition, timeout_ms=50)
            for records in batch.values():
                for record in records:
                    if json.loads(record.value)["release"] == label:
                        return time.perf_counter()
        raise TimeoutError(f"no manifest for {label!r} within {timeout:.0f} s")
    finally:
        await consumer.stop()


def wait_staged(client: redis.Redis, keys: RedisKeys, label: str, n: int, timeout: float) -> float:
    """perf_counter time at which ``n`` rows of ``label`` are staged (or it is already cut)."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        if client.hlen(keys.stage_rows(label)) >= n or client.hexists(keys.labels, label):
            return time.perf_counter()
        time.sleep(0.002)
    raise TimeoutError(f"{label!r}: fewer than {n} rows staged within {timeout:.0f} s")


async def measure(kafka: KafkaSettings, client: redis.Redis, keys: RedisKeys, table) -> dict:  # type: ignore[no-untyped-def]
    topics = kafka.topics
    # warm-up release: the worker joins its group and loads its kernels
    await publish_snapshot(kafka, "warm-up", snapshot(table, slice(0, 600)))
    await wait_manifest(kafka, topics.manifests, "warm-up", 120)
    big = snapshot(table, slice(None))
    n = big.n_rows
    started = time.perf_counter()
    sending = asyncio.create_task(publish_snapshot(kafka, "adult", big))
    staged_at = await asyncio.to_thread(wait_staged, client, keys, "adult", n, 120)
    await sending
    sealed_at = time.perf_counter()
    manifest_at = await wait_manifest(kafka, topics.manifests, "adult", 120)
    ceiling = await raw_consume_rate(kafka, topics.records, n)
    return {
        "rows": n,
        "ingest_per_s": n / (staged_at - started),
        "raw_consume_per_s": ceiling,
        "seal_to_manifest_s": manifest_at - sealed_at,
        "staged_to_manifest_s": manifest_at - max(staged_at, started),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    args = parser.parse_args()
    table = read_csv_table(args.data_dir / "adult.csv")
    with tempfile.TemporaryDirectory(prefix="sr-bench-service-") as tmp:
        work = Path(tmp)
        bootstrap, redis_port = f"127.0.0.1:{free_port()}", free_port()
        redis_url = f"redis://127.0.0.1:{redis_port}/0"
        with (
            managed_process("tansu", tansu_argv(bootstrap), work / "tansu.log", work) as broker,
            managed_process("redis", redis_argv(redis_port, work), work / "redis.log", work) as rd,
        ):
            broker.wait_until(lambda: kafka_answers(bootstrap))
            rd.wait_until(lambda: redis_answers(redis_url))
            config = write_demo_config(work)
            kafka = KafkaSettings(bootstrap=bootstrap, idempotent=False)
            topics = kafka.topics
            names = [
                topics.records,
                topics.control,
                topics.releases,
                topics.manifests,
                topics.rejected,
            ]
            asyncio.run(ensure_topics(kafka, names))
            env = worker_env(bootstrap=bootstrap, redis_url=redis_url, archive=work / "archive")
            worker_argv = [
                sys.executable,
                "-m",
                "stream_release.cli",
                "worker",
                "--config",
                str(config),
            ]
            with managed_process("worker", worker_argv, work / "worker.log", work, env=env):
                prefix = load_settings(config).history.prefix
                result = asyncio.run(
                    measure(kafka, redis.Redis.from_url(redis_url), RedisKeys(prefix), table)
                )
    ingest, ceiling = result["ingest_per_s"], result["raw_consume_per_s"]
    latency = result["seal_to_manifest_s"]
    lines = [
        f"service benchmark: one worker, {result['rows']:,} Adult rows, local Tansu + Redis",
        f"  raw aiokafka consume (ceiling)        {ceiling:>12,.0f} records/s",
        f"  ingest into Redis staging             {ingest:>12,.0f} records/s   "
        f"target >= {INGEST_TARGET:,}  {'PASS' if ingest >= INGEST_TARGET else 'FAIL'}"
        f"  ({100 * ingest / ceiling:.0f} % of the ceiling)",
        f"  seal acknowledged -> manifest         {latency:>12.3f} s          "
        f"target <= {LATENCY_TARGET_S:.1f}  {'PASS' if latency <= LATENCY_TARGET_S else 'FAIL'}",
        f"  all rows staged -> manifest (cut, commit, send) {result['staged_to_manifest_s']:.3f} s",
    ]
    report = "\n".join(lines)
    print(report)
    out = REPO / "benchmarks" / "results" / "service.md"
    out.write_text(
        f"# Service benchmark\n\n`python benchmarks/service.py`\n\n```text\n{report}\n```\n"
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
