"""``stream-release worker`` as a subprocess of a test, on the session's broker and Redis
(docs/contract.md §5), and the steps the worker tests share: the environment, publishing with
the CLI, waiting for messages, stopping.

The integration tests build workers with the ``make_worker`` and ``adult_worker`` fixtures
(``tests/integration/conftest.py``); tests with a broker or Redis of their own build them here.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import pytest
from aiokafka import AIOKafkaProducer, ConsumerRecord

from stream_release.cli.main import main
from stream_release.config import TopicSettings, load_settings
from stream_release.devtools.local_services import worker_argv, worker_env
from stream_release.pipeline.anonymize import anonymize_files
from support.kafka_topics import read_topic

KEY = "worker-test-key-0123456789abcdef"
"""The pseudonymisation key of the test workers and of their offline counterparts."""
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


def metrics_environment(port: int) -> dict[str, str]:
    """The settings that serve a worker's ``/metrics`` and ``/health`` on ``127.0.0.1:port``
    (the ``extra`` of :func:`worker_environment`)."""
    return {"SR_SERVICE_METRICS_HOST": "127.0.0.1", "SR_SERVICE_METRICS_PORT": str(port)}


class Worker:
    """``stream-release worker`` as a subprocess, its output in a log file."""

    def __init__(self, config: Path, env: dict[str, str], log: Path) -> None:
        self.config, self.env, self.log = config, env, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the worker (again after a stop or a kill), appending to its log."""
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                worker_argv(self.config),
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.config.parent,
            )

    def check_alive(self) -> None:
        """``pytest.fail`` with the log's tail if the worker has exited."""
        assert self.proc is not None
        if self.proc.poll() is not None:
            pytest.fail(f"the worker exited with code {self.proc.returncode}:\n{self.tail()}")

    def tail(self, limit: int = 4000) -> str:
        """The last ``limit`` characters of the log."""
        return self.log.read_text(errors="replace")[-limit:]

    def kill(self) -> None:
        """SIGKILL the worker if it runs, and reap it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT_S)

    def stop(self) -> int:
        """SIGTERM the worker and return its exit code; ``pytest.fail`` if it has not exited
        within :data:`STOP_TIMEOUT_S`."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the worker did not stop within {STOP_TIMEOUT_S:.0f} s of SIGTERM")

    def exit_code(self, timeout: float, name: str = "the worker") -> int:
        """The exit code of a started worker that must exit by itself within ``timeout``
        seconds; ``pytest.fail`` naming it ``name`` if it keeps running."""
        assert self.proc is not None
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} kept running:\n{self.tail()}")


class MakeWorker(Protocol):
    """The ``make_worker`` fixture: a (not yet started) :class:`Worker` of ``config`` with
    ``extra`` settings (:func:`metrics_environment`...), logging to ``tmp_path / log``."""

    def __call__(
        self, config: Path, *, extra: dict[str, str] | None = None, log: str = "worker.log"
    ) -> Worker: ...


def offline_releases(config: Path, snaps: list[Path], out: Path) -> list[list[bytes]]:
    """The group lines of offline ``anonymize`` on ``snaps`` into ``out`` with :data:`KEY`,
    release by release (also compiles the kernels)."""
    anonymize_files(load_settings(config, history={"key": KEY}), out, snaps)
    return [
        (out / f"release-{k:04d}.jsonl").read_bytes().splitlines() for k in range(1, len(snaps) + 1)
    ]


def publish_with_cli(config: Path, snap: Path) -> None:
    """``stream-release publish`` of ``snap`` as release ``snap.stem``; it must exit 0."""
    assert main(["publish", "--config", str(config), "--release", snap.stem, str(snap)]) == 0


def wait_for(
    worker: Worker,
    bootstrap: str,
    topic: str,
    done: Callable[[list[ConsumerRecord]], bool],
    what: str,
) -> list[ConsumerRecord]:
    """Every message of ``topic`` once ``done`` holds for them (read every 0.3 s, the worker
    alive); ``pytest.fail`` naming ``what`` after :data:`RELEASE_TIMEOUT_S`."""
    deadline = time.monotonic() + RELEASE_TIMEOUT_S
    while True:
        worker.check_alive()
        messages = read_topic(bootstrap, topic)
        if done(messages):
            return messages
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {RELEASE_TIMEOUT_S:.0f} s; worker log:\n{worker.tail()}")
        time.sleep(0.3)


def publish_series(
    worker: Worker, config: Path, snaps: Sequence[Path], bootstrap: str, topics: TopicSettings
) -> list[ConsumerRecord]:
    """Start ``worker``, publish ``snaps`` with the CLI, and return the manifests once there
    are as many as snapshots."""
    worker.start()
    for snap in snaps:
        publish_with_cli(config, snap)
    return wait_for(
        worker,
        bootstrap,
        topics.manifests,
        lambda m: len(m) >= len(snaps),
        f"{len(snaps)} manifests",
    )


def manifest_sequences(manifests: list[ConsumerRecord]) -> list[int]:
    """The ``sequence`` of each manifest message, in topic order."""
    return [json.loads(m.value)["sequence"] for m in manifests]


async def send_messages(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]]) -> None:
    """Send ``(key, value)`` pairs to ``topic`` in order, each acknowledged by every replica."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        for key, value in messages:
            await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()
