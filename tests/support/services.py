"""Local services for the tests: started for a block (or taken from the environment), and a
Redis namespace of one test.

The session fixtures of ``tests/conftest.py`` and the tests that start a service of their own
(a secured Redis, a second broker) use these; the Redis Cluster is in
:mod:`support.redis_cluster`.
"""

from __future__ import annotations

import os
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from stream_release.devtools.local_services import managed_process
from stream_release.errors import StreamReleaseError
from stream_release.history.keys import RedisKeys


@contextmanager
def started_service(
    name: str, argv_of: Callable[[], list[str]], ready: Callable[[], bool], workdir: Path
) -> Iterator[None]:
    """Start a local service (:mod:`stream_release.devtools.local_services`) and wait until
    ``ready()``.

    ``pytest.fail`` (never skip) with the reason and the log's tail if it cannot be started.
    The process is stopped when the block exits.
    """
    try:
        argv = argv_of()
        with managed_process(name, argv, workdir / f"{name}.log", workdir) as process:
            process.wait_until(ready)
            yield
    except StreamReleaseError as exc:
        pytest.fail(
            f"cannot start {name} for the tests: {exc}; or point the tests to a running "
            "instance (see tests/conftest.py)",
            pytrace=False,
        )


def external_service(variable: str, answers: Callable[[str], bool], refusal: str) -> str | None:
    """The address in the environment variable ``variable`` (``None`` when it is unset or
    empty); ``pytest.fail`` with ``refusal`` (``{address}`` replaced by that address) when
    ``answers(address)`` is false: a service the tests were pointed to must be there."""
    address = os.environ.get(variable)
    if address and not answers(address):
        pytest.fail(refusal.format(address=address), pytrace=False)
    return address or None


@contextmanager
def redis_namespace(url: str | Callable[[], str], *, cluster: bool = False) -> Iterator[str]:
    """A fresh Redis key prefix; every key under it (:attr:`RedisKeys.matches`: ``prefix:...``
    and the cluster hash tags ``{prefix}:...``, ``{prefix:<shard>}:...``) is deleted when the
    block exits, on every master of the cluster when ``cluster``.

    ``url`` may be a function giving it when the block exits: a cluster's startup node may
    have died meanwhile.
    """
    prefix = f"sr-test-{uuid.uuid4().hex}"
    try:
        yield prefix
    finally:
        at_exit = url() if callable(url) else url
        client = redis.RedisCluster.from_url(at_exit) if cluster else redis.Redis.from_url(at_exit)
        try:
            if isinstance(client, redis.RedisCluster):
                primaries = client.get_primaries()  # type: ignore[no-untyped-call]
                masters = [client.get_redis_connection(node) for node in primaries]
            else:
                masters = [client]
            for master in masters:
                _unlink_matching(master, RedisKeys(prefix).matches)
        finally:
            client.close()


def _unlink_matching(client: redis.Redis, patterns: Iterable[str]) -> None:
    """Unlink every key of the Redis (or cluster node) ``client`` that matches one of the
    ``SCAN`` ``patterns``; one ``UNLINK`` per hash slot, as a cluster node refuses more."""
    for pattern in patterns:
        by_slot: dict[int, list[bytes]] = defaultdict(list)
        for key in client.scan_iter(match=pattern, count=10_000):
            by_slot[key_slot(key)].append(key)
        pipe = client.pipeline(transaction=False)
        for keys in by_slot.values():
            for start in range(0, len(keys), 10_000):
                pipe.unlink(*keys[start : start + 10_000])
        pipe.execute()
