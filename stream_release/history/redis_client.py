"""Redis clients of the history store: one server, or a Redis Cluster (``[redis] cluster``).

The store, the staging and the worker talk to either through the same redis-py methods: on a
cluster every transaction and every script touches the keys of one hash tag only
(:mod:`stream_release.history.keys`), which redis-py's :class:`redis.RedisCluster` routes to
the slot's master and follows through a failover (``MOVED``), and refuses across slots.
"""

from __future__ import annotations

from typing import Any, TypeAlias
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.exceptions import (
    ClusterCrossSlotError,
    CrossSlotTransactionError,
    InvalidPipelineStack,
    RedisClusterException,
    RedisError,
)

from stream_release.errors import ConfigError, HistoryStoreError

__all__ = [
    "REDIS_ERRORS",
    "REDIS_MISUSE",
    "RedisClient",
    "connect",
    "decodes_responses",
    "describe",
    "redact_url",
]

REDIS_ERRORS: tuple[type[Exception], ...] = (RedisError, RedisClusterException)
"""What redis-py raises when Redis fails: its errors, and those of a Redis Cluster whose slots
map it cannot read (``RedisClusterException``, not a ``RedisError``): a slot no master serves
(measured: "All slots are not covered", after ``CLUSTER DELSLOTS``, and a client made then
is refused the same way), and, from redis-py's source, nodes that disagree or none that
answers, as while a failover promotes a replica. redis-py raises it for a transaction over
keys of several slots too (:data:`REDIS_MISUSE`), which the store's keys never are (one hash
tag per transaction, :mod:`stream_release.history.keys`)."""

REDIS_MISUSE: tuple[type[Exception], ...] = (
    CrossSlotTransactionError,
    ClusterCrossSlotError,
    InvalidPipelineStack,
)
"""Among :data:`REDIS_ERRORS`, those that are a failure of this program, not of Redis: a
transaction or a command over keys of several slots (refused by redis-py or, ``CROSSSLOT``, by
the server), a pipeline misused. Not worth trying again."""

RedisClient: TypeAlias = "redis.Redis | redis.RedisCluster"
"""A client of one Redis server or of a Redis Cluster."""


def connect(url: str, *, cluster: bool = False, **options: Any) -> RedisClient:
    """A client for ``url`` (``redis://``, ``rediss://``, ``unix://``; a cluster: the address
    of any of its nodes), replies not decoded (histories are binary).

    Raises
    ------
    ConfigError
        ``url`` is not a Redis URL, or a cluster URL names a unix socket or a database other
        than 0 (the message hides any password).
    HistoryStoreError
        A cluster does not answer (its client reads the slots map at once; a client of one
        server connects on first use).
    """
    try:
        if not cluster:
            return redis.Redis.from_url(url, decode_responses=False, **options)
        parts = urlsplit(url)
        if parts.scheme == "unix" or parts.path not in ("", "/", "/0"):
            raise ValueError("a Redis Cluster is reached over TCP and has only database 0")
        return redis.RedisCluster.from_url(url, decode_responses=False, **options)
    except ValueError as exc:
        raise ConfigError(f"redis.url = {redact_url(url)!r} is not a Redis URL: {exc}") from None
    except REDIS_ERRORS as exc:  # a cluster client reads the slots map when it is made
        raise HistoryStoreError(
            f"cannot reach the Redis Cluster at {redact_url(url)!r}: {exc}; start it, or set "
            "redis.cluster = false for one Redis server"
        ) from exc


def decodes_responses(client: RedisClient) -> bool:
    """Whether ``client`` decodes replies to str."""
    if isinstance(client, redis.RedisCluster):
        kwargs = client.get_connection_kwargs()  # type: ignore[no-untyped-call]
        return bool(kwargs.get("decode_responses"))
    return bool(client.connection_pool.connection_kwargs.get("decode_responses"))


def describe(client: RedisClient) -> str:
    """Where ``client`` points, without credentials: ``redis://host:port/db``, the unix path,
    or ``redis-cluster://host:port`` of the node it started from."""
    if isinstance(client, redis.RedisCluster):
        node = client.get_default_node()  # type: ignore[no-untyped-call]
        where = "unknown node" if node is None else f"{node.host}:{node.port}"
        return f"redis-cluster://{where}"
    pool = client.connection_pool
    kwargs = pool.connection_kwargs
    db = kwargs.get("db", 0)
    if "path" in kwargs:
        return f"unix://{kwargs['path']}?db={db}"
    scheme = "rediss" if issubclass(pool.connection_class, redis.SSLConnection) else "redis"
    return f"{scheme}://{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}/{db}"


def redact_url(url: str) -> str:
    """``url`` without its password (``redis://user:***@host``), safe for messages."""
    try:
        parts = urlsplit(url)
        if parts.password is None:
            return url
        user = parts.username or ""
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port is not None else ""
        return urlunsplit(parts._replace(netloc=f"{user}:***@{host}{port}"))
    except ValueError:
        return "<unparsable URL>"
