"""One run of the multi-worker failure tests: a series of Adult snapshots on six shards, cut by
three workers on the real broker and the session's Redis Cluster, with a failure in the middle
(a worker killed at a kill point, a worker killed or added by the test, a master failed over)
or none; what the run left on the broker, in the cluster and in the shared archive, normalised
for comparison with another run (``test_several_workers_failures``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from stream_release.audit import audit_directory
from stream_release.config import KafkaSettings
from stream_release.faults import ENV
from stream_release.history.keys import RedisKeys
from support.crash_runs import RELEASES, RUN_TIMEOUT_S, groups_of, key_value, timeless
from support.kafka_topics import fresh_topics, read_topic, send_snapshots
from support.worker import Worker, worker_environment

SHARDS = 6
WORKERS = 3


@dataclass
class ShardedOutcome:
    """What one run left behind, normalised for comparison."""

    manifests: dict[int, dict[str, Any]]
    """By sequence, without ``elapsed_s``; every copy of one sequence's manifest identical."""
    groups: dict[tuple[int, int], bytes]
    """Group messages by (sequence, group), as a ``read_committed`` consumer reads them."""
    redis: dict[str, Any]
    archive: dict[str, Any]


class Run:
    """The workers of one run and what they share: topics, the cluster prefix, the archive."""

    def __init__(
        self, config: Path, directory: Path, bootstrap: str, cluster_url: str, prefix: str
    ) -> None:
        self.config, self.directory, self.bootstrap = config, directory, bootstrap
        self.topics = fresh_topics()
        self.archive = directory / "archive"
        self.env = worker_environment(
            bootstrap,
            cluster_url,
            self.archive,
            self.topics,
            prefix,
            extra={"SR_KAFKA_PARTITIONS": str(SHARDS), "SR_REDIS_CLUSTER": "true"},
        )
        self.workers: list[Worker] = []

    def send(self, snaps: list[Path]) -> None:
        """Send the snapshots (records on the six partitions, then a seal each)."""
        kafka = KafkaSettings(bootstrap=self.bootstrap, topics=self.topics, partitions=SHARDS)
        send_snapshots(kafka, self.config, snaps)

    def worker(
        self, name: str, *, kill_at: str | None = None, client_id: str | None = None
    ) -> Worker:
        """A started worker of the run (killing itself at ``kill_at``), its Kafka clients named
        ``client_id`` (default: the configuration's). The group's assignor deals the shards
        round-robin over its members sorted by id, and the broker makes a member's id of its
        client id and a random suffix: of two workers, the one whose client id sorts first
        owns shard 0, and sends the releases."""
        env = self.env if kill_at is None else {**self.env, ENV: kill_at}
        if client_id is not None:
            env = {**env, "SR_KAFKA_CLIENT_ID": client_id}
        worker = Worker(self.config, env, self.directory / f"{name}.log")
        worker.start()
        self.workers.append(worker)
        return worker

    def wait_for_shard(self, worker: Worker, shard: int) -> None:
        """Wait until ``worker`` logged that it was assigned ``shard`` (it is alive)."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while shard not in assigned_shards(worker):
            worker.check_alive()
            if time.monotonic() > deadline:
                pytest.fail(
                    f"shard {shard} never assigned within {RUN_TIMEOUT_S:.0f} s:\n{worker.tail()}"
                )
            time.sleep(0.2)

    def joined(self, worker: Worker) -> None:
        """Wait until ``worker`` logged shards assigned to it: it has started and joined the
        group (on a loaded machine a worker's start can outlast a release; a SIGTERM before
        its handlers exist ends it with -15, not the clean stop under test)."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not assigned_shards(worker):
            worker.check_alive()
            if time.monotonic() > deadline:
                pytest.fail(f"no shard assigned within {RUN_TIMEOUT_S:.0f} s:\n{worker.tail()}")
            time.sleep(0.2)

    def manifests(self) -> dict[int, bytes]:
        """The manifests on the broker, by sequence (copies of one must be identical)."""
        by_sequence: dict[int, bytes] = {}
        for message in read_topic(self.bootstrap, self.topics.manifests):
            sequence = json.loads(message.value)["sequence"]
            first = by_sequence.setdefault(sequence, message.value)
            assert first == message.value, f"release {sequence} was sent with other content"
        return by_sequence

    def wait(self, done: Callable[[dict[int, bytes]], bool], what: str) -> dict[int, bytes]:
        """The manifests once ``done`` holds for them (every live worker checked alive)."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while True:
            manifests = self.manifests()
            if done(manifests):
                return manifests
            if time.monotonic() > deadline:
                tails = "\n".join(f"== {w.log.name}\n{w.tail(2500)}" for w in self.workers)
                pytest.fail(f"no {what} within {RUN_TIMEOUT_S:.0f} s; logs:\n{tails}")
            time.sleep(0.3)

    def outcome(self, cluster_url: str, prefix: str) -> ShardedOutcome:
        """Stop every live worker, audit the shared archive, collect."""
        manifests = self.wait(lambda m: len(m) >= RELEASES, f"{RELEASES} releases")
        for worker in self.workers:
            if worker.proc is not None and worker.proc.poll() is None:
                self.joined(worker)
                assert worker.stop() == 0, worker.tail()
        report = audit_directory(self.archive, config=self.config)
        assert report.ok and len(report.releases) == RELEASES, report.table()
        return ShardedOutcome(
            manifests={s: timeless(json.loads(v)) for s, v in manifests.items()},
            groups=groups_of(read_topic(self.bootstrap, self.topics.releases)),
            redis=cluster_contents(cluster_url, prefix),
            archive=_archive_contents(self.archive),
        )

    def kill_all(self) -> None:
        for worker in self.workers:
            worker.kill()


def assigned_shards(worker: Worker) -> set[int]:
    """The shards ``worker`` was last assigned, as its log says (none before it logs any)."""
    shards: set[int] = set()
    for entry in log_entries(worker):
        if entry.get("event") == "shards_assigned":
            shards = set(entry["shards"])
    return shards


def log_entries(worker: Worker) -> list[dict[str, Any]]:
    """The JSON lines of ``worker``'s log (what else it printed is left out)."""
    out = []
    for line in worker.log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by SIGKILL
                continue
    return out


def cluster_contents(url: str, prefix: str) -> dict[str, Any]:
    """Every key of the series on every master, by name, with its value; a release record as
    its group lines and timeless manifest. No staging, vote or release in flight is left."""
    cluster = redis.RedisCluster.from_url(url)
    out: dict[str, Any] = {}
    try:
        for node in cluster.get_primaries():  # type: ignore[no-untyped-call]
            client = cluster.get_redis_connection(node)
            for pattern in RedisKeys(prefix).matches:
                for key in client.scan_iter(match=pattern, count=10_000):
                    out[key.decode()] = key_value(client, key, record=b":release:" in key)
    finally:
        cluster.close()
    leftovers = [n for n in out if ":votes:" in n or ":parts:" in n or n.endswith(":current")]
    assert not leftovers, leftovers
    assert not any(":stage:" in n for n in out if not n.endswith(":stage:open"))
    return out


def _archive_contents(archive: Path) -> dict[str, Any]:
    """Every file of the archive and its private side (parts included), manifests timeless;
    no temporary file may be left."""
    out: dict[str, Any] = {}
    for root in (archive, archive.with_name(archive.name + ".private")):
        for path in sorted(root.rglob("*")):
            if path.is_dir():
                continue
            name = str(path.relative_to(root.parent))
            if path.name.startswith("manifest-"):
                out[name] = timeless(json.loads(path.read_bytes()))
            else:
                out[name] = path.read_bytes()
    assert not any(name.endswith(".tmp") for name in out), sorted(out)
    return out
