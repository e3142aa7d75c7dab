"""Service benchmark: ingest throughput and seal-to-manifest latency of one worker.

Starts an Apache Kafka broker (KRaft, `benchmarks/apache_kafka.py`) and a Redis, then:

1. **Ingest.** Sends ``--copies`` copies of the 30,162-row Adult snapshot (ids made distinct
   per copy) to ``sr.records`` as ``--rounds`` unsealed releases, *before* the worker starts,
   so the producer's speed does not bound the figure. The worker (a subprocess) then consumes
   them; for each release, ingest = its records / (last row staged in Redis - first row
   staged), read from Redis. The median over the rounds is the figure.
2. **Ceiling.** A plain aiokafka consumer reads the same records from offset 0 in the same
   run: the raw consume rate, which the worker cannot exceed.
3. **Latency.** With the worker warm (a small release cut first), the Adult snapshot is sent
   as one sealed release; seal-to-manifest = from the seal's acknowledgement to its manifest
   on ``sr.manifests`` (cut + commit + send), and "all rows staged -> manifest".

Targets (issue 3): >= 100k records/s ingest, <= 1 s seal-to-manifest for 30k rows.

    python benchmarks/service.py [--data-dir ../shared/data] [--copies 8] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis
from aiokafka import AIOKafkaConsumer, TopicPartition
from apache_kafka import kafka_and_redis  # benchmarks/, the script's directory

from stream_release.cli.demo import write_demo_config
from stream_release.config import KafkaSettings, load_settings
from stream_release.devtools.datasets import ADULT_QID, ADULT_SENSITIVE, read_csv_table
from stream_release.devtools.local_services import (
    managed_process,
    worker_argv,
    worker_env,
)
from stream_release.history.keys import RedisKeys
from stream_release.io.snapshot import RawSnapshot, snapshot_from_columns
from stream_release.stream.kafka import ensure_topics
from stream_release.stream.snapshot_sender import send_snapshot

REPO = Path(__file__).resolve().parents[1]
INGEST_TARGET = 100_000
LATENCY_TARGET_S = 1.0


def snapshot(table, rows: slice = slice(None), copy: int | None = None) -> RawSnapshot:  # type: ignore[no-untyped-def]
    """Adult rows ``rows``; with ``copy``, ids prefixed by it (distinct individuals)."""
    cols = table.columns
    ids = cols["id"][rows]
    if copy is not None:
        ids = np.array([f"{copy}-{x}" for x in ids.tolist()], dtype=object)
    return snapshot_from_columns(
        ids, {q: cols[q][rows] for q in ADULT_QID}, cols[ADULT_SENSITIVE][rows]
    )


def copies(table, n: int, first: int) -> RawSnapshot:  # type: ignore[no-untyped-def]
    """``n`` copies of the Adult snapshot with distinct ids (copy numbers from ``first``)."""
    parts = [snapshot(table, copy=first + k) for k in range(n)]
    return snapshot_from_columns(
        np.concatenate([p.ids for p in parts]),
        {q: np.concatenate([p.qid[q] for p in parts]) for q in ADULT_QID},
        np.concatenate([p.sensitive for p in parts]),
    )


async def raw_consume_rate(kafka: KafkaSettings, topic: str, n: int) -> float:
    """Records/s of a plain aiokafka consumer reading ``n`` records of ``topic`` from offset 0."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap,
        enable_auto_commit=False,
        max_partition_fetch_bytes=8 << 20,
    )
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


def measure_ingest(client: redis.Redis, keys: RedisKeys, labels: list[str], n: int) -> list[float]:
    """Records/s of each pre-produced release: first row staged -> all ``n`` staged."""
    rates = []
    for label in labels:
        first = wait_staged(client, keys, label, 1, 180)
        last = wait_staged(client, keys, label, n, 180)
        rates.append(n / (last - first))
    return rates


async def measure_latency(  # type: ignore[no-untyped-def]
    kafka: KafkaSettings, client: redis.Redis, keys: RedisKeys, table
) -> dict[str, float]:
    """Seal-to-manifest of the Adult snapshot on a warm worker."""
    topics = kafka.topics
    await send_snapshot(kafka, "warm-up", snapshot(table, slice(0, 600), copy=-1))
    await wait_manifest(kafka, topics.manifests, "warm-up", 180)
    adult = snapshot(table)
    sending = asyncio.create_task(send_snapshot(kafka, "adult", adult))
    staged_at = await asyncio.to_thread(wait_staged, client, keys, "adult", adult.n_rows, 180)
    await sending
    sealed_at = time.perf_counter()
    manifest_at = await wait_manifest(kafka, topics.manifests, "adult", 180)
    return {
        "rows": adult.n_rows,
        "seal_to_manifest_s": manifest_at - sealed_at,
        "staged_to_manifest_s": manifest_at - staged_at,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--copies", type=int, default=8, help="Adult copies per ingest round")
    parser.add_argument("--rounds", type=int, default=3, help="ingest rounds (median)")
    args = parser.parse_args()
    table = read_csv_table(args.data_dir / "adult.csv")
    with tempfile.TemporaryDirectory(prefix="sr-bench-service-") as tmp:
        work = Path(tmp)
        with kafka_and_redis(work) as (bootstrap, redis_url):
            config = write_demo_config(work)
            kafka = KafkaSettings(bootstrap=bootstrap)
            topics = kafka.topics
            asyncio.run(ensure_topics(kafka, topics.every))
            labels = [f"ingest-{k}" for k in range(args.rounds)]
            produced = 0
            started = time.perf_counter()
            for k, label in enumerate(labels):
                rows = copies(table, args.copies, first=k * args.copies)
                produced += asyncio.run(send_snapshot(kafka, label, rows, seal=False))
            produce_rate = produced / (time.perf_counter() - started)
            per_round = produced // len(labels)
            ceiling = asyncio.run(raw_consume_rate(kafka, topics.records, produced))
            env = worker_env(bootstrap=bootstrap, redis_url=redis_url, archive=work / "archive")
            client = redis.Redis.from_url(redis_url)
            keys = RedisKeys(load_settings(config).history.prefix)
            argv = worker_argv(config)
            with managed_process("worker", argv, work / "worker.log", work, env=env):
                rates = measure_ingest(client, keys, labels, per_round)
                latency = asyncio.run(measure_latency(kafka, client, keys, table))
    ingest = statistics.median(rates)
    seal = latency["seal_to_manifest_s"]
    verdict = "PASS" if ingest >= INGEST_TARGET else "FAIL"
    lines = [
        f"service benchmark: one worker, Apache Kafka + Redis, {per_round:,} records per ingest "
        f"round ({args.copies} x Adult), {len(rates)} rounds",
        f"  producer (send_snapshot, info)     {produce_rate:>12,.0f} records/s",
        f"  raw aiokafka consume (ceiling)        {ceiling:>12,.0f} records/s",
        f"  ingest into Redis staging (median)    {ingest:>12,.0f} records/s   "
        f"target >= {INGEST_TARGET:,}  {verdict}  ({100 * ingest / ceiling:.0f} % of the "
        f"ceiling; rounds: {', '.join(f'{r:,.0f}' for r in rates)})",
        f"  seal acknowledged -> manifest         {seal:>12.3f} s          "
        f"target <= {LATENCY_TARGET_S:.1f}  {'PASS' if seal <= LATENCY_TARGET_S else 'FAIL'}"
        f"  ({latency['rows']:,} Adult rows)",
        "  all rows staged -> manifest (cut, commit, send) "
        f"{latency['staged_to_manifest_s']:.3f} s",
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
