"""``stream-release worker`` end to end: a subprocess on the test broker and Redis
(docs/contract.md §5).

Snapshots sent with ``stream-release publish`` come out of the worker as releases equal, byte for
byte, to offline ``anonymize`` on the same snapshots with the same key; the archive passes the
audit; bad records go to ``sr.rejected`` with their reason (ids and keys as their keyed
pseudonyms); SIGTERM stops the worker; a worker killed with SIGKILL and started again publishes
every release exactly once by sequence.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer, ConsumerRecord
from helpers import adult_series, read_topic, schema_errors, write_config

from stream_release.audit import audit_directory
from stream_release.cli.main import main
from stream_release.config import TopicSettings, load_settings
from stream_release.devtools.datasets import ADULT_QID
from stream_release.devtools.local_services import worker_argv, worker_env
from stream_release.history.pseudonym import Pseudonymizer
from stream_release.pipeline.anonymize import anonymize_files

pytestmark = pytest.mark.integration

KEY = "worker-test-key-0123456789abcdef"
RELEASE_TIMEOUT_S = 60.0
"""Longest wait for the worker to publish what it was sent."""
STOP_TIMEOUT_S = 10.0
"""A worker sent SIGTERM must have exited within this many seconds."""
ID_PATTERN = re.compile(r"\bp-\d+")
"""The ids of the Adult series; they must never appear in the worker's log."""


def set_publish_environment(
    monkeypatch: pytest.MonkeyPatch, bootstrap: str, topics: TopicSettings
) -> None:
    """Point ``stream-release publish``, run in this process, at the local broker and this
    test's topics."""
    for name, value in {
        "SR_KAFKA_BOOTSTRAP": bootstrap,
        "SR_KAFKA_TOPICS": topics.model_dump_json(),
    }.items():
        monkeypatch.setenv(name, value)


def worker_environment(
    bootstrap: str,
    redis_url: str,
    archive: Path,
    topics: TopicSettings,
    prefix: str | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a test worker: the local services (:func:`worker_env`), the test
    key, this test's topics, a consumer group of its own, the Redis ``prefix`` (default: the
    configuration's), then ``extra``."""
    settings = {
        "SR_KAFKA_TOPICS": topics.model_dump_json(),
        "SR_KAFKA_GROUP_ID": f"sr-test-{uuid.uuid4().hex}",
    }
    if prefix is not None:
        settings["SR_HISTORY_PREFIX"] = prefix
    return worker_env(
        bootstrap=bootstrap,
        redis_url=redis_url,
        archive=archive,
        key=KEY,
        extra={**settings, **(extra or {})},
    )


class Worker:
    """``stream-release worker`` as a subprocess, its output in a log file."""

    def __init__(self, config: Path, env: dict[str, str], log: Path) -> None:
        self.config, self.env, self.log = config, env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                worker_argv(self.config),
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.config.parent,
            )

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"the worker exited with code {self.proc.returncode}:\n{self.tail()}")

    def tail(self, limit: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-limit:]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)


@pytest.fixture
def setup(
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[tuple[Path, list[Path], Worker]]:
    """The config, two Adult snapshots and a (not yet started) worker on this test's topics."""
    set_publish_environment(monkeypatch, kafka_bootstrap, kafka_topics)
    config = write_config(tmp_path, shared_data)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=2)
    env = worker_environment(
        kafka_bootstrap, redis_url, tmp_path / "archive", kafka_topics, redis_prefix
    )
    worker = Worker(config, env, tmp_path / "worker.log")
    try:
        yield config, snaps, worker
    finally:
        worker.kill()


def _offline(config: Path, snaps: list[Path], out: Path) -> list[list[bytes]]:
    """The group lines of offline ``anonymize`` on ``snaps``, release by release (also
    compiles the kernels)."""
    anonymize_files(load_settings(config, history={"key": KEY}), out, snaps)
    return [
        (out / f"release-{k:04d}.jsonl").read_bytes().splitlines() for k in range(1, len(snaps) + 1)
    ]


def _publish(config: Path, snap: Path) -> None:
    assert main(["publish", "--config", str(config), "--release", snap.stem, str(snap)]) == 0


def _wait_for(
    worker: Worker,
    bootstrap: str,
    topic: str,
    done: Callable[[list[ConsumerRecord]], bool],
    what: str,
) -> list[ConsumerRecord]:
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while True:
        worker.check_alive()
        messages = read_topic(bootstrap, topic)
        if done(messages):
            return messages
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {RELEASE_TIMEOUT_S:.0f} s; worker log:\n{worker.tail()}")
        time.sleep(0.3)


def _sequences(manifests: list[ConsumerRecord]) -> list[int]:
    return [json.loads(m.value)["sequence"] for m in manifests]


def _stop(worker: Worker) -> int:
    assert worker.proc is not None
    worker.proc.send_signal(signal.SIGTERM)
    try:
        return worker.proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker did not stop within {STOP_TIMEOUT_S:.0f} s of SIGTERM")


async def _send(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for key, value in messages:
            await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()


def test_worker_publishes_the_offline_releases_and_rejects_bad_records(
    setup: tuple[Path, list[Path], Worker],
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
) -> None:
    config, snaps, worker = setup
    offline = _offline(config, snaps, tmp_path / "offline")
    worker.start()
    for snap in snaps:
        _publish(config, snap)
    manifests = _wait_for(
        worker, kafka_bootstrap, kafka_topics.manifests, lambda m: len(m) >= 2, "two manifests"
    )
    assert _sequences(manifests) == [1, 2]
    assert [m.key for m in manifests] == [s.stem.encode() for s in snaps]
    groups = read_topic(kafka_bootstrap, kafka_topics.releases)
    by_release = [[g.value for g in groups if g.key == s.stem.encode()] for s in snaps]
    assert by_release == offline
    assert len(groups) == sum(len(lines) for lines in offline)
    assert audit_directory(tmp_path / "archive").ok

    # a malformed record and a second, different row for an id already staged
    row = {"release": "t03", "id": "p-1", "qid": _qid(snaps[0]), "sensitive": "Sales"}
    other = {**row, "sensitive": "Tech-support"}
    asyncio.run(
        _send(
            kafka_bootstrap,
            kafka_topics.records,
            [
                (b"bad-key", b"not json"),
                (b"p-1", json.dumps(row).encode()),
                (b"p-1", json.dumps(other).encode()),
            ],
        )
    )
    rejected = _wait_for(
        worker, kafka_bootstrap, kafka_topics.rejected, lambda m: len(m) >= 2, "two rejections"
    )
    # service.rejected_raw = "redact" (default): keys and ids as their keyed pseudonyms
    pseudonym = Pseudonymizer(KEY.encode()).keyed_digest
    assert [m.key for m in rejected] == [
        f"pseudonym:{pseudonym(key).hex()}".encode() for key in (b"bad-key", b"p-1")
    ]
    assert schema_errors("rejected", [m.value for m in rejected]) == []
    assert schema_errors("manifest", [m.value for m in manifests]) == []
    values = [json.loads(m.value) for m in rejected]
    assert "not JSON" in values[0]["error"]
    assert json.loads(values[0]["raw"]) == {
        "redacted": True,
        "bytes": len(b"not json"),
        "pseudonym": pseudonym(b"not json").hex(),
    }
    assert values[1]["error"].startswith("duplicate id")
    assert values[1]["topic"] == kafka_topics.records
    assert json.loads(values[1]["raw"]) == {**other, "id": f"pseudonym:{pseudonym(b'p-1').hex()}"}
    assert not any(ID_PATTERN.search(m.value.decode()) for m in rejected)

    assert _stop(worker) == 0
    log = worker.log.read_text(errors="replace")
    assert ID_PATTERN.search(log) is None, "the worker logged an id"
    # structured logs: every line a JSON object; our events carry their fields
    entries = [json.loads(line) for line in log.splitlines() if line.strip()]
    events = {entry.get("event") for entry in entries}
    assert {"committed", "sent", "rejected"} <= events
    committed = [entry for entry in entries if entry.get("event") == "committed"]
    assert [entry["sequence"] for entry in committed] == [1, 2]


def test_worker_killed_after_a_release_publishes_each_release_once(
    setup: tuple[Path, list[Path], Worker],
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
) -> None:
    config, snaps, worker = setup
    offline = _offline(config, snaps, tmp_path / "offline")
    worker.start()
    _publish(config, snaps[0])
    _wait_for(worker, kafka_bootstrap, kafka_topics.manifests, lambda m: len(m) >= 1, "release 1")
    worker.kill()

    worker.start()
    _publish(config, snaps[1])
    manifests = _wait_for(
        worker,
        kafka_bootstrap,
        kafka_topics.manifests,
        lambda m: 2 in _sequences(m),
        "release 2 after the restart",
    )
    by_sequence: dict[int, bytes] = {}
    for message in manifests:
        sequence = json.loads(message.value)["sequence"]
        assert by_sequence.setdefault(sequence, message.value) == message.value
    assert sorted(by_sequence) == [1, 2]
    groups = read_topic(kafka_bootstrap, kafka_topics.releases)
    for snap, lines in zip(snaps, offline, strict=True):
        sent = [g.value for g in groups if g.key == snap.stem.encode()]
        assert len(sent) % len(lines) == 0 and sent[: len(lines)] == lines
    assert audit_directory(tmp_path / "archive").ok
    assert _stop(worker) == 0


def _qid(snap: Path) -> dict[str, str]:
    """The QIDs of the first row of ``snap`` (valid hierarchy leaves)."""
    header, first = snap.read_text().splitlines()[:2]
    row = dict(zip(header.split(";"), first.split(";"), strict=True))
    return {name: row[name] for name in ADULT_QID}
