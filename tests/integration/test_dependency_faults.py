"""Dependency faults: Redis or the broker restarted under a running worker (issue 4, item 2).

* **Redis away, then back.** Release 1 is published; Redis is killed (SIGKILL; it keeps an
  append-only file synced at every write, as a production Redis holding the history must);
  release 2 is sent while it is away: the worker stays up, logs that it retries, and publishes
  nothing (a release whose history is not committed is never sent). Redis restarts on the
  same port and files: release 2, then release 3, are published, equal to offline
  ``anonymize`` of the same snapshots, and the archive passes the audit.
* **Broker restarted.** Release 1 is published; the broker (Apache Kafka, its log on disk) is
  killed (SIGKILL) and started again on the same address and data; release 2 is sent: the
  worker reconnects and publishes it as sequence 2 (the history lives in Redis), equal to
  offline's.

Each test starts its own Redis or broker (the session's are shared with other tests).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest
from support.data import adult_series, write_config
from support.http import health_until, http_get
from support.kafka_broker import KafkaNode
from support.kafka_topics import fresh_topics, read_topic, send_snapshots
from support.worker import (
    Worker,
    metrics_environment,
    offline_releases,
    wait_for,
    worker_environment,
)

from stream_release.audit import audit_directory
from stream_release.config import KafkaSettings
from stream_release.devtools.local_services import (
    ManagedProcess,
    free_port,
    managed_process,
    redis_answers,
    redis_argv,
)

pytestmark = pytest.mark.integration

STOPPED_WITHIN_S = 10.0 - 3.0
"""Compose's grace period less the margin a stop must leave inside it."""

OUTAGE_S = 4.0
"""How long a dependency stays away while the worker runs."""


def _manifests(bootstrap: str, topic: str) -> dict[int, bytes]:
    """Manifests by sequence (every copy of one sequence identical)."""
    out: dict[int, bytes] = {}
    for message in read_topic(bootstrap, topic):
        sequence = json.loads(message.value)["sequence"]
        assert out.setdefault(sequence, message.value) == message.value
    return out


def _groups_of(bootstrap: str, topic: str, sequence: int) -> list[bytes]:
    """The group lines of release ``sequence`` as first sent (a resend repeats them)."""
    lines = [m.value for m in read_topic(bootstrap, topic)]
    mine = [v for v in lines if json.loads(v)["sequence"] == sequence]
    groups = {json.loads(v)["group"] for v in mine}
    return mine[: len(groups)]


def _wait_for_sequence(worker: Worker, bootstrap: str, topic: str, sequence: int) -> None:
    wait_for(
        worker,
        bootstrap,
        topic,
        lambda messages: sequence in {json.loads(m.value)["sequence"] for m in messages},
        f"release {sequence}",
    )


def _timed_stop(worker: Worker) -> float:
    """Seconds from SIGTERM to the worker's exit (code 0), a dependency being away: the clean
    stop cannot finish, so it must be the deadline's (``stop_forced`` logged)."""
    assert worker.proc is not None
    started = time.monotonic()
    assert worker.stop() == 0
    stopped = time.monotonic() - started
    events = [
        json.loads(line).get("event")
        for line in worker.log.read_text().splitlines()
        if line.startswith("{")
    ]
    assert events.count("stop_forced") >= 1, worker.tail()
    return stopped


@pytest.fixture
def series(shared_data: Path, tmp_path: Path) -> tuple[Path, list[Path]]:
    config = write_config(tmp_path, shared_data)
    return config, adult_series(shared_data, tmp_path, 20, rounds=3)


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[tuple[str, Path, int]]:
    """A persistent Redis of this test only: its URL, directory and port."""
    directory = tmp_path / "redis"
    directory.mkdir()
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    yield url, directory, port


def _start_redis(directory: Path, port: int) -> AbstractContextManager[ManagedProcess]:
    """The persistent Redis on ``port`` with its files in ``directory`` (started anew)."""
    argv = redis_argv(port, directory, persistent=True)
    return managed_process("redis", argv, directory / "redis.log", directory)


def test_redis_away_pauses_the_worker_and_nothing_uncommitted_is_published(
    series: tuple[Path, list[Path]],
    own_redis: tuple[str, Path, int],
    tmp_path: Path,
    kafka_bootstrap: str,
) -> None:
    config, snaps = series
    url, directory, port = own_redis
    offline = offline_releases(config, snaps, tmp_path / "offline")
    topics = fresh_topics()
    kafka = KafkaSettings(bootstrap=kafka_bootstrap, topics=topics)
    env = worker_environment(kafka_bootstrap, url, tmp_path / "archive", topics)
    worker = Worker(config, env, tmp_path / "worker.log")
    with _start_redis(directory, port) as first:
        first.wait_until(lambda: redis_answers(url))
        worker.start()
        try:
            send_snapshots(kafka, config, [snaps[0]])
            _wait_for_sequence(worker, kafka_bootstrap, topics.manifests, 1)
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait(timeout=10)
        except BaseException:
            worker.kill()
            raise
    try:
        send_snapshots(kafka, config, [snaps[1]])
        time.sleep(OUTAGE_S)
        worker.check_alive()
        assert sorted(_manifests(kafka_bootstrap, topics.manifests)) == [1]
        # SIGTERM while Redis is away: stopped within the grace period, nothing lost
        assert _timed_stop(worker) <= STOPPED_WITHIN_S
        with _start_redis(directory, port) as second:
            second.wait_until(lambda: redis_answers(url))
            worker.start()
            _wait_for_sequence(worker, kafka_bootstrap, topics.manifests, 2)
            send_snapshots(kafka, config, [snaps[2]])
            _wait_for_sequence(worker, kafka_bootstrap, topics.manifests, 3)
            assert worker.stop() == 0
    finally:
        worker.kill()
    assert sorted(_manifests(kafka_bootstrap, topics.manifests)) == [1, 2, 3]
    for sequence, lines in enumerate(offline, start=1):
        assert _groups_of(kafka_bootstrap, topics.releases, sequence) == lines
    assert audit_directory(tmp_path / "archive").ok
    retries = [
        json.loads(line)
        for line in worker.log.read_text().splitlines()
        if line.startswith("{") and '"retrying"' in line
    ]
    assert any(r["action"] == "stage records" for r in retries), "no retry was logged"


def test_a_restarted_broker_is_reconnected_to(
    series: tuple[Path, list[Path]],
    tmp_path: Path,
    redis_url: str,
    redis_prefix: str,
) -> None:
    config, snaps = series
    offline = offline_releases(config, snaps[:2], tmp_path / "offline")
    node = KafkaNode(tmp_path / "kafka")
    bootstrap = node.bootstrap
    topics = fresh_topics()
    kafka = KafkaSettings(bootstrap=bootstrap, topics=topics)
    port = free_port()
    env = worker_environment(
        bootstrap,
        redis_url,
        tmp_path / "archive",
        topics,
        redis_prefix,
        extra=metrics_environment(port),
    )
    worker = Worker(config, env, tmp_path / "worker.log")
    health = f"http://127.0.0.1:{port}/health"
    try:
        with node.running() as first:
            send_snapshots(kafka, config, [snaps[0]])
            worker.start()
            _wait_for_sequence(worker, bootstrap, topics.manifests, 1)
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait(timeout=10)
        # /health says so while the broker is away (it said ok for 20 s and more before)
        away = health_until(worker, health, "Kafka: ")
        assert f"Kafka at {bootstrap}: cannot connect" in " ".join(away["reasons"])  # type: ignore[arg-type]
        time.sleep(OUTAGE_S)
        worker.check_alive()
        # SIGTERM while the broker is away: stopped within the grace period
        assert _timed_stop(worker) <= STOPPED_WITHIN_S
        with node.running():  # the same data: the log and the consumers' offsets are kept
            worker.start()
            send_snapshots(kafka, config, [snaps[1]])
            _wait_for_sequence(worker, bootstrap, topics.manifests, 2)
            assert _groups_of(bootstrap, topics.releases, 2) == offline[1]
            status, body = http_get(health)
            assert status == 200, body
            assert worker.stop() == 0
    finally:
        worker.kill()
    assert audit_directory(tmp_path / "archive").ok
