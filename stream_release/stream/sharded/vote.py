"""The vote of the shards on a release, as ``release_vote.lua`` keeps it: the union of the
parts' suppressed rows, and the refusals a part or the union sends
(:mod:`stream_release.stream.sharded.cut`)."""

from __future__ import annotations

import logging

import orjson

from stream_release.errors import GuaranteeUnsatisfiable
from stream_release.mechanisms.global_guarantee.plan import SuppressedUnion
from stream_release.stream.messages import ReleaseNotice
from stream_release.stream.notices import shard_refusal_notice

__all__ = ["log_part_refused", "refusal_of", "union_refusal", "vote_union"]

log = logging.getLogger(__name__)


def union_refusal(label: str) -> ReleaseNotice:
    """The status message of a release whose parts' suppressed rows could not be made one
    safe set within :data:`ROUNDS` rounds."""
    return shard_refusal_notice(label, GuaranteeUnsatisfiable("the shards' suppressed rows"))


def vote_union(raw: str) -> SuppressedUnion:
    """The union of the parts' suppressed rows as ``release_vote.lua`` wrote it."""
    document = orjson.loads(raw)
    counts = document["counts"]
    pairs = counts if isinstance(counts, list) else []  # Lua encodes an empty table as {}
    return SuppressedUnion({str(v): int(c) for v, c in pairs}, int(document["size"]))


def refusal_of(current: dict[str, str]) -> ReleaseNotice:
    """The status message of a refused release in flight (the refusing shard's vote)."""
    return ReleaseNotice.model_validate(orjson.loads(current["refusal"])["refused"])


def log_part_refused(label: str, shard: int, exc: Exception) -> None:
    """A shard's part cannot be made: the kind of failure and the shard, never its counts."""
    log.warning(
        "release %r: shard %d's part cannot be made (%s); the release is refused",
        label,
        shard,
        type(exc).__name__,
        extra={"event": "part_refused", "release": label, "shard": shard},
    )
