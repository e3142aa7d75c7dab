"""Scale-out benchmark: 1, 2 and 3 workers on shards, the serial part, a projection (issue 14).

**Services.** One Apache Kafka broker (KRaft, the tests' ``support.kafka_broker``) and one Redis
Cluster (3 masters + 3 replicas, ``support.redis_cluster``), started once for the run.

**Series.** For each worker count W of ``--workers``: fresh topics (``sr.records`` with
``--partitions`` P partitions), history prefix and consumer group; W ``stream-release worker``
processes with ``[kafka] partitions = P`` and ``[redis] cluster = true`` sharing one archive.
Once every shard has an owner: a warm-up release (3,000 rows, not measured: 600 as in load.py
leave too few rows per shard to be published), a calibration release of ``--small-rows`` rows,
then ``--releases`` releases of ``--rows`` rows of load.py's churn population (Adult rows
drawn with replacement; each release keeps 20 % of the previous one's individuals, 20 % of
those with a value drawn again: Wong et al. 2010 §8), each sent with ``send_snapshot`` once
the previous manifest was read (``read_committed``). Every W is sent the same snapshots (same
seed). The workers run with the local settings of the tests
(``LOCAL_WORKER_SETTINGS``: batches of 0.2 s, ``service.retry_interval_s`` = 1 s) and group
timeouts of 20 s, so that a worker busy cutting on a loaded machine keeps its shards.

**Per release.** send (first record -> seal acknowledged), seal -> manifest, end to end (first
record -> manifest read; the producer is this one process), rows/s, rows/s per core = rows/s /
min(W, cores), and the CPU seconds in that time of the workers (/proc), the broker, the Redis
nodes (INFO cpu), this process (the producer) and the rest of the machine (/proc/stat).

**The serial part.** The workers log no step of the cut on shards, so a thread polls the
release in flight every ``--poll-ms`` (``{prefix:release}:current`` and its votes, confirms and
parts; names from history/keys.py): each step is timed to within one poll, a step passed
between two polls gets the time of the next one seen. The workers' JSON logs give who owns
which shard (``shards_assigned``) and the single sender's ``sent`` (its end, ``send_s``); the
mtime of the merged manifest in the shared archive ends the filing. Serial = the barrier waits
(for the votes, the confirmations and the parts: from the first worker done with all its shards
to the last shard, when only the slowest worker makes progress) + the serial tail (last part
done -> manifest read: finish = merge of the part manifests and release_finish.lua, filing of
the merged files, hand-off to the owner of shard 0, its send of every group line in one
transaction, the read). Parallel = end to end - serial.

**Model.** T(N, W) = a N + b + c N / W, each coefficient from the part of the release it
describes (least squares with coefficients >= 0): a and b_t from the serial tail less the
hand-off on N (every release); h = the mean hand-off at W >= 2 (a timer's phase, not work); b_b
and d from the barrier waits on N / min(W, cores) at W >= 2; c and b_p from the parallel
seconds on N / min(W, cores) at the baseline W (the smallest). b = b_t + h + b_b + b_p, and the
N / W term is c + d (at W = 1: b_t + b_p and c). c per W shows the parallel efficiency on this
machine. The projection (``--project-rows`` to ``--project-workers``) assumes one worker per
core, each on cores of its own, P >= W shards evenly owned, and Redis and Kafka sized not to be
the bottleneck.

**Redis memory.** A series of ``--history-releases`` releases of ``--history-rows`` rows on the
widest W: used_memory of every master minus a baseline taken before it, the release records'
bytes (STRLEN; they stay in Redis), and each individual's history entries (STRLEN / 16 of its
key: its id pseudonymised with the series' key in the shard of its partition), by the number
of releases it appeared in. The projection counts individuals and entries from the churn model
(expected individuals by appearances r, times the entries measured for r).

    python benchmarks/scale_out.py [--rows 1000000] [--releases 3] [--workers 1,2,3]
        [--partitions 6] [--history-rows 100000] [--history-releases 12]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

import numpy as np
import redis
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import DefaultPartitioner
from numpy.typing import NDArray
from redis.crc import key_slot
from scipy.optimize import nnls

from stream_release.audit import audit_directory
from stream_release.cli.demo import write_demo_config
from stream_release.config import KafkaSettings, TopicSettings, load_settings
from stream_release.devtools.datasets import (
    ADULT_QID,
    ADULT_SENSITIVE,
    ChurnPopulation,
    Table,
    bundled_adult,
    read_csv_table,
)
from stream_release.devtools.local_services import (
    ManagedProcess,
    managed_process,
    worker_argv,
    worker_env,
)
from stream_release.errors import StreamReleaseError
from stream_release.history.keys import RedisKeys
from stream_release.history.pseudonym import Pseudonymizer, load_key
from stream_release.history.types import ENTRY_DTYPE
from stream_release.io.snapshot import RawSnapshot, snapshot_from_columns
from stream_release.stream.kafka import ensure_topics, transactional_options
from stream_release.stream.snapshot_sender import send_snapshot

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from load import CHANGE, KEEP, peak_rss  # noqa: E402  (load.py's churn, Wong et al. 2010 §8)
from support.kafka_broker import KafkaNode  # type: ignore[import-not-found, unused-ignore]  # noqa: E402
from support.redis_cluster import RedisClusterNodes  # type: ignore[import-not-found, unused-ignore]  # noqa: E402

DEFAULT_ROWS = 1_000_000
WARM_UP_ROWS = 3000
CORES = len(os.sched_getaffinity(0))
WORKER_SETTINGS = {
    # a worker busy cutting a million rows on a shared 2-core machine must not lose its group
    "SR_SERVICE_SESSION_TIMEOUT_S": "20",
    "SR_SERVICE_HEARTBEAT_INTERVAL_S": "2",
    "SR_SERVICE_REBALANCE_TIMEOUT_S": "20",
}
Row = dict[str, Any]


# -- the machine -------------------------------------------------------------------------------


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process ``pid``; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> float:
    """CPU seconds every core of the machine spent busy (not idle, not waiting for I/O)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")


def busy_processes(window: float = 2.0) -> list[str]:
    """Other processes using more than 5 % of a core over ``window`` seconds (name, script)."""

    def sample() -> dict[int, float]:
        return {int(p.name): process_cpu(int(p.name)) for p in Path("/proc").glob("[0-9]*")}

    before = sample()
    time.sleep(window)
    out = []
    for pid, cpu in sample().items():
        share = (cpu - before.get(pid, cpu)) / window
        if pid != os.getpid() and share > 0.05:
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            name = " ".join(Path(a.decode(errors="replace")).name for a in argv[:2] if a)
            out.append(f"{name} ({share:.0%} of a core)")
    return out


def machine_state() -> dict[str, Any]:
    return {"load": os.getloadavg(), "others": busy_processes()}


def source_state() -> str:
    """The commit and whether stream_release/ had edits not committed (the workers ran them)."""
    git = ["git", "-C", str(REPO)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "stream_release"], capture_output=True, text=True
    ).stdout.split("\n")
    edited = sum(1 for line in dirty if line.strip())
    if edited:
        return f"{head.stdout.strip()} with {edited} file(s) of stream_release/ not committed"
    return head.stdout.strip()


# -- services and probes -----------------------------------------------------------------------


@dataclass
class Services:
    bootstrap: str
    broker_pid: int
    cluster: RedisClusterNodes
    clients: dict[str, redis.Redis] = field(default_factory=dict)

    def node_clients(self, masters_only: bool = False) -> list[redis.Redis]:
        """A client of each node (of each master), kept for the run."""
        addresses = self.cluster.masters() if masters_only else self.cluster.addresses
        for a in addresses:
            if a not in self.clients:
                host, _, port = a.rpartition(":")
                self.clients[a] = redis.Redis(host=host, port=int(port))
        return [self.clients[a] for a in addresses]

    def close(self) -> None:
        for client in self.clients.values():
            client.close()

    def used_memory(self) -> int:
        """``used_memory`` summed over the masters."""
        return sum(int(c.info("memory")["used_memory"]) for c in self.node_clients(True))

    def redis_cpu(self) -> float:
        return sum(
            float(i["used_cpu_sys"]) + float(i["used_cpu_user"])
            for i in (c.info("cpu") for c in self.node_clients())
        )

    def unlink_series(self, prefix: str) -> None:
        """Delete every key of the series ``prefix`` on every master (one UNLINK per slot)."""
        for client in self.node_clients(True):
            by_slot: dict[int, list[bytes]] = {}
            for pattern in RedisKeys(prefix).matches:
                for key in client.scan_iter(match=pattern, count=10_000):
                    by_slot.setdefault(key_slot(key), []).append(key)
            for keys in by_slot.values():
                for start in range(0, len(keys), 10_000):
                    client.unlink(*keys[start : start + 10_000])


@contextmanager
def services_running(work: Path) -> Iterator[Services]:
    """The Kafka broker and the Redis Cluster, stopped when the block exits."""
    (work / "kafka").mkdir()
    (work / "redis-cluster").mkdir()
    node = KafkaNode(work / "kafka")
    with node.running() as broker, RedisClusterNodes.started(work / "redis-cluster") as cluster:
        services = Services(node.bootstrap, broker.pid, cluster)
        try:
            yield services
        finally:
            services.close()


class CpuProbe:
    """Cumulative CPU seconds of the workers, the broker, Redis, this process, the machine."""

    def __init__(self, services: Services, workers: list[ManagedProcess]) -> None:
        self.services, self.workers = services, workers

    def sample(self) -> dict[str, float]:
        own = os.times()
        return {
            "workers": sum(process_cpu(w.pid) for w in self.workers),
            "broker": process_cpu(self.services.broker_pid),
            "redis": self.services.redis_cpu(),
            "producer": own.user + own.system,
            "machine": machine_cpu(),
        }


class Timeline(threading.Thread):
    """Polls the release in flight; :attr:`marks`: label -> step -> first time seen (epoch s).

    Steps: ``begin``, ``vote:<p>`` (of the last round), ``union``, ``confirm:<p>``,
    ``outcome``, ``part:<p>``, ``finished``; ``round``: the last round's number."""

    def __init__(self, url: str, prefix: str, interval: float) -> None:
        super().__init__(daemon=True)
        self.client = redis.RedisCluster.from_url(url)
        self.keys, self.interval = RedisKeys.for_release(prefix), interval
        self.marks: dict[str, dict[str, float]] = {}
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        flight: str | None = None
        try:
            while not self.stopping.wait(self.interval):
                flight = self.poll(flight)
        except BaseException as exc:  # reported by stop()
            self.error = exc
        finally:
            self.client.close()

    def stop(self) -> None:
        self.stopping.set()
        self.join()
        if self.error is not None:
            raise StreamReleaseError(f"the timeline poller failed: {self.error!r}")

    def poll(self, flight: str | None) -> str | None:
        now = time.time()
        raw = cast("dict[bytes, bytes]", self.client.hgetall(self.keys.current))
        current = {k.decode(): v.decode() for k, v in raw.items()}
        label = current.get("label")
        if flight is not None and flight != label:
            self.marks[flight].setdefault("finished", now)
        if label is None:
            return None
        marks = self.marks.setdefault(label, {"begin": now})
        round_ = float(current.get("round", "0"))
        if round_ != marks.get("round", 0.0):  # another round: every part votes again
            for name in [m for m in marks if m.startswith("vote:")]:
                del marks[name]
            marks["round"] = round_
        for step in ("union", "outcome"):
            if step in current:
                marks.setdefault(step, now)
        steps = {
            "vote": self.client.hkeys(self.keys.votes(label)),
            "confirm": self.client.hkeys(self.keys.confirms(label)),
            "part": self.client.smembers(self.keys.parts(label)),
        }
        for step, shards in steps.items():
            for shard in cast("list[bytes]", shards):
                marks.setdefault(f"{step}:{int(shard)}", now)
        return label


# -- worker logs -------------------------------------------------------------------------------


def worker_events(log: Path) -> list[Row]:
    """The JSON log lines of a worker that carry an ``event``, with ``t`` (epoch seconds)."""
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if not line.startswith("{") or '"event"' not in line:
            continue
        try:
            entry = json.loads(line)
            entry["t"] = datetime.strptime(entry["time"], "%Y-%m-%d %H:%M:%S,%f").timestamp()
        except (ValueError, KeyError):
            continue
        out.append(entry)
    return out


def owners_now(workers: list[ManagedProcess], partitions: int) -> dict[int, int] | None:
    """Shard -> worker, when every worker's last ``shards_assigned`` together give every shard
    once; else None."""
    owners: dict[int, int] = {}
    for index, worker in enumerate(workers):
        assigned = [e for e in worker_events(worker.log) if e["event"] == "shards_assigned"]
        if not assigned:
            return None
        for shard in assigned[-1]["shards"]:
            if shard in owners:
                return None
            owners[shard] = index
    return owners if len(owners) == partitions else None


def wait_for_owners(workers: list[ManagedProcess], partitions: int) -> dict[int, int]:
    deadline = time.monotonic() + 180
    while (owners := owners_now(workers, partitions)) is None:
        for worker in workers:
            worker.check_alive()
        if time.monotonic() > deadline:
            raise StreamReleaseError("the workers' group did not give every shard an owner")
        time.sleep(0.5)
    time.sleep(1.0)  # settled: a rebalance in progress would show in the logs
    return owners_now(workers, partitions) or owners


# -- one series --------------------------------------------------------------------------------


def population(table: Table, rows: int, seed: int, prefix: str) -> ChurnPopulation:
    """load.py's population: Adult rows with replacement, 20 % kept, 20 % of those changed."""
    return ChurnPopulation(
        table, ADULT_QID, ADULT_SENSITIVE, rows, keep=KEEP, change=CHANGE, seed=seed, prefix=prefix
    )


def snapshot(churn: ChurnPopulation) -> RawSnapshot:
    return snapshot_from_columns(*churn.advance())


@dataclass
class Series:
    """One series run by W workers, and what it left."""

    workers: int
    partitions: int
    prefix: str
    key: str
    config: Path
    archive: Path
    kafka: KafkaSettings
    rows: list[Row] = field(default_factory=list)
    owners: dict[int, int] = field(default_factory=dict)
    events: list[list[Row]] = field(default_factory=list)
    marks: dict[str, dict[str, float]] = field(default_factory=dict)
    rss: list[tuple[int, int]] = field(default_factory=list)
    """Per worker: VmHWM after the first release, at the end."""
    settled: float = 0.0
    """When every shard had an owner (epoch s)."""
    done: float = 0.0
    """When the last manifest was read (epoch s), before the workers stop."""


def new_series(work: Path, services: Services, workers: int, partitions: int) -> Series:
    work.mkdir(parents=True)
    suffix = uuid.uuid4().hex[:12]
    topics = TopicSettings(**{n: f"{t}.{suffix}" for n, t in TopicSettings().model_dump().items()})
    kafka = KafkaSettings(bootstrap=services.bootstrap, topics=topics, partitions=partitions)
    asyncio.run(ensure_topics(kafka, topics.every))
    return Series(
        workers, partitions, f"sr-scale-{suffix}", secrets.token_hex(32),
        write_demo_config(work), work / "archive", kafka,
    )  # fmt: skip


def run_series(
    series: Series,
    services: Services,
    releases: list[tuple[str, Callable[[], RawSnapshot]]],
    poll_s: float,
    timeout: float,
) -> None:
    """Start the workers, send ``releases`` (label, snapshot maker) one by one, stop them."""
    env = worker_env(
        bootstrap=services.bootstrap,
        redis_url=services.cluster.url,
        archive=series.archive,
        key=series.key,
        extra={
            **WORKER_SETTINGS,
            "SR_KAFKA_TOPICS": series.kafka.topics.model_dump_json(),
            "SR_KAFKA_GROUP_ID": f"sr-scale-{uuid.uuid4().hex[:12]}",
            "SR_KAFKA_PARTITIONS": str(series.partitions),
            "SR_REDIS_CLUSTER": "true",
            "SR_HISTORY_PREFIX": series.prefix,
        },
    )
    work = series.config.parent
    with ExitStack() as stack:
        workers = [
            stack.enter_context(
                managed_process(
                    f"worker {i}", worker_argv(series.config), work / f"worker-{i}.log", work,
                    env=env,
                )
            )
            for i in range(series.workers)
        ]  # fmt: skip
        series.owners = wait_for_owners(workers, series.partitions)
        series.settled = time.time()
        timeline = Timeline(services.cluster.url, series.prefix, poll_s)
        timeline.start()
        try:
            asyncio.run(send_releases(series, CpuProbe(services, workers), releases, timeout))
            series.done = time.time()
        except Exception:
            for worker in workers:  # the workers' logs hold no id, key or value
                print(f"== {worker.name}, the end of its log:\n{worker.tail(2500)}", flush=True)
            raise
        finally:
            timeline.stop()
        series.marks = timeline.marks
        first = series.rss or [(peak_rss(w.pid), 0) for w in workers]
        series.rss = [(r0, peak_rss(w.pid)) for (r0, _), w in zip(first, workers, strict=True)]
    series.events = [worker_events(work / f"worker-{i}.log") for i in range(series.workers)]


async def send_releases(
    series: Series,
    probe: CpuProbe,
    releases: list[tuple[str, Callable[[], RawSnapshot]]],
    timeout: float,
) -> None:
    topics = series.kafka.topics
    consumer = AIOKafkaConsumer(
        bootstrap_servers=series.kafka.bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed",
    )
    await consumer.start()
    try:
        watched = [TopicPartition(topics.manifests, 0), TopicPartition(topics.status, 0)]
        consumer.assign(watched)
        await consumer.seek_to_beginning(*watched)
        for label, make in releases:
            raw = make()
            cpu = probe.sample()
            first = time.time()
            await send_snapshot(series.kafka, label, raw)
            sealed = time.time()
            manifest = await next_manifest(consumer, topics, label, probe.workers, timeout)
            read = time.time()
            used = {k: v - cpu[k] for k, v in probe.sample().items()}
            series.rows.append(
                {"label": label, "rows": raw.n_rows, "first": first, "sealed": sealed,
                 "read": read, "manifest": manifest, "cpu": used}
            )  # fmt: skip
            if not series.rss:  # the first release: the workers' memory before the big ones
                series.rss = [(peak_rss(w.pid), 0) for w in probe.workers]
            print(
                f"  W={series.workers} {label:>7} {raw.n_rows:>10,} rows: end to end "
                f"{read - first:7.2f} s, seal -> manifest {read - sealed:7.2f} s",
                flush=True,
            )
    finally:
        await consumer.stop()


async def next_manifest(
    consumer: AIOKafkaConsumer,
    topics: TopicSettings,
    label: str,
    workers: list[ManagedProcess],
    timeout: float,
) -> Row:
    """The manifest of ``label``; a status message about it (refused, blocked) or a worker
    gone ends the run."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for worker in workers:
            worker.check_alive()
        batch = await consumer.getmany(timeout_ms=20)
        for tp, records in batch.items():
            for record in records:
                value: Row = json.loads(record.value)
                if value.get("release") != label:
                    continue
                if tp.topic == topics.status:
                    raise StreamReleaseError(
                        f"release {label!r} {value['status']}: {value['error']}: "
                        f"{value['reason']}; lower --partitions or raise the row counts"
                    )
                return value
    raise TimeoutError(f"no manifest for {label!r} within {timeout:.0f} s")


def close_series(series: Series, services: Services) -> None:
    """Delete the series' keys and topics."""
    services.unlink_series(series.prefix)

    async def delete() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=series.kafka.bootstrap)
        await admin.start()
        try:
            await admin.delete_topics(series.kafka.topics.every)
        finally:
            await admin.close()

    asyncio.run(delete())


# -- the figures of a release ------------------------------------------------------------------


def step_times(marks: dict[str, float], partitions: int, end: float) -> dict[str, float]:
    """Every step's time; a step not seen (passed between two polls) takes the next one's."""
    stages = [
        ["begin"], [f"vote:{p}" for p in range(partitions)], ["union"],
        [f"confirm:{p}" for p in range(partitions)], ["outcome"],
        [f"part:{p}" for p in range(partitions)], ["finished"],
    ]  # fmt: skip
    out, later = dict(marks), min(marks.get("finished", end), end)
    for stage in reversed(stages):
        for name in stage:
            out[name] = min(out.get(name, later), later)
        later = min(out[name] for name in stage)
    return out


def barrier_wait(times: dict[str, float], step: str, done: float, owners: dict[int, int]) -> float:
    """From the first worker done with all its shards' ``step`` to ``done``."""
    by_worker: dict[int, float] = {}
    for shard, worker in owners.items():
        by_worker[worker] = max(by_worker.get(worker, 0.0), times[f"{step}:{shard}"])
    return max(0.0, done - min(by_worker.values()))


def release_figures(series: Series, row: Row) -> Row:
    """Throughput, the steps of the cut and the serial part of one release."""
    sequence = row["manifest"]["sequence"]
    filed = (series.archive / f"manifest-{sequence:04d}.json").stat().st_mtime
    sends = [
        e for ev in series.events for e in ev if e["event"] == "sent" and e["sequence"] == sequence
    ]
    if not sends:
        raise StreamReleaseError(f"release {sequence}: no worker logged its send (event 'sent')")
    sent = sends[0]
    send_start = sent["t"] - sent["send_s"]
    t = step_times(series.marks.get(row["label"], {}), series.partitions, min(filed, send_start))
    last_part = max(t[f"part:{p}"] for p in range(series.partitions))
    barriers = sum(
        barrier_wait(t, step, done, series.owners)
        for step, done in (("vote", t["union"]), ("confirm", t["outcome"]), ("part", last_part))
    )
    tail = row["read"] - last_part
    e2e = row["read"] - row["first"]
    rate = row["rows"] / e2e
    return {
        "W": series.workers, "release": row["label"], "rows": row["rows"],
        "send": row["sealed"] - row["first"], "seal_to_manifest": row["read"] - row["sealed"],
        "e2e": e2e, "rate": rate, "per_core": rate / min(series.workers, CORES),
        "ingest_tail": t["begin"] - row["sealed"], "votes": t["union"] - t["begin"],
        "confirms": t["outcome"] - t["union"], "commits": last_part - t["outcome"],
        "barriers": barriers, "finish": max(0.0, t["finished"] - last_part),
        "filing": max(0.0, filed - t["finished"]), "handoff": max(0.0, send_start - filed),
        "sender": sent["send_s"], "tail": tail, "serial": barriers + tail,
        "serial_share": (barriers + tail) / e2e, "rounds": int(t.get("round", 0.0)) + 1,
        "cpu": row["cpu"], "lines_bytes": (series.archive / f"release-{sequence:04d}.jsonl")
        .stat().st_size,
    }  # fmt: skip


def series_summary(series: Series, figures: list[Row]) -> Row:
    """Audit, memory, rebalances and warnings of one W's series."""
    started = time.perf_counter()
    report = audit_directory(series.archive, config=series.config)
    audit_s = time.perf_counter() - started
    main = [f for f in figures if f["release"].startswith("L")]
    rows_owned = [
        main[-1]["rows"] * sum(1 for w in series.owners.values() if w == i) / series.partitions
        for i in range(series.workers)
    ]
    growth = [
        (end - first) / max(n, 1) for (first, end), n in zip(series.rss, rows_owned, strict=True)
    ]
    warnings: dict[str, int] = {}
    for events in series.events:
        for e in events:
            in_series = series.settled < e["t"] < series.done
            if in_series and e.get("level") in ("WARNING", "ERROR", "CRITICAL"):
                name = f"{e['event']} ({e['error']})" if "error" in e else e["event"]
                warnings[name] = warnings.get(name, 0) + 1
    rebalances = sum(
        1
        for events in series.events
        for e in events
        if e["event"] == "shards_assigned" and series.settled < e["t"] < series.done
    )
    return {
        "W": series.workers, "audit": f"{'passed' if report.ok else 'FAILED'} "
        f"({len(report.releases)} releases, {audit_s:.1f} s)", "ok": report.ok,
        "rss_peak": max(end for _, end in series.rss), "rss_per_row": max(growth),
        "rss_base": max(first for first, _ in series.rss),
        "rebalances": rebalances, "warnings": warnings,
        "owned": sorted(list(series.owners.values()).count(i) for i in range(series.workers)),
    }  # fmt: skip


# -- the model ---------------------------------------------------------------------------------


def fit_line(x: NDArray[np.float64], y: NDArray[np.float64]) -> tuple[float, float]:
    """Least squares ``y = slope x + intercept`` with both >= 0 (a time per row and a fixed
    time cannot be negative; at a small N the noise could make them so): (slope, intercept)."""
    design = np.column_stack([x, np.ones_like(x)])
    (slope, intercept), _ = nnls(design, y)
    return float(slope), float(intercept)


def column(figures: list[Row], name: str) -> NDArray[np.float64]:
    return np.array([f[name] for f in figures], dtype=np.float64)


def fit_model(figures: list[Row], baseline: int) -> Row:
    """The coefficients of T(N, W), each from the part of the release it describes:

    a, b_t: the serial tail less the hand-off (finish, filing, the sender, the read) on N,
    every release; h: the mean hand-off at W >= 2; b_b, d: the barrier waits on N / W_eff at
    W >= 2 (poll latency; the slowest worker's extra share); c, b_p: the parallel seconds on
    N / W_eff at the baseline W. Also c per W and the sender's own line."""
    multi = [f for f in figures if f["W"] > 1]
    n = column(figures, "rows")
    a, b_t = fit_line(n, column(figures, "tail") - column(figures, "handoff"))
    a_send, b_send = fit_line(n, column(figures, "sender"))
    d, b_b = 0.0, 0.0
    if multi:
        share = column(multi, "rows") / np.array([min(f["W"], CORES) for f in multi])
        d, b_b = fit_line(share, column(multi, "barriers"))
    c_by_w = {}
    for w in sorted({f["W"] for f in figures}):
        mine = [f for f in figures if f["W"] == w]
        x = column(mine, "rows") / min(w, CORES)
        c_by_w[w] = fit_line(x, column(mine, "e2e") - column(mine, "serial"))
    c, b_p = c_by_w[baseline]
    handoff = mean(multi, "handoff") if multi else 0.0
    return {"a": a, "b_t": b_t, "h": handoff, "d": d, "b_b": b_b, "c": c, "b_p": b_p,
            "c_by_w": c_by_w, "a_send": a_send, "b_send": b_send, "multi": len(multi),
            "all": len(figures)}  # fmt: skip


def serial_time(model: Row, rows: float, workers: int, cores: int | None = None) -> float:
    """a N + b_t, and at W >= 2 the hand-off and the barriers h + b_b + d N / W."""
    w = workers if cores is None else min(workers, cores)
    alone = model["a"] * rows + model["b_t"]
    return float(alone + (model["h"] + model["b_b"] + model["d"] * rows / w if workers > 1 else 0))


def model_time(model: Row, rows: float, workers: int, cores: int | None = None) -> float:
    """T(N, W) = a N + b + c' N / W: the serial part and b_p + c N / W (W capped at
    ``cores`` when given)."""
    w = workers if cores is None else min(workers, cores)
    return serial_time(model, rows, workers, cores) + float(model["b_p"] + model["c"] * rows / w)


# -- Redis memory of the history ---------------------------------------------------------------


def appearance_model(rows: int, releases: int, keep: float) -> NDArray[np.float64]:
    """(releases + 1,) expected individuals by the number of releases r they appear in.

    Release 1 brings ``rows`` new individuals, each later one ``rows - round(keep rows)``; an
    individual of a release is kept in the next with q = round(keep rows) / rows, so one new in
    release j appears r < K - j + 1 times with q^(r-1) (1 - q), and K - j + 1 times with
    q^(K-j)."""
    kept = round(keep * rows)
    q = kept / rows
    out = np.zeros(releases + 1)
    for j in range(1, releases + 1):
        new = rows if j == 1 else rows - kept
        span = releases - j + 1
        for r in range(1, span):
            out[r] += new * q ** (r - 1) * (1 - q)
        out[span] += new * q ** (span - 1)
    return out


def partition_of(ids: list[str], partitions: int) -> NDArray[np.int64]:
    """Each id's partition under Kafka's default partitioner (murmur2 of the UTF-8 key)."""
    every = list(range(partitions))
    choose = DefaultPartitioner()
    return np.array([choose(i.encode(), every, every) for i in ids], dtype=np.int64)


def history_entries(series: Series, services: Services, ids: list[str]) -> NDArray[np.int64]:
    """(len(ids),) the (individual, value) entries of each id's history key (0: none)."""
    settings = load_settings(series.config, history={"key": series.key})
    pseudonyms = Pseudonymizer(load_key(settings.history)).pseudonyms(ids)
    shards = partition_of(ids, series.partitions)
    entries = np.zeros(len(ids), dtype=np.int64)
    client = redis.RedisCluster.from_url(services.cluster.url)
    try:
        for p in range(series.partitions):
            where = np.flatnonzero(shards == p)
            keys = RedisKeys.for_shard(series.prefix, p).individuals(pseudonyms[where])
            for start in range(0, len(keys), 10_000):
                pipe = client.pipeline(transaction=False)  # type: ignore[no-untyped-call]
                for key in keys[start : start + 10_000]:
                    pipe.strlen(key)
                lengths = np.array(pipe.execute(), dtype=np.int64)
                entries[where[start : start + 10_000]] = lengths // ENTRY_DTYPE.itemsize
    finally:
        client.close()
    return entries


def record_bytes(series: Series, services: Services, releases: int) -> int:
    """Bytes of every release record (each shard's part, the merged manifest) in Redis."""
    names = [RedisKeys.for_release(series.prefix).record(s) for s in range(1, releases + 1)]
    for p in range(series.partitions):
        shard = RedisKeys.for_shard(series.prefix, p)
        names += [shard.record(s) for s in range(1, releases + 1)]
    client = redis.RedisCluster.from_url(services.cluster.url)
    try:
        return sum(int(client.strlen(name)) for name in names)
    finally:
        client.close()


def measure_history(
    args: argparse.Namespace, services: Services, table: Table, work: Path, workers: int
) -> Row:
    """The history series (no warm-up): memory, entries by appearances, records."""
    series = new_series(work, services, workers, args.partitions)
    churn = population(table, args.history_rows, args.seed, "L")
    seen = np.zeros(0, dtype=np.int64)

    def make() -> RawSnapshot:
        nonlocal seen
        raw = snapshot(churn)
        seen = np.pad(seen, (0, churn.next_id - seen.size))
        seen[churn.ids] += 1
        return raw

    baseline = services.used_memory()
    labels = [(f"L{k:02d}", make) for k in range(1, args.history_releases + 1)]
    try:
        run_series(series, services, labels, args.poll_ms / 1000, args.timeout)
        memory = services.used_memory() - baseline
        ids = [f"L{i}" for i in range(seen.size)]
        entries = history_entries(series, services, ids)
        records = record_bytes(series, services, args.history_releases)
    finally:
        close_series(series, services)
    h = {int(r): float(entries[seen == r].mean()) for r in np.unique(seen)}
    return {"memory": memory, "records": records, "entries": int(entries.sum()),
            "individuals": int((entries > 0).sum()), "tracked": int(seen.size),
            "by_r": h, "counts": np.bincount(seen), "rows": args.history_rows,
            "releases": args.history_releases, "W": workers}  # fmt: skip


def project_history(hist: Row, rows: int) -> Row:
    """Individuals, entries and memory of ``rows``-row releases after the same number."""
    model = appearance_model(rows, hist["releases"], KEEP)
    largest = max(hist["by_r"])
    h = np.array([hist["by_r"].get(r, hist["by_r"][largest]) for r in range(1, model.size)])
    entries = float(model[1:] @ h)
    per_entry = (hist["memory"] - hist["records"]) / hist["entries"]
    records = hist["records"] / (hist["rows"] * hist["releases"]) * rows * hist["releases"]
    return {"individuals": float(model.sum()), "entries": entries, "per_entry": per_entry,
            "history": entries * per_entry, "records": records}  # fmt: skip


# -- output ------------------------------------------------------------------------------------


def table_lines(head: list[str], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def gib(n: float) -> str:
    return f"{n / 2**30:,.2f} GiB"


def mean(figures: list[Row], name: str) -> float:
    return float(np.mean([f[name] for f in figures]))


def throughput_row(f: Row, ref: Row) -> list[str]:
    main = f["release"].startswith("L")
    return [
        str(f["W"]), f["release"], f"{f['rows']:,}", f"{f['send']:.2f}",
        f"{f['seal_to_manifest']:.2f}", f"{f['e2e']:.2f}", f"{f['rate']:,.0f}",
        f"{f['rate'] / ref['rate']:.2f}" if main else "", f"{f['per_core']:,.0f}",
        f"{f['per_core'] / ref['per_core']:.2f}" if main else "",
    ]  # fmt: skip


STEPS = ("ingest_tail", "votes", "confirms", "commits", "barriers", "finish", "filing",
         "handoff", "sender", "tail", "serial")  # fmt: skip


def steps_row(f: Row) -> list[str]:
    steps = [f"{f[k]:.2f}" for k in STEPS]
    return [str(f["W"]), f["release"], *steps, f"{f['serial_share']:.1%}", str(f["rounds"])]


def cpu_row(f: Row) -> list[str]:
    cpu = f["cpu"]
    ours = [cpu[k] for k in ("workers", "broker", "redis", "producer")]
    others = max(0.0, cpu["machine"] - sum(ours))
    return [
        str(f["W"]), f["release"], f"{f['e2e']:.2f}", *(f"{v:.2f}" for v in ours),
        f"{others:.2f}", f"{cpu['machine'] / f['e2e']:.2f} of {CORES}",
    ]  # fmt: skip


def per_w_row(s: Row, mine: list[Row], ref: Row) -> list[str]:
    warnings = ", ".join(f"{k} {v}" for k, v in s["warnings"].items()) or "none"
    return [
        str(s["W"]), "/".join(map(str, s["owned"])), f"{mean(mine, 'e2e'):.2f}",
        f"{mean(mine, 'rate'):,.0f}", f"{mean(mine, 'rate') / ref['rate']:.2f}",
        f"{mean(mine, 'per_core'):,.0f}", f"{mean(mine, 'per_core') / ref['per_core']:.2f}",
        f"{mean(mine, 'serial'):.2f}", f"{mean(mine, 'serial_share'):.1%}",
        gib(s["rss_peak"]), str(s["rebalances"]), warnings, s["audit"],
    ]  # fmt: skip


def report(
    args: argparse.Namespace, figures: list[Row], summaries: list[Row], hist: Row,
    before: Row, after: Row, wall_s: float,
) -> list[str]:  # fmt: skip
    baseline = min(s["W"] for s in summaries)
    main = [f for f in figures if f["release"].startswith("L")]
    mine = {s["W"]: [f for f in main if f["W"] == s["W"]] for s in summaries}
    ref = {k: mean(mine[baseline], k) for k in ("rate", "per_core")}
    out = [
        "# Scale-out benchmark",
        "",
        f"`python benchmarks/scale_out.py {' '.join(sys.argv[1:])}`",
    ]
    if args.rows < DEFAULT_ROWS:
        out += [
            "",
            f"**Smoke run** ({args.rows:,} rows per release, below the default "
            f"{DEFAULT_ROWS:,}): it shows the method works end to end; its figures are "
            "dominated by fixed costs and say little about the service at scale. The "
            "measurement: `python benchmarks/scale_out.py` (defaults) on a quiet machine.",
        ]
    load = [" / ".join(f"{v:.2f}" for v in state["load"]) for state in (before, after)]
    others = [", ".join(state["others"]) or "none" for state in (before, after)]
    out += [
        "",
        f"Machine: {os.cpu_count()} cores ({CORES} usable); load average before {load[0]}, "
        f"after {load[1]}; other processes (over 5 % of a core) before: {others[0]}; after: "
        f"{others[1]}. Sources: {source_state()}. The Kafka broker, 6 Redis nodes, the "
        f"producer (this process) and the workers share these cores. Wall time "
        f"{wall_s / 60:.1f} min.",
        "",
        f"Each W: warm-up ({WARM_UP_ROWS:,} rows, not shown), calibration C01 "
        f"({args.small_rows:,} rows), {args.releases} releases L01.. of {args.rows:,} rows "
        f"(load.py's churn), P = {args.partitions} shards. Ratios: against W = {baseline}, "
        "same run.",
        "",
        "## Throughput",
        "",
    ]
    out += table_lines(
        ["W", "release", "rows", "send s", "seal→manifest s", "end to end s", "rows/s",
         f"vs W={baseline}", "rows/s per core", f"per core vs W={baseline}"],
        [throughput_row(f, ref) for f in figures],
    )  # fmt: skip
    out += [
        "",
        "## The cut's steps and the serial part (seconds)",
        "",
        "ingest tail: seal → release begun (the last rows staged); votes, confirms, commits: "
        "the steps on the shards (barrier waits included); barriers: time only the slowest "
        "worker worked (votes, confirms, parts); finish: last part → release record; filing: "
        "→ merged manifest file; hand-off: → the owner of shard 0 starts sending (at once "
        "when it finished the release, else at its next publication timer, "
        "service.retry_interval_s); sender: "
        "its send_s (every group line, one transaction); serial = barriers + tail (last part "
        f"→ manifest read). The workers log none of the cut's steps on shards: begin, votes, "
        "union, confirms, outcome, parts and finish are the first poll (every "
        f"{args.poll_ms} ms) that saw them in `{{prefix:release}}:current` and the release's "
        "votes / confirms / parts (a step passed between two polls takes the next one's "
        "time); owners from `shards_assigned`, the sender from `sent` (its end − send_s); the "
        "filing from the merged manifest file's mtime.",
        "",
    ]
    out += table_lines(
        ["W", "release", "ingest tail", "votes", "confirms", "commits", "barriers", "finish",
         "filing", "hand-off", "sender", "tail", "serial", "serial share", "rounds"],
        [steps_row(f) for f in figures],
    )  # fmt: skip
    out += ["", "## CPU seconds during each release (first record → manifest read)", ""]
    out += table_lines(
        ["W", "release", "wall s", "workers", "broker", "Redis (6 nodes)", "producer",
         "other processes", "cores busy"],
        [cpu_row(f) for f in figures],
    )  # fmt: skip
    out += ["", "## Per W (means of the L releases)", ""]
    out += table_lines(
        ["W", "shards per worker", "end to end s", "rows/s", f"vs W={baseline}", "per core",
         f"vs W={baseline}", "serial s", "serial share", "worker peak RSS",
         "rebalances in the series", "worker warnings in the series (error)", "audit"],
        [per_w_row(s, mine[s["W"]], ref) for s in summaries],
    )  # fmt: skip
    out += model_section(args, figures, summaries, baseline)
    out += history_section(args, hist)
    return out


def model_section(
    args: argparse.Namespace, figures: list[Row], summaries: list[Row], baseline: int
) -> list[str]:
    model = fit_model(figures, baseline)
    main = [f for f in figures if f["release"].startswith("L")]
    out = [
        "",
        "## Model: T(N, W) = a·N + b + c·N/W",
        "",
        f"* a = {model['a'] * 1e6:.3f} µs per row, b_t = {model['b_t']:.3f} s: least squares "
        "(≥ 0) on N of the serial tail less the hand-off (finish, filing, the sender, the read) "
        f"over all {model['all']} measured releases (calibration included).",
        f"* h = {model['h']:.3f} s: the mean hand-off over the {model['multi']} releases with "
        "W ≥ 2 (not work: the phase of the sender's publication timer, between 0 and "
        "service.retry_interval_s whenever another worker finished the release).",
        f"* b_b = {model['b_b']:.3f} s, d = {model['d'] * 1e6:.3f} µs per row: least squares "
        f"(≥ 0) of the barrier waits on N / min(W, {CORES}) over the same releases (poll "
        "latency; the slowest worker's extra share).",
        f"* c = {model['c'] * 1e6:.3f} µs per row, b_p = {model['b_p']:.3f} s: least squares "
        f"(≥ 0) of the parallel seconds (end to end − serial) on N / min(W, {CORES}) over W = "
        f"{baseline}'s releases.",
        f"* so b = b_t + h + b_b + b_p = "
        f"{model['b_t'] + model['h'] + model['b_b'] + model['b_p']:.3f} s and the N / W term is "
        f"(c + d) = {(model['c'] + model['d']) * 1e6:.3f} µs per row (W = 1: b = b_t + b_p, "
        "c alone).",
        "* c fitted on each W's own releases (parallel efficiency on this machine = c(W = "
        f"{baseline}) / c(W)): "
        + ", ".join(
            f"W = {w}: {c * 1e6:.3f} µs ({model['c'] / c:.2f})" if c > 0 else f"W = {w}: {c:.2e}"
            for w, (c, _) in model["c_by_w"].items()
        ),
        f"* the sender alone: {model['a_send'] * 1e6:.3f} µs per row + {model['b_send']:.3f} s.",
        "",
    ]
    checks = []
    for w in sorted({f["W"] for f in main}):
        mine = [f for f in main if f["W"] == w]
        n, t = mean(mine, "rows"), mean(mine, "e2e")
        m = model_time(model, n, w, CORES)
        checks.append([str(w), f"{n:,.0f}", f"{t:.2f}", f"{m:.2f}", f"{m / t:.2f}"])
    head = ["W", "N", "measured end to end s (mean)", f"model s (W ≤ {CORES} cores)"]
    out += table_lines([*head, "model / measured"], checks)
    n = float(args.project_rows)
    base = next(s for s in summaries if s["W"] == baseline)
    rss_row, rss0 = base["rss_per_row"], base["rss_base"]
    one = model_time(model, n, 1)
    out += [
        "",
        f"### Projection: a {n:,.0f}-row release",
        "",
        "One worker per core, each on cores of its own; P ≥ W shards, evenly owned; Kafka "
        "and Redis sized not to be the bottleneck; c from W = "
        f"{baseline} on this shared machine (pessimistic). Worker RSS: W = {baseline}'s peak "
        f"after the warm-up ({gib(rss0)}) plus its growth per row owned ({rss_row:,.0f} bytes) "
        "times N / W.",
        "",
    ]
    rows = []
    for w in args.project_workers:
        t, serial = model_time(model, n, w), serial_time(model, n, w)
        rows.append([
            str(w), f"{t:,.1f}", f"{serial:,.1f}", f"{model['a'] * n:,.1f}", f"{serial / t:.1%}",
            f"{one / t:.1f}", f"{n / t:,.0f}", f"{n / w:,.0f}", gib(rss0 + rss_row * n / w),
        ])  # fmt: skip
    out += table_lines(
        ["W", "T s", "serial s", "of which a·N s", "serial share", "speed-up vs W=1 (model)",
         "rows/s", "rows per worker", "worker RSS"],
        rows,
    )  # fmt: skip
    lines_per_row = sum(f["lines_bytes"] for f in main) / sum(f["rows"] for f in main)
    send = model["a_send"] * n + model["b_send"]
    producer_rate = float(np.mean([f["rows"] / f["send"] for f in main]))
    out += [
        "",
        f"The single sender at {n:,.0f} rows: {send:,.0f} s and {gib(lines_per_row * n)} of "
        f"group lines ({lines_per_row:.0f} bytes per row) read from Redis and sent in one "
        f"transaction by one worker, whatever W. {transaction_limit(send)}",
        f"One producer at this run's rate ({producer_rate:,.0f} rows/s) would need "
        f"{n / producer_rate:,.0f} s to send the release: the projection assumes producers "
        "that keep up.",
    ]
    return out


def transaction_limit(send_s: float) -> str:
    """What the release producer's transaction timeout says of a send of ``send_s``."""
    timeout_s = transactional_options(KafkaSettings())["transaction_timeout_ms"] / 1000
    verdict = "longer: the coordinator would abort it" if send_s > timeout_s else "within it"
    return f"The worker's transaction timeout is {timeout_s:.0f} s: {verdict}."


def history_section(args: argparse.Namespace, hist: Row) -> list[str]:
    proj = project_history(hist, args.project_rows)
    model = appearance_model(hist["rows"], hist["releases"], KEEP)
    out = [
        "",
        f"## Redis Cluster memory of the history ({hist['releases']} releases of "
        f"{hist['rows']:,} rows, W = {hist['W']})",
        "",
        f"used_memory of the masters − baseline: {hist['memory'] / 2**20:,.1f} MiB; release "
        f"records (zlib of every shard's part manifest and group lines, the merged manifests; "
        f"never deleted): {hist['records'] / 2**20:,.1f} MiB; history: {hist['entries']:,} "
        f"(individual, value) entries of {hist['individuals']:,} individuals "
        f"({hist['tracked']:,} sent): "
        f"**{proj['per_entry']:.1f} bytes per entry** (records subtracted), "
        f"{hist['memory'] / hist['entries']:.1f} with them. Replicas hold as much again.",
        "",
    ]
    counts = np.pad(hist["counts"], (0, max(0, model.size - hist["counts"].size)))
    out += table_lines(
        ["releases appeared in (r)", "individuals measured", "churn model", "entries each"],
        [
            [str(r), f"{counts[r]:,}", f"{model[r]:,.0f}", f"{hist['by_r'].get(r, np.nan):.2f}"]
            for r in range(1, model.size)
            if model[r] >= 0.5 or counts[r]
        ],
    )
    n = args.project_rows
    out += [
        "",
        f"Projection, {n:,} rows per release after {hist['releases']} releases (same churn): "
        f"{proj['individuals']:,.0f} individuals (N·(1 + {hist['releases'] - 1}·(1 − {KEEP})))"
        f", Σ_r individuals(r) × entries(r) = {proj['entries']:,.0f} entries × "
        f"{proj['per_entry']:.1f} bytes = **{gib(proj['history'])}** of history on the masters"
        f", plus {gib(proj['records'])} of release records if they stay; "
        f"{gib(2 * (proj['history'] + proj['records']))} with one replica each.",
    ]
    return out


# -- main --------------------------------------------------------------------------------------


def scale_releases(
    args: argparse.Namespace, table: Table
) -> list[tuple[str, Callable[[], RawSnapshot]]]:
    """Warm-up, calibration, then the main releases: the same snapshots for every W."""
    warm = population(table, WARM_UP_ROWS, args.seed + 1, "W")
    small = population(table, args.small_rows, args.seed + 2, "C")
    churn = population(table, args.rows, args.seed, "L")
    out: list[tuple[str, Callable[[], RawSnapshot]]] = [
        ("warm-up", lambda: snapshot(warm)),
        ("C01", lambda: snapshot(small)),
    ]
    return out + [(f"L{k:02d}", lambda: snapshot(churn)) for k in range(1, args.releases + 1)]


def ints(text: str) -> list[int]:
    """``1,2,3`` -> [1, 2, 3]."""
    return [int(v) for v in text.split(",")]


def parse_args() -> argparse.Namespace:
    doc = __doc__ or ""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rows", type=int, default=DEFAULT_ROWS)
    parser.add_argument("--releases", type=int, default=3)
    parser.add_argument("--small-rows", type=int, default=5000, help="calibration release")
    parser.add_argument("--workers", type=ints, default=[1, 2, 3])
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--history-rows", type=int, default=100_000)
    parser.add_argument("--history-releases", type=int, default=12)
    parser.add_argument("--project-rows", type=int, default=100_000_000)
    parser.add_argument("--project-workers", type=ints, default=[8, 16, 32, 64])
    parser.add_argument("--poll-ms", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=900.0, help="per release, seconds")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, help="adult.csv here (default: the bundled)")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks/results/scale_out.md")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up as on Ctrl-C
    table = read_csv_table(args.data_dir / "adult.csv") if args.data_dir else bundled_adult()
    started = time.perf_counter()
    before = machine_state()
    figures: list[Row] = []
    summaries: list[Row] = []
    print(f"scale-out: W = {args.workers}, P = {args.partitions}, {args.rows:,} rows", flush=True)
    with tempfile.TemporaryDirectory(prefix="sr-bench-scale-out-") as tmp:
        work = Path(tmp)
        with services_running(work) as services:
            for w in sorted(args.workers):
                series = new_series(work / f"w{w}", services, w, args.partitions)
                try:
                    run_series(
                        series, services, scale_releases(args, table), args.poll_ms / 1000,
                        args.timeout,
                    )  # fmt: skip
                finally:
                    close_series(series, services)
                mine = [release_figures(series, r) for r in series.rows[1:]]
                figures += mine
                summaries.append(series_summary(series, mine))
                print(f"  W={w}: audit {summaries[-1]['audit']}", flush=True)
            print(f"history: {args.history_releases} releases of {args.history_rows:,} rows")
            hist = measure_history(args, services, table, work / "history", max(args.workers))
    after = machine_state()
    lines = report(args, figures, summaries, hist, before, after, time.perf_counter() - started)
    text = "\n".join(lines) + "\n"
    print(text)
    args.out.write_text(text)
    print(f"wrote {args.out}")
    return 0 if all(s["ok"] for s in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
