"""Crash consistency: the worker killed with SIGKILL at each step of the release path.

For every kill point of :mod:`stream_release.devtools.faults` (14 steps, from staging to marking a
release published), one run on its own topics, Redis prefix and archive:

1. three snapshots of the Adult series are sent (records, then a seal each);
2. the worker starts with ``STREAM_RELEASE_KILL_AT=<point>[:n]`` and must die by SIGKILL there
   (which also proves the point is on the path the series takes);
3. it is started again, without the variable, and must publish the rest.

Then, against one uninterrupted run of the same series with the same key:

* every release appears by ``sequence`` (1, 2, 3), every copy of a manifest or group message
  of one sequence is identical (a release sent twice is sent with the same content: consumers
  dedupe by sequence), and the deduplicated groups and manifests equal the uninterrupted
  run's (``elapsed_s``, a timing, aside);
* what Redis holds equals the uninterrupted run's: the history of every individual, the value
  dictionary, the release records, labels, sequence and published marker, no staging left;
* the archive equals the uninterrupted run's and passes the audit.

The worker sends each release in one Kafka transaction. Killed inside it (``groups_partial``,
``groups_sent``), the release's group lines are on the broker but invisible to a
``read_committed`` consumer; the restarted worker aborts that transaction and sends the
release again, so a ``read_committed`` consumer sees each of its groups exactly once.
Everything above is read as such a consumer reads.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import adult_series, fresh_topics, read_topic, redis_namespace, write_config
from test_worker import Worker, _stop, worker_environment

from stream_release.audit import audit_directory
from stream_release.config import KafkaSettings, TopicSettings, load_settings
from stream_release.devtools.faults import ENV, POINTS
from stream_release.history.keys import RedisKeys
from stream_release.io.release_files import decode_record
from stream_release.io.snapshot_csv import read_snapshot
from stream_release.stream.kafka import ensure_topics
from stream_release.stream.publish import publish_snapshot

pytestmark = pytest.mark.integration

RELEASES = 3
IN_TRANSACTION = {"groups_partial", "groups_sent"}
"""Kill points between the start of a release's transaction and its commit."""
RUN_TIMEOUT_S = 90.0
"""Longest wait for the worker to die at its kill point, or to publish the whole series."""
PER_RELEASE = {
    "cut_loaded",
    "planned",
    "files_staged",
    "commit_queued",
    "committed",
    "finalizing",
    "finalized",
    "groups_partial",
    "groups_sent",
    "manifest_sent",
    "marked",
}
"""Points reached once per release: the run is killed at the second one (mid-series). The
staging points are killed at their first occurrence (seals may arrive in one batch)."""


@dataclass
class Outcome:
    """What one run left behind, normalised for comparison."""

    manifests: dict[int, dict[str, Any]]
    groups: dict[tuple[int, int], bytes]
    redis: dict[str, Any]
    archive: dict[str, Any]
    copies: int = 0
    """Group messages read beyond one per (sequence, group)."""
    at_kill: tuple[set[int], set[int]] = (set(), set())
    """The sequences of the group messages on the broker when the worker died: as a
    ``read_committed`` consumer sees them, and every one written."""


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> tuple[Path, list[Path]]:
    """The configuration and the first three snapshots of the Adult series."""
    directory = tmp_path_factory.mktemp("crash-series")
    config = write_config(directory, shared_data)
    return config, adult_series(shared_data, directory, 20, rounds=RELEASES)


@pytest.fixture(scope="module")
def uninterrupted(
    series: tuple[Path, list[Path]],
    tmp_path_factory: pytest.TempPathFactory,
    kafka_bootstrap: str,
    redis_url: str,
) -> Outcome:
    """The outcome of the series on a worker nobody kills."""
    config, snaps = series
    with redis_namespace(redis_url) as prefix:
        return _run(
            config, snaps, tmp_path_factory.mktemp("uninterrupted"), kafka_bootstrap, redis_url,
            prefix, kill_at=None,
        )  # fmt: skip


def test_every_step_of_the_release_path_has_a_kill_point() -> None:
    assert len(POINTS) >= 10
    assert set(POINTS) > PER_RELEASE


@pytest.mark.parametrize("point", list(POINTS))
def test_a_worker_killed_at_each_step_publishes_the_same_series(
    point: str,
    series: tuple[Path, list[Path]],
    uninterrupted: Outcome,
    tmp_path: Path,
    kafka_bootstrap: str,
    redis_url: str,
    redis_prefix: str,
) -> None:
    config, snaps = series
    kill_at = f"{point}:2" if point in PER_RELEASE else point
    outcome = _run(config, snaps, tmp_path, kafka_bootstrap, redis_url, redis_prefix, kill_at)
    assert sorted(outcome.manifests) == list(range(1, RELEASES + 1))
    assert outcome.manifests == uninterrupted.manifests
    assert outcome.groups == uninterrupted.groups
    assert outcome.redis == uninterrupted.redis
    assert outcome.archive == uninterrupted.archive
    if point in IN_TRANSACTION:  # killed while release 2 was being sent
        committed, written = outcome.at_kill
        assert 2 in written and 2 not in committed  # the open transaction is invisible
        assert outcome.copies == 0  # and it was aborted: no group of it seen twice


# -- one run ---------------------------------------------------------------------------------


def _run(
    config: Path,
    snaps: list[Path],
    directory: Path,
    bootstrap: str,
    redis_url: str,
    prefix: str,
    kill_at: str | None,
) -> Outcome:
    """Send the series, run the worker (killed at ``kill_at``, then again), collect."""
    topics = fresh_topics()
    kafka = KafkaSettings(bootstrap=bootstrap, topics=topics)
    schema = load_settings(config).schema
    asyncio.run(_send_series(kafka, [(s.stem, read_snapshot(s, schema)) for s in snaps]))
    archive = directory / "archive"
    env = worker_environment(bootstrap, redis_url, archive, topics, prefix)
    if kill_at is not None:
        killed = Worker(config, {**env, ENV: kill_at}, directory / "killed.log")
        killed.start()
        _wait_for_sigkill(killed, kill_at)
        at_kill = (
            _sequences(read_topic(bootstrap, topics.releases)),
            _sequences(read_topic(bootstrap, topics.releases, committed=False)),
        )
    worker = Worker(config, env, directory / "worker.log")
    worker.start()
    try:
        manifests = _wait_for_series(worker, bootstrap, topics)
        assert _stop(worker) == 0
    finally:
        worker.kill()
    report = audit_directory(archive)
    assert report.ok, report
    lines = read_topic(bootstrap, topics.releases)
    groups = _groups(lines)
    return Outcome(
        manifests=manifests,
        groups=groups,
        redis=_redis_contents(redis_url, prefix),
        archive=_archive_contents(archive),
        copies=len(lines) - len(groups),
        at_kill=at_kill if kill_at is not None else (set(), set()),
    )


async def _send_series(kafka: KafkaSettings, snapshots: list[tuple[str, Any]]) -> None:
    topics = kafka.topics
    await ensure_topics(kafka, topics.every)
    for label, raw in snapshots:
        await publish_snapshot(kafka, label, raw)


def _wait_for_sigkill(worker: Worker, kill_at: str) -> None:
    assert worker.proc is not None
    try:
        code = worker.proc.wait(timeout=RUN_TIMEOUT_S)
    except Exception:
        worker.kill()
        pytest.fail(f"the worker never reached kill point {kill_at}:\n{worker.tail()}")
    assert code == -9, f"the worker exited with {code}, not SIGKILL:\n{worker.tail()}"


def _wait_for_series(
    worker: Worker, bootstrap: str, topics: TopicSettings
) -> dict[int, dict[str, Any]]:
    """The manifests of the whole series, by sequence, once all are published; every copy of
    one sequence's manifest must be the same message."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while True:
        worker.check_alive()
        by_sequence: dict[int, bytes] = {}
        for message in read_topic(bootstrap, topics.manifests):
            sequence = json.loads(message.value)["sequence"]
            first = by_sequence.setdefault(sequence, message.value)
            assert first == message.value, f"release {sequence} was sent with other content"
        if len(by_sequence) >= RELEASES:
            return {seq: _timeless(json.loads(value)) for seq, value in by_sequence.items()}
        if time.monotonic() > deadline:
            pytest.fail(f"only releases {sorted(by_sequence)} were published:\n{worker.tail()}")
        time.sleep(0.3)


def _groups(messages: list[Any]) -> dict[tuple[int, int], bytes]:
    """Group messages by (sequence, group); copies of one must be identical."""
    out: dict[tuple[int, int], bytes] = {}
    for message in messages:
        line = json.loads(message.value)
        first = out.setdefault((line["sequence"], line["group"]), message.value)
        assert first == message.value, f"group {line['group']} of {line['sequence']} differs"
    return out


def _sequences(messages: list[Any]) -> set[int]:
    return {int(json.loads(message.value)["sequence"]) for message in messages}


def _timeless(manifest: dict[str, Any]) -> dict[str, Any]:
    """A manifest without its timing (``elapsed_s`` differs between any two runs)."""
    return {k: v for k, v in manifest.items() if k != "elapsed_s"}


def _redis_contents(url: str, prefix: str) -> dict[str, Any]:
    """Every key of the namespace, by name without the prefix, with its value; a release
    record as its group lines and timeless manifest."""
    client = redis.Redis.from_url(url)
    keys = RedisKeys(prefix)
    out: dict[str, Any] = {}
    try:
        for key in client.scan_iter(match=keys.match, count=10_000):
            name = key.decode()
            kind = client.type(key).decode()
            if kind == "string":
                value: Any = client.get(key)
                if name.startswith(f"{prefix}:release:"):
                    manifest, groups = decode_record(value)
                    value = (_timeless(manifest), groups)
            elif kind == "list":
                value = client.lrange(key, 0, -1)
            elif kind == "hash":
                value = client.hgetall(key)
            elif kind == "set":
                value = client.smembers(key)
            else:
                raise AssertionError(f"unexpected Redis type {kind} of {name}")
            out[name.removeprefix(prefix)] = value
    finally:
        client.close()
    assert not any(":stage:" in name for name in out if not name.endswith(":stage:open"))
    return out


def _archive_contents(archive: Path) -> dict[str, Any]:
    """The archive's files by name (manifests timeless); no temporary file may be left."""
    out: dict[str, Any] = {}
    for path in sorted(archive.iterdir()):
        if path.name.startswith("manifest-"):
            out[path.name] = _timeless(json.loads(path.read_bytes()))
        else:
            out[path.name] = path.read_bytes()
    return out
