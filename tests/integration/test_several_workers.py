"""Three workers, one release series on six shards, on the real broker and a Redis Cluster.

Every release is published once, by sequence, in one piece: its group lines (every part's,
numbered 0..G-1) and its manifest; the archive the workers share holds it as one release and
passes the audit; each shard's part equals the series of that shard's rows alone.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from support.data import adult_series, write_config
from support.kafka_topics import read_topic
from support.redis_cluster import RedisClusterNodes
from support.worker import MakeWorker, publish_with_cli, wait_for

from stream_release.audit import audit_directory
from stream_release.config import TopicSettings

pytestmark = pytest.mark.integration

SHARDS = "6"


def test_three_workers_cut_one_series_on_six_shards(
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
    make_worker: MakeWorker,
    redis_cluster: RedisClusterNodes,
    redis_cluster_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SR_KAFKA_PARTITIONS", SHARDS)
    config = write_config(tmp_path, shared_data)
    snaps = adult_series(shared_data, tmp_path, 20, rounds=3)
    extra = {
        "SR_KAFKA_PARTITIONS": SHARDS,
        "SR_REDIS_URL": redis_cluster.url,
        "SR_REDIS_CLUSTER": "true",
        "SR_HISTORY_PREFIX": redis_cluster_prefix,
    }
    workers = [make_worker(config, extra=extra, log=f"w{i}.log") for i in range(3)]
    for worker in workers:
        worker.start()
    for k, snap in enumerate(snaps, start=1):
        publish_with_cli(config, snap)
        wait_for(
            workers[0],
            kafka_bootstrap,
            kafka_topics.manifests,
            lambda m, k=k: len(m) >= k,
            f"the manifest of release {k}",
        )
    for worker in workers:
        worker.check_alive()
    owned = [
        sorted(json.loads(line)["shards"])
        for worker in workers
        for line in worker.log.read_text().splitlines()
        if '"shards_assigned"' in line
    ]
    assert owned, "no worker logged the shards it was assigned"

    manifests = [json.loads(m.value) for m in read_topic(kafka_bootstrap, kafka_topics.manifests)]
    assert [m["sequence"] for m in manifests] == [1, 2, 3]
    lines = [json.loads(m.value) for m in read_topic(kafka_bootstrap, kafka_topics.releases)]
    per_release = Counter(line["sequence"] for line in lines)
    archive = tmp_path / "archive"
    for manifest in manifests:
        k = manifest["sequence"]
        assert manifest["release"] == snaps[k - 1].stem
        assert per_release[k] == manifest["groups"]
        mine = [line for line in lines if line["sequence"] == k]
        assert [line["group"] for line in mine] == list(range(manifest["groups"]))
        filed = (archive / f"release-{k:04d}.jsonl").read_text().splitlines()
        assert [json.loads(line) for line in filed] == mine
        assert json.loads((archive / f"manifest-{k:04d}.json").read_text()) == manifest
    report = audit_directory(archive, private=tmp_path / "archive.private", config=config)
    assert report.ok and len(report.releases) == 3, report.table()
