"""Workers of one consumer group share one configuration, or the second one does not start.

Kafka splits a group's partitions among whoever joins it. A second worker started with the same
``kafka.group_id`` but another configuration (another ``l``, schema, Redis or topics) would
silently take part of the records and cut releases of its own. So each worker's records
consumer carries a tag of its configuration in its group membership (the ``user_data`` of the
consumer protocol, :func:`tagged_assignor`), and a starting worker reads the tags of the group's
members (``DescribeGroups``) before it joins (:func:`~stream_release.stream.access.
check_access`): a member with another tag refuses the start, with one line.

:func:`configuration_tag` covers what shapes a release: ``[schema]`` (hierarchy files by their
content), ``[privacy]``, ``[output]`` (not its ``ledger``: a path, like the archive's),
``[grouping]``, ``[virtual]`` (the register by its
content), ``[mechanism]`` as written, ``history.prefix``, the Redis server and database (not
its credentials) and ``[kafka.topics]``; not the credentials, the ports or the archive paths.
The tag is readable by whoever may describe the group, so it is an HMAC under a secret derived
from the pseudonymisation key (``derived_key("configuration-tag")``): it says nothing about the
configuration, nor about a register's people, to anyone without the key, and two workers with
different keys have different tags too.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from aiokafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from aiokafka.coordinator.protocol import ConsumerProtocolMemberMetadata

from stream_release.config import Settings
from stream_release.history.pseudonym import Pseudonymizer, load_key

TAG_PREFIX = b"stream-release/config/"
TAG_PURPOSE = "configuration-tag"
"""The purpose of the key derived for the tag's HMAC (domain separation)."""
"""Starts the ``user_data`` of a tagged member (other consumers' data is ignored)."""
CHUNK = 1 << 20


def configuration_tag(settings: Settings) -> bytes:
    """The tag of ``settings``: :data:`TAG_PREFIX` and 32 hex digits of an HMAC-SHA-256, keyed
    by a secret derived from the pseudonymisation key, over the release-shaping sections
    (module docstring), files replaced by their content's digest.

    Raises
    ------
    ConfigError
        No pseudonymisation key is configured.
    """
    redis_url = urlsplit(settings.redis.url)
    shaping = {
        "schema": settings.schema.model_dump(mode="python"),
        "privacy": settings.privacy.model_dump(mode="python"),
        # the ledger is where a worker writes, not what shapes a release (and its content
        # changes with every release)
        "output": settings.output.model_dump(mode="python", exclude={"ledger"}),
        "grouping": settings.grouping.model_dump(mode="python"),
        "virtual": settings.virtual.model_dump(mode="python"),
        "mechanism": settings.mechanism.model_dump(mode="python"),
        "history_prefix": settings.history.prefix,
        "redis": [redis_url.hostname, redis_url.port, redis_url.path],
        "topics": settings.kafka.topics.model_dump(mode="python"),
    }
    canonical = json.dumps(_files_by_content(shaping), sort_keys=True, default=str)
    secret = Pseudonymizer(load_key(settings.history)).derived_key(TAG_PURPOSE)
    digest = hmac.new(secret, canonical.encode("utf-8"), hashlib.sha256).hexdigest()
    return TAG_PREFIX + digest[:32].encode()


def member_tag(metadata: bytes) -> bytes | None:
    """The configuration tag in a consumer group member's metadata (``DescribeGroups``), or
    ``None`` when it has none (another kind of consumer)."""
    try:
        user_data = ConsumerProtocolMemberMetadata.decode(metadata).user_data
    except Exception:  # not the consumer protocol: not one of ours
        return None
    if isinstance(user_data, bytes) and user_data.startswith(TAG_PREFIX):
        return user_data
    return None


def tagged_assignor(tag: bytes) -> type[RoundRobinPartitionAssignor]:
    """aiokafka's round-robin assignor (same protocol name, same assignment) whose member
    metadata carries ``tag``."""

    class TaggedRoundRobin(RoundRobinPartitionAssignor):  # type: ignore[misc]  # untyped
        @classmethod
        def metadata(cls, topics: Any) -> ConsumerProtocolMemberMetadata:
            return ConsumerProtocolMemberMetadata(cls.version, list(topics), tag)

    return TaggedRoundRobin


def _files_by_content(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _files_by_content(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_files_by_content(v) for v in value]
    if isinstance(value, Path):
        return _digest(value)
    return value


def _digest(path: Path) -> str:
    """``sha256:<hex>`` of the file's bytes, or ``missing:<name>``."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                digest.update(chunk)
    except OSError:
        return f"missing:{path.name}"
    return f"sha256:{digest.hexdigest()}"
