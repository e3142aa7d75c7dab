"""The broker and Redis the service benchmarks run against: a real Apache Kafka (KRaft, one
node, the tests' :class:`support.kafka_broker.KafkaNode`: transactions and idempotent
producers, as in production) and a Redis without persistence, on free ports.

The demo's embedded Tansu broker has neither transactions nor an idempotent producer, so a
worker with its default settings cannot publish on it; the benchmarks measure the worker as
it is deployed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from stream_release.devtools.local_services import (
    free_port,
    managed_process,
    redis_answers,
    redis_argv,
)

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from support.kafka_broker import KafkaNode  # type: ignore[import-not-found, unused-ignore]  # noqa: E402


@contextmanager
def kafka_and_redis(directory: Path) -> Iterator[tuple[str, str]]:
    """An Apache Kafka broker and a Redis, both answering, their data and logs under
    ``directory``: yields the bootstrap address and the Redis URL; both are stopped when the
    block exits."""
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    node = KafkaNode(directory / "kafka")
    with (
        node.running(),
        managed_process(
            "redis", redis_argv(port, directory), directory / "redis.log", directory
        ) as redis,
    ):
        redis.wait_until(lambda: redis_answers(url))
        yield node.bootstrap, url
