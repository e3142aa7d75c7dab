"""Fixtures of the integration tests: test workers on the session's broker and Redis, and the
release service's runner with the real release producer.

The session's services (Redis, Kafka, the data sets) are in ``tests/conftest.py``; the
helpers these fixtures build on are in ``tests/support/``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.data import adult_series, write_config
from support.worker import MakeWorker, Worker, set_publish_environment, worker_environment

from stream_release.config import KafkaSettings, TopicSettings
from stream_release.stream.kafka import ensure_topics
from stream_release.stream.release_producer import ReleaseProducer
from stream_release.stream.runner import ServiceRunner
from stream_release.stream.service import ReleaseService

# -- test workers ----------------------------------------------------------------------------


@pytest.fixture
def make_worker(
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[MakeWorker]:
    """Builds (not yet started) workers on this test's topics, Redis prefix and archive
    (``tmp_path / "archive"``), all in one consumer group, and points ``stream-release
    publish`` here at the same topics; every worker built is killed at the end."""
    set_publish_environment(monkeypatch, kafka_bootstrap, kafka_topics)
    env = worker_environment(
        kafka_bootstrap, redis_url, tmp_path / "archive", kafka_topics, redis_prefix
    )
    built: list[Worker] = []

    def make(
        config: Path, *, extra: dict[str, str] | None = None, log: str = "worker.log"
    ) -> Worker:
        built.append(Worker(config, {**env, **(extra or {})}, tmp_path / log))
        return built[-1]

    try:
        yield make
    finally:
        for worker in built:
            worker.kill()


@pytest.fixture
def adult_worker(
    shared_data: Path, tmp_path: Path, make_worker: MakeWorker
) -> tuple[Path, list[Path], Worker]:
    """The Adult config, two Adult snapshots and a (not yet started) worker on this test's
    topics."""
    config = write_config(tmp_path, shared_data)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=2)
    return config, snaps, make_worker(config)


# -- the release service's runner ------------------------------------------------------------


@pytest.fixture
def loop() -> Iterator[asyncio.Runner]:
    """One event loop for the test's coroutines (the release producer's connections belong to
    the loop that opened them)."""
    with asyncio.Runner() as runner:
        yield runner


@pytest.fixture
def release_kafka(kafka_bootstrap: str, kafka_topics: TopicSettings) -> KafkaSettings:
    """The ``[kafka]`` settings of a release service in this test: the session's broker, this
    test's topics (created), a consumer group (and so a transactional id) of its own."""
    kafka = KafkaSettings(
        bootstrap=kafka_bootstrap, topics=kafka_topics, group_id=f"sr-test-{uuid.uuid4().hex}"
    )
    asyncio.run(ensure_topics(kafka, kafka_topics.every))
    return kafka


@pytest.fixture
def make_runner(loop: asyncio.Runner) -> Iterator[Callable[[ReleaseService], ServiceRunner]]:
    """Builds the :class:`ServiceRunner` of a release service, sending with the real
    :class:`ReleaseProducer` on the service's ``[kafka]`` settings (:func:`release_kafka`); no
    Faust app (its consumer lag is empty). Every producer is stopped at the end, in
    :func:`loop`."""
    producers: list[ReleaseProducer] = []

    def make(service: ReleaseService) -> ServiceRunner:
        monitor = SimpleNamespace(tp_committed_offsets={}, tp_end_offsets={})
        app = SimpleNamespace(monitor=monitor)
        runner = ServiceRunner(app, service, service.settings)  # type: ignore[arg-type]
        producers.append(ReleaseProducer(service.settings.kafka))
        runner.releases = producers[-1]
        return runner

    try:
        yield make
    finally:
        for producer in producers:
            loop.run(producer.stop())
