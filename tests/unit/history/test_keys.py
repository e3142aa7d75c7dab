"""Key names of sharded namespaces: one hash tag per shard, one for the release level."""

from __future__ import annotations

import re

import numpy as np
import pytest
from redis.crc import key_slot

from stream_release.history.keys import RedisKeys
from stream_release.history.pseudonym import Pseudonymizer

KEY = bytes(range(32))
LABEL = "2026-10"


def every_key(keys: RedisKeys, pseudonyms: np.ndarray) -> list[str]:
    """Every key name ``keys`` builds, one of each kind (individuals: all of ``pseudonyms``)."""
    names = [
        keys.sequence,
        keys.values,
        keys.key_check,
        keys.record(1),
        keys.record(123456789),
        keys.labels,
        keys.published,
        keys.open_labels,
        keys.stage_rows(LABEL),
        keys.stage_seal(LABEL),
        keys.stage_rejected(LABEL),
        keys.status_outbox,
        keys.mechanism_state(b"k"),
    ]
    return names + [k.decode() for k in keys.individuals(pseudonyms)]


def hash_tag(name: str) -> str | None:
    """The Redis Cluster hash tag of ``name`` (the text between the first ``{`` and the next
    ``}``, when not empty)."""
    match = re.match(r"[^{]*\{([^}]+)\}", name)
    return match.group(1) if match else None


def test_every_key_of_a_shard_is_in_one_slot() -> None:
    pseudonyms = Pseudonymizer(KEY).pseudonyms([f"p-{i}" for i in range(2000)])
    for shard in (0, 3, 17):
        names = every_key(RedisKeys.for_shard("sr", shard), pseudonyms)
        assert {hash_tag(n) for n in names} == {f"sr:{shard}"}
        assert len({key_slot(n.encode()) for n in names}) == 1
        assert all(n.startswith(f"{{sr:{shard}}}:") for n in names)


def test_every_release_level_key_is_in_one_slot() -> None:
    names = every_key(RedisKeys.for_release("sr"), np.zeros(0, dtype="S16"))
    assert {hash_tag(n) for n in names} == {"sr:release"}
    assert len({key_slot(n.encode()) for n in names}) == 1


def test_a_plain_namespace_keeps_its_names() -> None:
    """Deployments from before sharding keep their keys: no hash tag but the individual's."""
    keys = RedisKeys("sr")
    assert (keys.sequence, keys.record(2), keys.labels) == (
        "sr:seq",
        "sr:release:00000002",
        "sr:labels",
    )
    assert keys.individual(b"\x01" * 16) == "sr:{ind:" + "01" * 16 + "}:h"
    assert keys.shard is None and not keys.tagged


def test_individual_keys_of_a_shard() -> None:
    keys = RedisKeys.for_shard("svc", 2)
    out = Pseudonymizer(KEY).pseudonyms([f"id-{i}" for i in range(50)])
    for i, name in enumerate(keys.individuals(out)):
        exact = out[i : i + 1].tobytes()
        assert name.decode() == keys.individual(exact) == f"{{svc:2}}:ind:{exact.hex()}:h"
        assert re.fullmatch(rb"\{svc:2\}:ind:[0-9a-f]{32}:h", name)


def test_tags_never_collide_across_prefixes_and_shards() -> None:
    """A prefix may hold ``:`` and digits: no two (prefix, shard or release level) share a tag,
    whichever prefixes an operator picks."""
    prefixes = ["sr", "sr:1", "sr:release", "sr:1:release", "a", "a:0", "release", "1"]
    tags: dict[str, tuple[str, str]] = {}
    for prefix in prefixes:
        spaces = {"release": RedisKeys.for_release(prefix)}
        spaces |= {str(p): RedisKeys.for_shard(prefix, p) for p in range(4)}
        spaces["plain"] = RedisKeys(prefix)
        for space, keys in spaces.items():
            tag = hash_tag(keys.sequence) or f"(none) {keys.sequence}"
            assert tag not in tags, f"{(prefix, space)} shares {tag!r} with {tags[tag]}"
            tags[tag] = (prefix, space)


def test_match_patterns_are_exact_per_namespace() -> None:
    assert RedisKeys.for_shard("a*b", 1).match == "{a\\*b:1}:*"
    assert RedisKeys.for_release("sr").match == "{sr:release}:*"
    assert RedisKeys("sr").match == "sr:*"


@pytest.mark.parametrize("shard", [-1, True, 1.0, "1"])
def test_a_shard_is_a_partition_number(shard: object) -> None:
    with pytest.raises(ValueError, match="partition number"):
        RedisKeys.for_shard("sr", shard)  # type: ignore[arg-type]


def test_names_say_where() -> None:
    assert RedisKeys.for_shard("sr", 4).where == "prefix 'sr' shard 4"
    assert RedisKeys.for_release("sr").where == "prefix 'sr' (release level)"
    assert repr(RedisKeys.for_shard("sr", 4)) == "RedisKeys.for_shard('sr', 4)"
