"""Load benchmark: consecutive releases of 1,000,000 rows each through the service (issue 4).

Starts an Apache Kafka broker (KRaft, ``benchmarks/apache_kafka.py``), a Redis and one worker
(subprocesses), then sends ``--releases`` snapshots of ``--rows`` rows each with
``stream-release publish``'s code path (records, then the seal), after a 600-row warm-up
release. The population is Adult rows (QIDs and occupation) drawn with replacement: release 1
holds ``--rows`` individuals; as in Wong et al. 2010 §8, each later release keeps 20 % of the
previous one's (20 % of them with a value drawn again) and adds 80 % new ones, so the history
grows by 0.8 x ``--rows`` individuals per release (8.2 million after ten releases of a million).

For every release it prints the time to send it (first record -> seal acknowledged), the time
from the seal to its manifest on ``sr.manifests`` (what the worker needs once the snapshot is
complete: the rest of the ingest, the cut, the commit and the send), the end-to-end time
(first record sent -> manifest), its breach bound and utility. At the end: the worker's peak
RSS (``VmHWM``), Redis memory per stored (individual, value) history entry, and the audit of
the archive.

Targets (issue 4): each release <= 10 s, worker RSS <= 4 GB, <= 200 bytes of Redis per
(individual, value).

    python benchmarks/load.py [--data-dir ../shared/data] [--rows 1000000] [--releases 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import redis
from aiokafka import AIOKafkaConsumer, TopicPartition
from apache_kafka import kafka_and_redis  # benchmarks/, the script's directory

from stream_release.audit import audit_directory
from stream_release.cli.demo import write_demo_config
from stream_release.config import KafkaSettings, load_settings
from stream_release.devtools.datasets import (
    ADULT_QID,
    ADULT_SENSITIVE,
    ChurnPopulation,
    read_csv_table,
)
from stream_release.devtools.local_services import (
    managed_process,
    worker_argv,
    worker_env,
)
from stream_release.history.keys import RedisKeys
from stream_release.history.types import ENTRY_DTYPE
from stream_release.io.snapshot import RawSnapshot, snapshot_from_columns
from stream_release.stream.kafka import ensure_topics
from stream_release.stream.snapshot_sender import send_snapshot

REPO = Path(__file__).resolve().parents[1]
RELEASE_TARGET_S = 10.0
RSS_TARGET_BYTES = 4 << 30
REDIS_TARGET_BYTES = 200
KEEP, CHANGE = 0.2, 0.2
"""Paper 003 §8's series: 20 % of a release's individuals stay for the next, 20 % of those
with a value drawn again."""


class Population(ChurnPopulation):
    """The churn population of :mod:`stream_release.devtools.datasets`, as snapshots, and a
    warm-up."""

    def __init__(self, table, rows: int, seed: int) -> None:  # type: ignore[no-untyped-def]
        super().__init__(
            table, ADULT_QID, ADULT_SENSITIVE, rows, keep=KEEP, change=CHANGE, seed=seed
        )

    def warm_up(self) -> RawSnapshot:
        """A small snapshot of individuals outside the population (ids ``W<n>``)."""
        rows = np.arange(600)
        return snapshot_from_columns(
            np.array([f"W{i}" for i in rows.tolist()], dtype=object),
            {q: column[rows] for q, column in self.qid.items()},
            self.values[rows],
        )

    def next_snapshot(self) -> RawSnapshot:
        """The next snapshot."""
        return snapshot_from_columns(*self.advance())


async def next_manifest(consumer: AIOKafkaConsumer, label: str, timeout: float) -> dict:  # type: ignore[type-arg]
    """Read ``sr.manifests`` until the manifest of ``label``; it and the time it was read."""
    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        batch = await consumer.getmany(timeout_ms=50)
        for records in batch.values():
            for record in records:
                manifest: dict = json.loads(record.value)  # type: ignore[type-arg]
                if manifest["release"] == label:
                    manifest["_read_at"] = time.perf_counter()
                    return manifest
    raise TimeoutError(f"no manifest for {label!r} within {timeout:.0f} s")


async def run_series(kafka: KafkaSettings, population: Population, releases: int) -> list[dict]:  # type: ignore[type-arg]
    topics = kafka.topics
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False)
    await consumer.start()
    rows = []
    try:
        partition = TopicPartition(topics.manifests, 0)
        consumer.assign([partition])
        await consumer.seek_to_beginning(partition)
        # warm-up: the worker joins its groups and loads its kernels before the first release
        await send_snapshot(kafka, "warm-up", population.warm_up())
        await next_manifest(consumer, "warm-up", 180)
        for k in range(1, releases + 1):
            snapshot = population.next_snapshot()
            label = f"L{k:02d}"
            started = time.perf_counter()
            await send_snapshot(kafka, label, snapshot)
            sealed = time.perf_counter()
            manifest = await next_manifest(consumer, label, 600)
            row = {
                "release": label,
                "rows": snapshot.n_rows,
                "send_s": sealed - started,
                "seal_to_manifest_s": manifest["_read_at"] - sealed,
                "end_to_end_s": manifest["_read_at"] - started,
                "manifest": manifest,
            }
            rows.append(row)
            print(format_row(row), flush=True)
    finally:
        await consumer.stop()
    return rows


def format_row(row: dict) -> str:  # type: ignore[type-arg]
    m = row["manifest"]
    u = m["utility"]
    return (
        f"{row['release']:>4} {row['rows']:>9,} send {row['send_s']:6.2f} s  "
        f"seal->manifest {row['seal_to_manifest_s']:6.2f} s  end-to-end "
        f"{row['end_to_end_s']:6.2f} s  groups {m['groups']:>7,} avg {u['avg_group_size']:.2f} "
        f"supp {m['suppressed']:>6,} breach.max {m['breach']['max']:.4f}"
    )


def history_entries(client: redis.Redis, keys: RedisKeys) -> tuple[int, int]:
    """(individuals, (individual, value) entries) stored under ``keys``."""
    pattern = f"{keys.match[:-1]}{{ind:*"
    individuals = entries = 0
    batch: list[bytes] = []

    def flush() -> None:
        nonlocal entries
        with client.pipeline(transaction=False) as pipe:
            for key in batch:
                pipe.strlen(key)
            entries += sum(pipe.execute()) // ENTRY_DTYPE.itemsize
        batch.clear()

    for key in client.scan_iter(match=pattern, count=10_000):
        individuals += 1
        batch.append(key)
        if len(batch) >= 10_000:
            flush()
    flush()
    return individuals, entries


def add_worker_timings(rows: list[dict], log: Path) -> None:  # type: ignore[type-arg]
    """Add each release's cut and send durations from the worker's JSON log."""
    events: dict[tuple[str, int], dict] = {}  # type: ignore[type-arg]
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{") and '"event"' in line:
            entry = json.loads(line)
            if entry["event"] in ("committed", "sent"):
                events[(entry["event"], entry["sequence"])] = entry
    for row in rows:
        sequence = row["manifest"]["sequence"]
        row["cut_s"] = events[("committed", sequence)]["cut_s"]
        row["send_s_worker"] = events[("sent", sequence)]["send_s"]


def peak_rss(pid: int) -> int:
    """``VmHWM`` of process ``pid`` in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise LookupError("no VmHWM")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--releases", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--strategy",
        default="constant-ratio",
        choices=["constant-ratio", "geometric"],
        help="the demo's constant-ratio (k' = 3), or geometric (alpha = 2)",
    )
    args = parser.parse_args()
    population = Population(read_csv_table(args.data_dir / "adult.csv"), args.rows, args.seed)
    with tempfile.TemporaryDirectory(prefix="sr-bench-load-") as tmp:
        work = Path(tmp)
        archive = work / "archive"
        with kafka_and_redis(work) as (bootstrap, redis_url):
            client = redis.Redis.from_url(redis_url)
            baseline = int(client.info("memory")["used_memory"])
            config = write_demo_config(work)
            kafka = KafkaSettings(bootstrap=bootstrap)
            topics = kafka.topics
            asyncio.run(ensure_topics(kafka, topics.every))
            env = worker_env(
                bootstrap=bootstrap,
                redis_url=redis_url,
                archive=archive,
                extra={"SR_PRIVACY_STRATEGY": args.strategy, "SR_PRIVACY_ALPHA": "2"},
            )
            argv = worker_argv(config)
            print(
                f"load benchmark: {args.releases} releases of {args.rows:,} rows, one worker, "
                "Apache Kafka + Redis",
                flush=True,
            )
            with managed_process("worker", argv, work / "worker.log", work, env=env) as worker:
                rows = asyncio.run(run_series(kafka, population, args.releases))
                rss = peak_rss(worker.pid)
            add_worker_timings(rows, work / "worker.log")
            for row in rows:
                print(
                    f"{row['release']:>4} in the worker: cut {row['cut_s']:.2f} s (stage read, "
                    f"grouping {row['manifest']['elapsed_s']:.2f} s, render, Redis commit), "
                    f"send {row['send_s_worker']:.2f} s"
                )
            memory = int(client.info("memory")["used_memory"]) - baseline
            prefix = load_settings(config).history.prefix
            individuals, entries = history_entries(client, RedisKeys(prefix))
            started = time.perf_counter()
            report = audit_directory(archive)
            audit_s = time.perf_counter() - started
    worst = max(r["end_to_end_s"] for r in rows)
    worst_seal = max(r["seal_to_manifest_s"] for r in rows)
    per_entry = memory / max(entries, 1)
    lines = [
        f"worst release: end to end {worst:.2f} s, seal -> manifest {worst_seal:.2f} s "
        f"(target <= {RELEASE_TARGET_S:.0f} s: end to end "
        f"{'PASS' if worst <= RELEASE_TARGET_S else 'FAIL'}, seal -> manifest "
        f"{'PASS' if worst_seal <= RELEASE_TARGET_S else 'FAIL'})",
        f"worker peak RSS {rss / 2**30:.2f} GiB (target <= 4 GiB: "
        f"{'PASS' if rss <= RSS_TARGET_BYTES else 'FAIL'})",
        f"Redis: {memory / 2**20:,.0f} MiB for {individuals:,} individuals, {entries:,} "
        f"(individual, value) entries: {per_entry:.0f} bytes per entry (target <= "
        f"{REDIS_TARGET_BYTES}: {'PASS' if per_entry <= REDIS_TARGET_BYTES else 'FAIL'})",
        f"audit: {'passed' if report.ok else 'FAILED'} in {audit_s:.1f} s",
    ]
    print("\n".join(lines))
    table = "\n".join(
        f"{format_row(r)}\n      worker: cut {r['cut_s']:.2f} s (grouping "
        f"{r['manifest']['elapsed_s']:.2f} s), send {r['send_s_worker']:.2f} s"
        for r in rows
    )
    out = REPO / "benchmarks" / "results" / "load.md"
    out.write_text(
        f"# Load benchmark\n\n`python benchmarks/load.py --strategy {args.strategy}"
        f" --rows {args.rows} --releases {args.releases}`\n\n```text\n"
        f"{table}\n" + "\n".join(lines) + "\n```\n"
    )
    print(f"wrote {out}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
