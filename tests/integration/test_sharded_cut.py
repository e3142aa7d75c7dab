"""Releases cut on shards by two workers (:class:`ShardedCut`) on a real Redis.

Three shards, worker A owning 0 and 1, worker B owning 2. Each part equals what one series of
that shard's rows alone publishes while no row is suppressed (its groups numbered after the
shards before it); the release is one release: one sequence, group numbers 0..G-1, a
manifest whose counts cover every part, nothing finished until every part is, and the merged
series passes the audit.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.data import adult_series, write_config
from support.sharded_staging import shard_of, shard_settings, stage

from stream_release.audit import audit_directory
from stream_release.config import Settings, load_settings
from stream_release.devtools.datasets import Table, read_csv_table
from stream_release.errors import ConfigError
from stream_release.history.keys import RedisKeys
from stream_release.history.redis_client import RedisClient, connect
from stream_release.io.release_files import published_sequences
from stream_release.pipeline.anonymize import anonymize_files
from stream_release.stream.sharded.cut import CutResult, ShardedCut
from stream_release.stream.sharded.service import ShardedReleaseService

pytestmark = pytest.mark.integration
KEY = "sharded-test-key-0123456789abcdef"
SHARDS = 3


def shard_snapshot(snapshot: Path, shard: int, directory: Path) -> Path:
    """The rows of ``snapshot`` whose id goes to ``shard``, as a snapshot of the same name."""
    table = read_csv_table(snapshot)
    keep = shard_of(table.columns["id"].tolist(), SHARDS) == shard
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / snapshot.name
    Table({name: column[keep] for name, column in table.columns.items()}).write_csv(path)
    return path


@pytest.fixture(params=["redis", "cluster"])
def store(request: pytest.FixtureRequest) -> tuple[RedisClient, str, bool]:
    """A client, a fresh prefix and whether it is a cluster's: one Redis server, and the
    session's Redis Cluster (every shard's commit in one slot)."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_url")
        return connect(url), request.getfixturevalue("redis_prefix"), False
    nodes = request.getfixturevalue("redis_cluster")
    return connect(nodes.url, cluster=True), request.getfixturevalue("redis_cluster_prefix"), True


def test_a_release_cut_on_three_shards_by_two_workers(
    shared_data: Path, tmp_path: Path, store: tuple[RedisClient, str, bool]
) -> None:
    client, prefix, cluster = store
    config = write_config(tmp_path, shared_data)
    settings = shard_settings(config, KEY, prefix, SHARDS, cluster=cluster)
    archive, private = tmp_path / "archive", tmp_path / "private"
    a = ShardedCut(settings, client, [0, 1], archive, private)
    b = ShardedCut(settings, client, [2], archive, private)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=2)
    for k, snap in enumerate(snaps, start=1):
        counts = stage(a, settings, snap, snap.stem)
        assert min(counts) > 0
        assert a.step() == CutResult([], [])  # A voted for its two parts; B has not
        assert a.current()["label"] == snap.stem and "union" not in a.current()
        assert b.step() == CutResult([], [])  # B's vote decides; B confirms, A has not
        assert "union" in a.current() and "outcome" not in a.current()
        assert a.step() == CutResult([], [])  # A confirms and commits; B's part waits
        assert a.current()["outcome"] == "ok"
        [manifest] = b.step().manifests  # B commits its part and finishes the release
        assert a.step() == CutResult([], []) and a.current() == {}
        assert a.last_sequence() == b.last_sequence() == k
        assert manifest == a.manifest(k)
        assert (manifest["release"], manifest["sequence"]) == (snap.stem, k)
        assert manifest["records_in"] == sum(counts)

        lines = [json.loads(line) for line in a.group_lines(k).splitlines()]
        assert [line["group"] for line in lines] == list(range(len(lines)))
        assert {(line["release"], line["sequence"]) for line in lines} == {(snap.stem, k)}
        assert manifest["groups"] == len(lines)
        assert manifest["published"] == sum(line["size"] for line in lines)
        assert manifest["published"] + manifest["suppressed"] == sum(counts)
        parts = a.part_manifests(k)
        assert [p["records_in"] for p in parts] == counts
        assert manifest["breach"]["max"] == max(p["breach"]["max"] for p in parts)
        assert manifest["breach"]["max"] <= manifest["breach"]["bound"] == 0.5

    b.file_finished()
    a.file_finished()  # a second writer of the same files: the same bytes, each file once
    # the series as one: the merged public files, the merged assignments and private records
    # (a part's files keep its own suppressed rows, its members linked to every part's union)
    report = audit_directory(archive, private=private, config=config)
    assert report.ok and len(report.releases) == 2, report.table()
    assert (archive / "release-0002.jsonl").read_bytes() == a.group_lines(2)
    assert json.loads((archive / "manifest-0002.json").read_text()) == a.manifest(2)


def test_each_part_is_the_release_of_its_shard_alone(
    shared_data: Path, tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """A part is what offline ``anonymize`` publishes from the shard's rows alone, as a series
    of its own (same key, same settings), its groups numbered after the shards before it."""
    config = write_config(tmp_path, shared_data)
    settings = shard_settings(config, KEY, redis_prefix, SHARDS)
    client = connect(redis_url)
    cut = ShardedCut(settings, client, range(SHARDS), tmp_path / "archive", tmp_path / "p")
    snaps = adult_series(shared_data, tmp_path, 20, rounds=2)
    for snap in snaps:
        stage(cut, settings, snap, snap.stem)
        assert len(cut.step().manifests) == 1
    offsets = [0] * SHARDS
    for shard in range(SHARDS):
        alone = tmp_path / f"alone-{shard}"
        part_snaps = [shard_snapshot(snap, shard, tmp_path / f"s{shard}") for snap in snaps]
        anonymize_files(settings, alone, part_snaps)
        for k in (1, 2):
            ours = (tmp_path / "p" / f"shard-{shard}" / f"release-{k:04d}.jsonl").read_text()
            theirs = (alone / f"release-{k:04d}.jsonl").read_text()
            mine = [json.loads(line) for line in ours.splitlines()]
            other = [json.loads(line) for line in theirs.splitlines()]
            assert [line["group"] for line in mine] == [
                line["group"] + offsets[k - 1] for line in other
            ]
            for line in mine:
                line.pop("group")
            for line in other:
                line.pop("group")
            assert mine == other
            offsets[k - 1] += len(other)


def test_suppressed_rows_are_linked_to_the_union_of_the_shards(
    shared_data: Path, tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Six releases on three shards with rows suppressed in several parts of one release: an
    adversary sees every suppressed row of the release as one set, so each part links its
    suppressed rows to the union before it commits; the audit, which recomputes every
    linkage from the merged files with the union as one group, finds every claim true and
    no breach above 1/l, and the manifest's share is the union's."""
    config = write_config(tmp_path, shared_data)
    settings = shard_settings(config, "5e" * 32, redis_prefix, SHARDS)
    archive, private = tmp_path / "archive", tmp_path / "private"
    cut = ShardedCut(settings, connect(redis_url), range(SHARDS), archive, private)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=6)
    several = 0
    for snap in snaps:
        stage(cut, settings, snap, snap.stem)
        result = cut.step()
        assert len(result.manifests) == 1, result
        manifest = result.manifests[0]
        parts = cut.part_manifests(manifest["sequence"])
        rows = [p["suppressed_set"]["rows"] for p in parts]
        several += sum(1 for r in rows if r) >= 2
        assert manifest["suppressed_set"]["rows"] == sum(rows)
    assert several, "no release had rows suppressed in two parts: the test shows nothing"
    cut.file_finished()
    report = audit_directory(archive, private=private, config=config, snapshots=snaps)
    assert report.ok and len(report.releases) == len(snaps), report.table()


def test_a_series_keeps_its_partition_count_and_its_kind(
    shared_data: Path, tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Another partition count, or a series under the same prefix cut without shards, would
    put individuals where their histories are not: refused before anything is cut, with the
    fix."""
    config = write_config(tmp_path, shared_data)
    client = connect(redis_url)

    def settings(partitions: int) -> Settings:
        return load_settings(
            config, history={"key": KEY, "prefix": redis_prefix}, kafka={"partitions": partitions}
        )

    ShardedCut(settings(3), client, [0], tmp_path / "a", tmp_path / "p")
    with pytest.raises(ConfigError, match=r"was started with 3: .*set kafka.partitions = 3"):
        ShardedCut(settings(2), client, [0], tmp_path / "a", tmp_path / "p")
    client.set(RedisKeys(redis_prefix).sequence, 1)  # a series cut without shards
    with pytest.raises(ConfigError, match="holds a series cut without shards"):
        ShardedCut(settings(3), client, [0], tmp_path / "a", tmp_path / "p")


def test_a_register_is_refused_on_shards(
    shared_data: Path, tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """A shard would join people of the register who belong to other shards: refused."""
    config = write_config(tmp_path, shared_data)
    register = tmp_path / "register.csv"
    register.write_text("id\np-1\n")
    settings = shard_settings(config, KEY, redis_prefix, SHARDS, virtual={"registry": register})
    with pytest.raises(ConfigError, match=r"virtual\.registry cannot run on shards"):
        ShardedCut(settings, connect(redis_url), [0], tmp_path / "a", tmp_path / "p")


def test_release_records_are_deleted_once_sent_and_filed(
    shared_data: Path, tmp_path: Path, store: tuple[RedisClient, str, bool]
) -> None:
    client, prefix, cluster = store
    config = write_config(tmp_path, shared_data)
    settings = shard_settings(config, KEY, prefix, SHARDS, cluster=cluster)
    archive, private = tmp_path / "archive", tmp_path / "private"
    service = ShardedReleaseService(settings, client, archive, private)
    service.own(range(SHARDS))
    namespaces = service.record_namespaces()
    assert len(namespaces) == SHARDS + 1  # the merged manifests and every shard's parts

    def kept(sequence: int) -> list[int]:
        return [int(client.exists(keys.record(sequence))) for keys in namespaces]

    snaps = adult_series(shared_data, tmp_path, 20, rounds=3)
    for k, snap in enumerate(snaps[:2], start=1):
        stage(service.cut, settings, snap, snap.stem)
        [manifest] = service.cut_ready()  # cut and filed
        assert manifest["sequence"] == k
        service.mark_published(k)
    assert kept(1) == [0] * (SHARDS + 1) and kept(2) == [1] * (SHARDS + 1)

    # filing behind the sending: a record not filed yet is kept until it is
    stage(service.cut, settings, snaps[2], snaps[2].stem)
    assert service.cut.step().manifests  # release 3 finished, not filed (as on a crash)
    (archive / "manifest-0002.json").unlink()  # nor release 2 (its manifest goes last)
    service.mark_published(3)
    assert kept(2) == [1] * (SHARDS + 1)  # release 2 is not filed: its records are read
    assert service.cut_ready() == []  # files releases 2 and 3, then deletes the records of 2
    assert kept(2) == [0] * (SHARDS + 1) and kept(3) == [1] * (SHARDS + 1)
    assert client.get(RedisKeys.for_release(prefix).records_from) == b"3"
    # a worker whose listing of the archive lags (here: sees none of it) files from the first
    # record kept, not from a record another worker filed and deleted
    lagging = ShardedReleaseService(settings, client, tmp_path / "lagging", private)
    lagging.cut.file_finished()
    assert published_sequences(tmp_path / "lagging") == [3]
    report = audit_directory(archive, private=private, config=config)
    assert report.ok and len(report.releases) == 3, report.table()
