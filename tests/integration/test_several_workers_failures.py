"""Failures across workers: three workers, six shards, the real broker and a Redis Cluster.

Each run sends the same three Adult snapshots (records on six partitions, a seal each) and
ends with every release published; against one uninterrupted run of three workers:

* every release appears by ``sequence`` (1, 2, 3) with the same manifest and group lines
  (``elapsed_s`` aside; copies of one message identical: consumers dedupe by sequence), read
  as a ``read_committed`` consumer reads them;
* the cluster holds the same keys and values: every individual's history (each linkage
  counted once), the shards' parts, the release records, labels, sequences, published
  marker, and nothing in flight (no staging, vote or part marker left);
* the shared archive holds the same files and passes the audit.

The failures:

* **a worker killed at a kill point** (SIGKILL by itself, mid-way through release 2): the
  worker runs alone until it dies, owning every shard; two others then start, take its
  shards and finish the series;
* **the sender killed mid-send, and the worker that sent before it sends again** (SIGKILL at
  ``groups_sent`` of release 2 by itself): the release producer of a worker that lost shard 0
  has been fenced by the next sender's, and must not be used when shard 0 comes back;
* **a worker killed by the test while three run** (SIGKILL after release 1's manifest): its
  shards move to the two others when its session times out;
* **a worker added and one removed** between releases and while release 2 is cut;
* **a master failed over** (its replica promoted) between releases.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from support.crash_runs import RELEASES, wait_for_sigkill
from support.data import adult_series, write_config
from support.redis_cluster import RedisClusterNodes
from support.services import redis_namespace
from support.sharded_runs import (
    SHARDS,
    WORKERS,
    Run,
    ShardedOutcome,
    assigned_shards,
    log_entries,
)

from stream_release.history.keys import RedisKeys

pytestmark = pytest.mark.integration

KILL_POINTS = {
    # the n-th time the lone worker reaches the point is in release 2 (each release: a part
    # per shard, four files per part plus four merged ones)
    "cut_loaded": SHARDS + 4,
    "planned": SHARDS + 4,
    "commit_queued": SHARDS + 4,
    "committed": SHARDS + 4,
    "finalizing": 4 * (SHARDS + 1) + 2 * SHARDS,
    "groups_sent": 2,
    "marked": 2,
}


@pytest.fixture(scope="module")
def series(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> tuple[Path, list[Path]]:
    directory = tmp_path_factory.mktemp("sharded-series")
    config = write_config(directory, shared_data)
    return config, adult_series(shared_data, directory, 20, rounds=RELEASES)


@pytest.fixture
def run(
    series: tuple[Path, list[Path]],
    tmp_path: Path,
    kafka_bootstrap: str,
    redis_cluster: RedisClusterNodes,
    redis_cluster_prefix: str,
) -> Iterator[Run]:
    config, _ = series
    run = Run(config, tmp_path, kafka_bootstrap, redis_cluster.url, redis_cluster_prefix)
    try:
        yield run
    finally:
        run.kill_all()


@pytest.fixture(scope="module")
def uninterrupted(
    series: tuple[Path, list[Path]],
    tmp_path_factory: pytest.TempPathFactory,
    kafka_bootstrap: str,
    redis_cluster: RedisClusterNodes,
) -> ShardedOutcome:
    config, snaps = series
    directory = tmp_path_factory.mktemp("uninterrupted")
    with redis_namespace(lambda: redis_cluster.url, cluster=True) as prefix:
        run = Run(config, directory, kafka_bootstrap, redis_cluster.url, prefix)
        try:
            for i in range(WORKERS):
                run.worker(f"w{i}")
            run.send(snaps)
            return run.outcome(redis_cluster.url, prefix)
        finally:
            run.kill_all()


def finish_like(run: Run, reference: ShardedOutcome, cluster_url: str, prefix: str) -> None:
    """Let ``run`` publish the series, then check it equals the ``reference`` run's."""
    same(run.outcome(cluster_url, prefix), reference, prefix, reference_prefix(reference))


def same(outcome: ShardedOutcome, reference: ShardedOutcome, prefix: str, other: str) -> None:
    """``outcome`` equals ``reference`` (the cluster's key names under their own prefix)."""
    assert sorted(outcome.manifests) == list(range(1, RELEASES + 1))
    assert outcome.manifests == reference.manifests
    assert outcome.groups == reference.groups
    assert {k.replace(prefix, "P"): v for k, v in outcome.redis.items()} == {
        k.replace(other, "P"): v for k, v in reference.redis.items()
    }
    assert outcome.archive == reference.archive


@pytest.mark.parametrize("kill_at", sorted(KILL_POINTS))
def test_a_worker_killed_at_a_kill_point(
    kill_at: str,
    series: tuple[Path, list[Path]],
    run: Run,
    redis_cluster: RedisClusterNodes,
    redis_cluster_prefix: str,
    uninterrupted: ShardedOutcome,
) -> None:
    _, snaps = series
    run.send(snaps)
    lone = run.worker("killed", kill_at=f"{kill_at}:{KILL_POINTS[kill_at]}")
    wait_for_sigkill(lone, kill_at)
    for i in range(WORKERS - 1):
        run.worker(f"w{i}")
    finish_like(run, uninterrupted, redis_cluster.url, redis_cluster_prefix)


def test_the_sender_killed_and_the_one_before_it_sends_again(
    series: tuple[Path, list[Path]],
    run: Run,
    redis_cluster: RedisClusterNodes,
    redis_cluster_prefix: str,
    uninterrupted: ShardedOutcome,
) -> None:
    """Issue 26, item 7: ``publication failed, will retry: AssertionError``.

    The first worker sends release 1 alone, with its transactional producer. A second one
    joins, whose client id sorts first, so it takes shard 0 and sends release 2: starting its
    transactional producer (same transactional id) fences the first's. It dies at
    ``groups_sent``; shard 0 goes back to the first worker, which must send release 2 with a
    producer of its own, not the fenced one (aiokafka asserted on aborting a fenced
    transaction, and the worker logged only the assertion's type; a fenced producer is now
    dropped instead of aborted, but the first worker gave its producer up with shard 0 and
    never meets the fencing). The series ends as the uninterrupted run's, and no worker
    logged a fencing, nor any failure of its own code (a traceback)."""
    _, snaps = series
    first = run.worker("first", client_id="sr-z")
    run.send(snaps[:1])
    run.wait(lambda m: len(m) >= 1, "release 1")
    second = run.worker("second", client_id="sr-a", kill_at="groups_sent:1")
    run.wait_for_shard(second, 0)
    run.send(snaps[1:2])
    wait_for_sigkill(second, "groups_sent")
    run.wait(lambda m: len(m) >= 2, "release 2")
    assert 0 in assigned_shards(first)
    run.send(snaps[2:])
    finish_like(run, uninterrupted, redis_cluster.url, redis_cluster_prefix)
    for worker in run.workers:
        entries = log_entries(worker)
        fenced = [e for e in entries if e.get("error") in ("AssertionError", "ProducerFenced")]
        assert not fenced, worker.tail()  # the first worker's old producer is never used
        assert not [e for e in entries if "exc_info" in e], worker.tail()  # no traceback


def reference_prefix(outcome: ShardedOutcome) -> str:
    """The prefix of the uninterrupted run's keys (its namespace is gone; its names stay)."""
    name = next(iter(outcome.redis))
    return name.split(":", 1)[0].lstrip("{")


def send_one_by_one(run: Run, snaps: list[Path], *, first: int) -> None:
    """Send each snapshot once the release before it is published (``first``: the sequence
    of the first). The cut begins whichever sealed release is complete first; with two sent
    together while a dead worker's partitions move or a failover pauses the cluster, the
    later one was once complete first (CI of 9bd7002: t03 cut as release 2), so the run cut
    the same releases under other sequences than the uninterrupted run's. Which release is
    complete first there is not what these runs test; why the later one could be is not
    explained yet (the control topic has one partition, and each records partition holds
    the earlier release's records first)."""
    for k, snap in enumerate(snaps, start=first):
        run.send([snap])
        run.wait(partial(_at_least, k), f"release {k}")


def _at_least(count: int, manifests: dict[int, bytes]) -> bool:
    return len(manifests) >= count


def test_a_worker_killed_while_three_run(
    series: tuple[Path, list[Path]],
    run: Run,
    redis_cluster: RedisClusterNodes,
    redis_cluster_prefix: str,
    uninterrupted: ShardedOutcome,
) -> None:
    """SIGKILL by the test after release 1: the dead worker's shards move to the two others
    once its session times out, and they cut releases 2 and 3."""
    _, snaps = series
    workers = [run.worker(f"w{i}") for i in range(WORKERS)]
    run.send(snaps[:1])
    run.wait(lambda m: len(m) >= 1, "release 1")
    workers[0].kill()
    send_one_by_one(run, snaps[1:], first=2)
    finish_like(run, uninterrupted, redis_cluster.url, redis_cluster_prefix)


def test_workers_added_and_removed_between_and_during_releases(
    series: tuple[Path, list[Path]],
    run: Run,
    redis_cluster: RedisClusterNodes,
    redis_cluster_prefix: str,
    uninterrupted: ShardedOutcome,
) -> None:
    """Two workers cut release 1; a third joins before release 2; the first leaves (SIGTERM)
    while release 2 is being cut, and a fourth joins; release 3 is cut by those left."""
    _, snaps = series
    first, _ = run.worker("w0"), run.worker("w1")
    run.send(snaps[:1])
    run.wait(lambda m: len(m) >= 1, "release 1")
    run.joined(run.worker("w2"))  # joined before release 2, not merely started
    run.send(snaps[1:2])
    assert first.stop() == 0, first.tail()  # while release 2 is staged or cut
    run.joined(run.worker("w3"))
    run.wait(lambda m: len(m) >= 2, "release 2")
    run.send(snaps[2:])
    finish_like(run, uninterrupted, redis_cluster.url, redis_cluster_prefix)


def test_a_master_failed_over_mid_series(
    series: tuple[Path, list[Path]],
    run: Run,
    redis_cluster: RedisClusterNodes,
    redis_cluster_prefix: str,
    uninterrupted: ShardedOutcome,
) -> None:
    """After release 1, the master holding the release-level records (and the shards that
    share its slots) hands them to its replica; the workers go on against the promoted one."""
    _, snaps = series
    for i in range(WORKERS):
        run.worker(f"w{i}")
    run.send(snaps[:1])
    run.wait(lambda m: len(m) >= 1, "release 1")
    master = redis_cluster.master_of(RedisKeys.for_release(redis_cluster_prefix).sequence)
    promoted = redis_cluster.fail_over(master)
    assert redis_cluster.roles()[promoted] == "master"
    send_one_by_one(run, snaps[1:], first=2)
    finish_like(run, uninterrupted, redis_cluster.url, redis_cluster_prefix)
