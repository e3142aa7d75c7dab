"""Local services for the tests: started for a block (or taken from the environment), and a
Redis namespace of one test.

The session fixtures of ``tests/conftest.py`` and the tests that start a service of their own
(a secured Redis, a second broker) use these.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

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
def redis_namespace(url: str) -> Iterator[str]:
    """A fresh Redis key prefix; every key under it is deleted when the block exits."""
    prefix = f"sr-test-{uuid.uuid4().hex}"
    try:
        yield prefix
    finally:
        client = redis.Redis.from_url(url)
        try:
            keys = list(client.scan_iter(match=RedisKeys(prefix).match, count=10_000))
            for start in range(0, len(keys), 10_000):
                client.unlink(*keys[start : start + 10_000])
        finally:
            client.close()
