"""What the history store's layout on Redis Cluster relies on, checked on a real cluster (the
session's ``redis_cluster``: 3 masters, 3 replicas) through redis-py's ``RedisCluster``.

docs/scale-out.md puts every key of shard ``p`` under the hash tag ``{<prefix>:<p>}`` and the
release-level keys under ``{<prefix>}``. These tests pin what that needs:

* one tag is one slot, whose ``MULTI``/``EXEC`` with ``WATCH`` commits whole or, when a watched
  key changed, not at all (its replies are raw: ``b"OK"`` for a ``SET``, not ``True``);
* keys of two tags cannot share a transaction: redis-py refuses it before sending anything
  (``CrossSlotTransactionError``, which is not a ``redis.RedisError``), and the server refuses
  it too, even when both slots live on the same master;
* a Lua script on the keys of one slot runs; only a script with flags (``#!lua``) is held to
  its slot by the server when it touches a key it was not given;
* the tags of a realistic prefix land on more than one master;
* a shard's data survives its master's failover, manual or after a crash, and a client reaches
  it afterwards; a transaction WATCHing across a failover fails with ``WatchError``; during a
  crash's failover redis-py's own retries are spent at once (``ConnectionError``);
* a slot no master serves is a failure of Redis the worker tries again, not a bug.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import ClusterPipeline
from redis.crc import key_slot
from redis.exceptions import CrossSlotTransactionError, RedisClusterException
from support.redis_cluster import RedisClusterNodes

from stream_release.errors import HistoryStoreError
from stream_release.history import RedisKeys
from stream_release.history.redis_store import RedisHistoryStore
from stream_release.stream.retry import is_dependency_error

pytestmark = pytest.mark.integration

SHARDS = 6
REALISTIC_PREFIX = "sr"  # history.prefix's default

# KEYS[1] LIST  appended to
# KEYS[2] STRING counter of the appends
# ARGV[1] the element
# Returns {length of KEYS[1], counter}
APPEND_AND_COUNT = """
local length = redis.call('RPUSH', KEYS[1], ARGV[1])
return {length, redis.call('INCR', KEYS[2])}
"""

# KEYS[1] any key (it only routes the call); ARGV[1] a key the script was NOT given
SET_UNDECLARED = "return redis.call('SET', ARGV[1], 'x')"


def tag(prefix: str, shard: int | None = None) -> str:
    """``{prefix:shard}``, or ``{prefix}`` for the release-level keys (docs/scale-out.md)."""
    return f"{{{prefix}}}" if shard is None else f"{{{prefix}:{shard}}}"


@pytest.fixture
def client(redis_cluster: RedisClusterNodes) -> Iterator[redis.RedisCluster]:
    with redis_cluster.client() as client:
        yield client


def transaction(client: redis.RedisCluster) -> ClusterPipeline:
    """``client.pipeline(transaction=True)``: MULTI/EXEC, WATCH allowed (all in one slot)."""
    pipe: ClusterPipeline = client.pipeline(transaction=True)  # type: ignore[no-untyped-call]
    return pipe


def two_slots_on_one_master(redis_cluster: RedisClusterNodes, prefix: str) -> tuple[str, str, str]:
    """A master and two keys of different shard tags that it serves."""
    seen: dict[str, str] = {}
    for shard in range(64):
        key = f"{tag(prefix, shard)}:k"
        master = redis_cluster.master_of(key)
        if master in seen:
            return master, seen[master], key
        seen[master] = key
    raise AssertionError(f"no two of 64 shard tags on one master: {seen}")


# -- (a) one tag, one slot, one transaction --------------------------------------------------


def test_keys_of_one_tag_share_a_slot_and_commit_together(
    client: redis.RedisCluster, redis_cluster_prefix: str
) -> None:
    a, b = f"{tag(redis_cluster_prefix, 0)}:a", f"{tag(redis_cluster_prefix, 0)}:b"
    assert (
        key_slot(a.encode())
        == key_slot(b.encode())
        == key_slot(f"{redis_cluster_prefix}:0".encode())
    )
    client.set(a, b"1")
    with transaction(client) as pipe:
        pipe.watch(a, b)
        seen = int(pipe.get(a))  # after WATCH the pipeline answers at once, on its connection
        pipe.multi()
        pipe.set(a, seen + 1)
        pipe.rpush(b, b"x", b"y")
        # raw replies: a cluster transaction skips redis-py's reply callbacks (SET -> True in
        # a standalone pipeline), all but the few of RedisCluster.cluster_response_callbacks
        assert pipe.execute() == [b"OK", 2]
    assert client.get(a) == b"2"
    assert client.lrange(b, 0, -1) == [b"x", b"y"]


def test_a_watched_key_changed_by_another_client_fails_the_exec(
    redis_cluster: RedisClusterNodes, client: redis.RedisCluster, redis_cluster_prefix: str
) -> None:
    a, b = f"{tag(redis_cluster_prefix, 0)}:a", f"{tag(redis_cluster_prefix, 0)}:b"
    client.set(a, b"mine")
    with redis_cluster.client() as rival, transaction(client) as pipe:
        pipe.watch(a)
        assert pipe.get(a) == b"mine"
        rival.set(a, b"rival")
        pipe.multi()
        pipe.set(a, b"lost")
        pipe.set(b, b"lost")
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert client.get(a) == b"rival"
    assert client.exists(b) == 0  # nothing of the transaction was applied


# -- (b) two tags cannot share one ------------------------------------------------------------


def test_keys_of_two_tags_are_refused_in_one_transaction(
    redis_cluster: RedisClusterNodes, client: redis.RedisCluster, redis_cluster_prefix: str
) -> None:
    a0, a1 = f"{tag(redis_cluster_prefix, 0)}:a", f"{tag(redis_cluster_prefix, 1)}:a"
    assert key_slot(a0.encode()) != key_slot(a1.encode())
    with transaction(client) as pipe:
        pipe.set(a0, b"1")
        pipe.set(a1, b"1")
        with pytest.raises(CrossSlotTransactionError, match="same slot"):
            pipe.execute()
    with transaction(client) as pipe:
        pipe.watch(a0)
        with pytest.raises(CrossSlotTransactionError, match="different slots"):
            pipe.watch(a1)
    with transaction(client) as pipe:
        # one WATCH of both: its parent class, from the client's slot check of any command
        with pytest.raises(RedisClusterException, match="same key slot") as refused:
            pipe.watch(a0, a1)
        assert type(refused.value) is RedisClusterException
    assert client.exists(a0) == client.exists(a1) == 0
    # neither is a redis.RedisError: `except redis.RedisError` does not catch them
    assert not issubclass(RedisClusterException, redis.RedisError)


def test_the_server_refuses_a_transaction_over_two_slots_of_one_master(
    redis_cluster: RedisClusterNodes, redis_cluster_prefix: str
) -> None:
    master, x, y = two_slots_on_one_master(redis_cluster, redis_cluster_prefix)
    with redis.Redis.from_url(f"redis://{master}") as node:
        pipe = node.pipeline(transaction=True)
        pipe.set(x, b"1")
        pipe.set(y, b"1")
        with pytest.raises(redis.exceptions.ClusterCrossSlotError, match="same slot"):
            pipe.execute()
        assert node.exists(x) == node.exists(y) == 0


# -- (c) Lua ---------------------------------------------------------------------------------


def test_a_script_on_the_keys_of_one_slot_runs(
    client: redis.RedisCluster, redis_cluster_prefix: str
) -> None:
    items, count = f"{tag(redis_cluster_prefix, 2)}:items", f"{tag(redis_cluster_prefix, 2)}:n"
    script = client.register_script(APPEND_AND_COUNT)
    assert script(keys=[items, count], args=[b"a"]) == [1, 1]
    assert script(keys=[items, count], args=[b"b"]) == [2, 2]
    assert client.lrange(items, 0, -1) == [b"a", b"b"]
    other = f"{tag(redis_cluster_prefix, 3)}:n"
    with pytest.raises(RedisClusterException, match="same key slot"):
        script(keys=[items, other], args=[b"c"])  # refused by redis-py, never sent
    assert client.llen(items) == 2


def test_only_a_flagged_script_is_held_to_its_slot_by_the_server(
    redis_cluster: RedisClusterNodes, client: redis.RedisCluster, redis_cluster_prefix: str
) -> None:
    """A script given a key of one slot that writes a key of another slot of the same master:
    Redis 7 lets a flagless script do it, and refuses it once the script has a shebang."""
    _, given, undeclared = two_slots_on_one_master(redis_cluster, redis_cluster_prefix)
    flagless = client.register_script(SET_UNDECLARED)
    assert flagless(keys=[given], args=[undeclared]) == b"OK"
    assert client.get(undeclared) == b"x"
    client.delete(undeclared)
    flagged = client.register_script("#!lua\n" + SET_UNDECLARED)
    with pytest.raises(redis.ResponseError, match="do not hash to the same slot"):
        flagged(keys=[given], args=[undeclared])
    assert client.exists(undeclared) == 0


# -- (d) spread ------------------------------------------------------------------------------


def test_the_shard_tags_of_a_realistic_prefix_spread_over_the_masters(
    redis_cluster: RedisClusterNodes,
) -> None:
    tags = [tag(REALISTIC_PREFIX, shard) for shard in range(SHARDS)] + [tag(REALISTIC_PREFIX)]
    placement = {t: redis_cluster.master_of(t) for t in tags}
    for t, master in placement.items():
        print(f"{t:8} slot {key_slot(t.encode()):5} -> {master}")
    assert len(set(placement.values())) > 1, placement


def test_the_namespace_patterns_find_its_keys_on_every_master(
    client: redis.RedisCluster, redis_cluster_prefix: str
) -> None:
    prefix = redis_cluster_prefix
    ours = [f"{prefix}:seq", f"{tag(prefix)}:seq"]
    ours += [f"{tag(prefix, shard)}:h" for shard in range(SHARDS)]
    lookalikes = [f"{prefix}x:seq", f"{tag(prefix + 'x')}:seq", f"{tag(prefix + 'x', 0)}:h"]
    try:
        for key in ours + lookalikes:
            client.set(key, b"1")
        found = set()
        for node in client.get_primaries():  # type: ignore[no-untyped-call]
            master = client.get_redis_connection(node)
            for pattern in RedisKeys(prefix).matches:
                found |= set(master.scan_iter(match=pattern))
        assert found == {key.encode() for key in ours}
    finally:
        for key in lookalikes:
            client.delete(key)


# -- (e) failover ----------------------------------------------------------------------------


def test_a_shard_survives_a_manual_failover_of_its_master(
    redis_cluster: RedisClusterNodes, client: redis.RedisCluster, redis_cluster_prefix: str
) -> None:
    items, count = f"{tag(redis_cluster_prefix, 0)}:items", f"{tag(redis_cluster_prefix, 0)}:n"
    script = client.register_script(APPEND_AND_COUNT)
    assert script(keys=[items, count], args=[b"before"]) == [1, 1]
    old = redis_cluster.master_of(items)
    with redis_cluster.client() as stale, transaction(client) as pending:
        assert stale.get(count) == b"1"  # its slot table names the old master from now on
        pending.watch(items, count)  # on a connection to the old master
        assert pending.lrange(items, 0, -1) == [b"before"]
        started = time.monotonic()
        new = redis_cluster.fail_over(old)
        print(f"{old} -> {new} in {time.monotonic() - started:.2f} s")
        assert redis_cluster.master_of(items) == new != old
        assert redis_cluster.roles()[old] == "replica"
        # a WATCH across the failover: the old master answers MOVED inside the transaction,
        # which redis-py turns into a WatchError (not a retry elsewhere without the WATCH)
        pending.multi()
        pending.rpush(items, b"lost")
        with pytest.raises(redis.WatchError, match="Slot rebalancing"):
            pending.execute()
        # a transaction begun after it: redis-py follows the MOVED, WATCH included
        with transaction(stale) as pipe:
            pipe.watch(items, count)
            assert pipe.lrange(items, 0, -1) == [b"before"]
            pipe.multi()
            pipe.rpush(items, b"after")
            pipe.incr(count)
            assert pipe.execute() == [2, 2]
    assert client.lrange(items, 0, -1) == [b"before", b"after"]
    assert script(keys=[items, count], args=[b"again"]) == [3, 3]  # registered before


def test_a_killed_master_is_replaced_by_its_replica(
    redis_cluster: RedisClusterNodes, client: redis.RedisCluster, redis_cluster_prefix: str
) -> None:
    key = f"{tag(redis_cluster_prefix, 1)}:h"
    master = redis_cluster.master_of(key)
    with redis.Redis.from_url(f"redis://{master}") as direct:
        direct.set(key, b"acknowledged")
        assert direct.wait(1, 2000) == 1  # its replica has it
    assert client.get(key) == b"acknowledged"
    redis_cluster.kill(master)
    # until the failover, every node still names the dead master: redis-py reloads its slot
    # table and tries again without pausing, and its retries are spent within milliseconds
    with pytest.raises(redis.ConnectionError):
        client.set(key, b"during")
    started = time.monotonic()
    successor = redis_cluster.wait_failover(master)
    print(f"{master} killed: {successor} took over in {time.monotonic() - started:.2f} s")
    assert client.get(key) == b"acknowledged"
    assert client.set(key, b"after")
    redis_cluster.restart(master)
    assert redis_cluster.roles()[master] == "replica"
    assert client.get(key) == b"after"


def test_a_slot_no_master_serves_is_a_failure_the_worker_waits_out(
    redis_cluster: RedisClusterNodes, redis_cluster_prefix: str
) -> None:
    keys = RedisKeys.for_shard(redis_cluster_prefix, 2)
    slot = key_slot(keys.sequence.encode())
    master = redis_cluster.master_of(keys.sequence)
    with redis_cluster.client() as client:
        store = RedisHistoryStore(client, keys)
        assert store.last_sequence() == 0
        for address in redis_cluster.running():
            with redis.Redis.from_url(f"redis://{address}") as node:
                node.execute_command("CLUSTER", "DELSLOTS", slot)
        try:
            # redis-py's answer is a RedisClusterException ("All slots are not covered", or
            # "Hash slot not served" when its slot table was loaded before), not a
            # redis.RedisError: the store names it as Redis's failure, which is retried
            unserved = "slots are not covered|Hash slot not served"
            with pytest.raises(HistoryStoreError, match=unserved) as failed:
                store.last_sequence()
            assert is_dependency_error(failed.value)
        finally:
            with redis.Redis.from_url(f"redis://{master}") as node:
                node.execute_command("CLUSTER", "ADDSLOTS", slot)
            redis_cluster.wait_settled()
        assert store.last_sequence() == 0
