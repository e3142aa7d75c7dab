"""A series rewound by a backup is refused (issue 26, item 5), on a real Redis and broker.

Measured on main before: restoring the Redis history and both archives from one backup let the
next snapshot be published under a reused sequence, with 44 pairs past 1/2, and the audit
passed; all three agree with each other. What does not go back with them refuses:

* offline, the series ledger beside the archive (``anonymize --history redis://...``);
* the worker, the same ledger when it starts, and the manifests already on ``sr.manifests``
  when the ledger went back too (or lived where the restore put it back): the release due is
  held (``store_regressed``, ``/health`` 503, a ``held`` status message on ``sr.status``,
  ``sr_store_regressed`` 1), nothing is cut, until the store is restored to the last release.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from support.data import adult_snapshot, write_config
from support.kafka_topics import read_topic
from support.service_runs import log_events, metric_sample, stage_sealed
from support.tiny_series import tiny_config, tiny_snapshots

from stream_release.audit import audit_directory
from stream_release.cli.main import main
from stream_release.config import KafkaSettings, load_settings
from stream_release.errors import NEW_SERIES_CAVEAT, SeriesRewound
from stream_release.history.keys import RedisKeys
from stream_release.stream.notices import STORE_FIX
from stream_release.stream.runner import ServiceRunner
from stream_release.stream.service import ReleaseService

pytestmark = pytest.mark.integration

KEY = "rewound-series-test-key-0123456789abcdef"
ROWS = 300


def _backup(client: redis.Redis, prefix: str, tmp_path: Path, name: str) -> dict[bytes, bytes]:
    """Copy both archives to ``tmp_path/name`` and return a dump of every key of ``prefix``."""
    for archive in ("archive", "archive.private"):
        shutil.copytree(tmp_path / archive, tmp_path / name / archive)
    return {key: client.dump(key) for key in client.scan_iter(match=RedisKeys(prefix).match)}


def _restore(
    client: redis.Redis, prefix: str, tmp_path: Path, name: str, keys: dict[bytes, bytes]
) -> None:
    """Put the archives and the keys of backup ``name`` back, dropping everything since."""
    for archive in ("archive", "archive.private"):
        shutil.rmtree(tmp_path / archive)
        shutil.copytree(tmp_path / name / archive, tmp_path / archive)
    now = list(client.scan_iter(match=RedisKeys(prefix).match))
    if now:
        client.delete(*now)
    for key, dumped in keys.items():
        client.restore(key, 0, dumped, replace=True)


def test_offline_a_redis_history_and_archives_restored_from_a_backup_are_refused(
    shared_data: Path,
    tmp_path: Path,
    redis_url: str,
    redis_prefix: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SR_HISTORY_KEY", KEY)
    monkeypatch.setenv("SR_HISTORY_PREFIX", redis_prefix)
    config = tiny_config(tmp_path)
    snaps = tiny_snapshots(tmp_path, 3)
    out = tmp_path / "archive"
    command = ["anonymize", "--config", str(config), "--out", str(out), "--history", redis_url]
    assert main([*command, str(snaps[0])]) == 0
    client = redis.Redis.from_url(redis_url)
    backup = _backup(client, redis_prefix, tmp_path, "backup")
    assert main([*command, str(snaps[1])]) == 0
    _restore(client, redis_prefix, tmp_path, "backup", backup)
    capsys.readouterr()
    assert main([*command, str(snaps[2])]) == 2
    error = capsys.readouterr().err
    assert "records releases 1..2 as published" in error
    assert "is at release 1" in error and "holds releases up to 1" in error
    assert NEW_SERIES_CAVEAT in error
    assert not (out / "manifest-0002.json").exists()
    assert int(client.get(RedisKeys(redis_prefix).sequence) or 0) == 1  # nothing committed
    client.close()


def test_a_worker_does_not_cut_below_the_manifests_already_published(
    shared_data: Path,
    tmp_path: Path,
    redis_url: str,
    redis_prefix: str,
    release_kafka: KafkaSettings,
    make_runner: Callable[[ReleaseService], ServiceRunner],
    loop: asyncio.Runner,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    config = write_config(tmp_path, shared_data)
    settings = load_settings(
        config,
        history={"key": KEY, "prefix": redis_prefix},
        service={"retry_interval_s": 0.01},
        kafka=release_kafka.model_dump(),
    )
    snapshot = adult_snapshot(shared_data, tmp_path / "rows.csv", ROWS)
    archive = tmp_path / "archive"
    client = redis.Redis.from_url(redis_url)
    service = ReleaseService(settings, client, archive)
    runner = make_runner(service)
    stage_sealed(service, snapshot, "t01", 0)
    loop.run(runner.cut_and_send())
    first = _backup(client, redis_prefix, tmp_path, "after-1")
    stage_sealed(service, snapshot, "t02", 10_000)
    loop.run(runner.cut_and_send())
    assert service.store.last_sequence() == 2 and runner.publication_ok
    second = _backup(client, redis_prefix, tmp_path, "after-2")

    # Redis and both archives back to release 1: the ledger refuses the start
    _restore(client, redis_prefix, tmp_path, "after-1", first)
    with pytest.raises(SeriesRewound, match=r"records releases 1\.\.2 as published"):
        ReleaseService(settings, client, archive)

    # the ledger went back too (restored with them): the manifests topic still holds 2
    (tmp_path / "archive.ledger").unlink()
    service = ReleaseService(settings, client, archive)  # a new process: starts
    runner = make_runner(service)
    stage_sealed(service, snapshot, "t03", 20_000)
    caplog.clear()
    for _ in range(2):
        loop.run(runner.cut_and_send())
    assert service.store.last_sequence() == 1  # nothing cut as sequence 2 again
    assert not (archive / "manifest-0002.json").exists()
    problems = log_events(caplog, "store_regressed")
    assert len(problems) == 2  # one line per attempt
    for record in problems:
        assert (record.release, record.error) == ("t03", "StoreRegressed")
        assert "already holds the manifest of release 2" in record.detail
        assert "history store is at release 1" in record.detail
        assert record.fix == STORE_FIX and NEW_SERIES_CAVEAT in record.fix
    assert not log_events(caplog, "committed") and not log_events(caplog, "sent")
    assert metric_sample(runner, "sr_store_regressed") == 1
    status, body = loop.run(runner.health())
    assert (status, body["status"]) == (503, "degraded")
    assert body["store_error"]["release"] == "t03"
    statuses = [
        json.loads(m.value)
        for m in read_topic(release_kafka.bootstrap, release_kafka.topics.status)
    ]
    assert [(s["release"], s["status"]) for s in statuses] == [("t03", "held")]  # once
    assert "already holds the manifest of release 2" in statuses[0]["reason"]
    [ready] = service.staging.ready()
    assert ready.label == "t03"  # held, not refused

    # restored to release 2 (and the worker restarted): t03 is cut as release 3
    _restore(client, redis_prefix, tmp_path, "after-2", second)
    service = ReleaseService(settings, client, archive)
    runner = make_runner(service)
    stage_sealed(service, snapshot, "t03", 20_000)  # sent again: the backup predates it
    caplog.clear()
    loop.run(runner.cut_and_send())
    assert [r.sequence for r in log_events(caplog, "committed")] == [3]
    status, body = loop.run(runner.health())
    assert (status, body["store_error"]) == (200, None)
    report = audit_directory(archive)
    assert report.ok, report.table()
    client.close()
