"""One run of the crash-consistency tests: a series of Adult snapshots sent to a worker that is
killed with SIGKILL at a kill point of :mod:`stream_release.faults` (or not), then
started again to publish the rest; what the run left on the broker, in Redis and in the
archive, normalised for comparison with another run (``test_crash_consistency`` and
``test_crash_consistency_mechanisms``).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

from stream_release.audit import audit_directory
from stream_release.audit.series_ledger import read_ledger
from stream_release.config import KafkaSettings, TopicSettings
from stream_release.faults import ENV
from stream_release.history.keys import RedisKeys
from stream_release.io.release_files import decode_record
from support.kafka_topics import fresh_topics, read_topic, send_snapshots
from support.worker import Worker, worker_environment

RELEASES = 3
"""Snapshots in a series: release 2 is mid-series."""
RUN_TIMEOUT_S = 90.0
"""Longest wait for the worker to die at its kill point, or to publish the whole series."""
PER_RELEASE = {
    "cut_loaded",
    "planned",
    "files_staged",
    "commit_queued",
    "committed",
    "ledgered",
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


def run_series(
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
    send_snapshots(kafka, config, snaps)
    archive = directory / "archive"
    env = worker_environment(bootstrap, redis_url, archive, topics, prefix)
    if kill_at is not None:
        killed = Worker(config, {**env, ENV: kill_at}, directory / "killed.log")
        killed.start()
        wait_for_sigkill(killed, kill_at)
        at_kill = (
            _sequences(read_topic(bootstrap, topics.releases)),
            _sequences(read_topic(bootstrap, topics.releases, committed=False)),
        )
    worker = Worker(config, env, directory / "worker.log")
    worker.start()
    try:
        manifests = _wait_for_series(worker, bootstrap, topics)
        assert worker.stop() == 0
    finally:
        worker.kill()
    report = audit_directory(archive)  # against its series ledger too
    assert report.ok and report.guarantee_checked, report
    ledger = read_ledger(archive.with_name("archive.ledger"))
    assert [(e.sequence, e.release) for e in ledger] == [
        (k, snap.stem) for k, snap in enumerate(snaps, start=1)
    ]
    lines = read_topic(bootstrap, topics.releases)
    groups = groups_of(lines)
    return Outcome(
        manifests=manifests,
        groups=groups,
        redis=_redis_contents(redis_url, prefix),
        archive=_archive_contents(archive),
        copies=len(lines) - len(groups),
        at_kill=at_kill if kill_at is not None else (set(), set()),
    )


def wait_for_sigkill(worker: Worker, kill_at: str) -> None:
    """The worker must die by SIGKILL at its kill point within :data:`RUN_TIMEOUT_S`."""
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
            return {seq: timeless(json.loads(value)) for seq, value in by_sequence.items()}
        if time.monotonic() > deadline:
            pytest.fail(f"only releases {sorted(by_sequence)} were published:\n{worker.tail()}")
        time.sleep(0.3)


def groups_of(messages: list[Any]) -> dict[tuple[int, int], bytes]:
    """Group messages by (sequence, group); copies of one must be identical."""
    out: dict[tuple[int, int], bytes] = {}
    for message in messages:
        line = json.loads(message.value)
        first = out.setdefault((line["sequence"], line["group"]), message.value)
        assert first == message.value, f"group {line['group']} of {line['sequence']} differs"
    return out


def _sequences(messages: list[Any]) -> set[int]:
    return {int(json.loads(message.value)["sequence"]) for message in messages}


def timeless(manifest: dict[str, Any]) -> dict[str, Any]:
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
            value = key_value(client, key, record=name.startswith(f"{prefix}:release:"))
            out[name.removeprefix(prefix)] = value
    finally:
        client.close()
    assert not any(":stage:" in name for name in out if not name.endswith(":stage:open"))
    return out


def key_value(client: redis.Redis, key: bytes, *, record: bool) -> Any:
    """The value of ``key`` by its Redis type; a release ``record`` as its timeless manifest
    and its group lines."""
    kind = client.type(key).decode()
    if kind == "string":
        value = client.get(key)
        if record:
            manifest, groups = decode_record(value)
            return timeless(manifest), groups
        return value
    if kind == "list":
        return client.lrange(key, 0, -1)
    if kind == "hash":
        return client.hgetall(key)
    if kind == "set":
        return client.smembers(key)
    raise AssertionError(f"unexpected Redis type {kind} of {key!r}")


def _archive_contents(archive: Path) -> dict[str, Any]:
    """The archive's files by name (manifests timeless); no temporary file may be left."""
    out: dict[str, Any] = {}
    for path in sorted(archive.iterdir()):
        if path.name.startswith("manifest-"):
            out[path.name] = timeless(json.loads(path.read_bytes()))
        else:
            out[path.name] = path.read_bytes()
    return out
