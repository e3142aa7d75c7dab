"""A running worker whose Redis comes back empty never writes over what was published
(issue 10, item 5), on a real Redis through the release service's runner (its releases sent
by the real release producer to the session's broker).

Redis restarted without persistence: the history, the sequence and the labels are gone, the
archive still holds releases 1 and 2. The next sealed release must not be cut as sequence 1
(which would overwrite ``release-0001.jsonl`` and restart every history): the cut stops, the
release stays staged, every attempt logs ``store_regressed``, ``/health`` is 503 with the
reason and ``sr_store_regressed`` is 1. Restored from its backup, the store cuts it as 3.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from support.data import adult_snapshot, write_config
from support.manifests import guarantee_manifest
from support.service_runs import log_events, metric_sample, stage_sealed

from stream_release.audit import audit_directory
from stream_release.config import KafkaSettings, load_settings
from stream_release.errors import ArchiveConflict
from stream_release.history.keys import RedisKeys
from stream_release.io.release_files import ReleaseFiles, ReleasePaths, stage_release
from stream_release.stream.notices import STORE_FIX
from stream_release.stream.runner import ServiceRunner
from stream_release.stream.service import ReleaseService

pytestmark = pytest.mark.integration

KEY = "store-regressed-test-key-0123456789abcdef"
ROWS = 300


def _digests(directory: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


def test_an_emptied_store_stops_the_cut_and_nothing_published_is_replaced(
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
    for k, label in enumerate(("t01", "t02")):
        stage_sealed(service, snapshot, label, k * 10_000)
        loop.run(runner.cut_and_send())
    assert service.store.last_sequence() == 2 and runner.publication_ok
    published = {d: _digests(d) for d in (archive, tmp_path / "archive.private")}

    # Redis loses everything (kept aside as its backup) while the worker runs
    keys = list(client.scan_iter(match=RedisKeys(redis_prefix).match))
    backup = {key: client.dump(key) for key in keys}
    client.delete(*keys)
    stage_sealed(service, snapshot, "t03", 20_000)
    caplog.clear()
    for _ in range(2):
        loop.run(runner.cut_and_send())
    assert service.store.last_sequence() == 0  # nothing was cut as sequence 1
    assert {d: _digests(d) for d in published} == published
    problems = log_events(caplog, "store_regressed")
    assert len(problems) == 2  # one line per attempt
    for record in problems:
        assert record.levelno == logging.ERROR
        assert (record.release, record.error) == ("t03", "StoreRegressed")
        assert "lost commits" in record.detail and record.fix == STORE_FIX
    assert not log_events(caplog, "release_refused") and not log_events(caplog, "committed")
    assert metric_sample(runner, "sr_store_regressed") == 1
    status, body = loop.run(runner.health())
    assert (status, body["status"]) == (503, "degraded")
    assert body["store_error"]["release"] == "t03"
    assert "restored from its backup" in body["store_error"]["error"]
    [ready] = service.staging.ready()
    assert ready.label == "t03"  # held, not refused

    # restored from the backup: t03 is cut as release 3, next to the untouched 1 and 2
    for key, dumped in backup.items():
        client.restore(key, 0, dumped, replace=True)
    caplog.clear()
    loop.run(runner.cut_and_send())
    assert [r.sequence for r in log_events(caplog, "committed")] == [3]
    assert metric_sample(runner, "sr_store_regressed") == 0
    status, body = loop.run(runner.health())
    assert (status, body["store_error"]) == (200, None)
    for directory, files in published.items():
        now = _digests(directory)
        assert {name: now[name] for name in files} == files
    report = audit_directory(archive)
    assert report.ok, report.table()
    client.close()


def test_a_published_file_is_never_replaced_by_other_content(tmp_path: Path) -> None:
    paths = ReleasePaths(tmp_path / "pub", 1, tmp_path / "priv")
    manifest = guarantee_manifest(1)
    first = ReleaseFiles(b'{"group": 0}\n', manifest, b"id,group\r\n", {"sequence": 1})
    stage_release(paths, first)
    for path in paths.all():
        path.with_name(path.name + ".tmp").rename(path)
    stage_release(paths, first)  # the same content again: allowed (a re-run after a crash)
    other = ReleaseFiles(b'{"group": 1}\n', manifest, b"id,group\r\n", {"sequence": 1})
    with pytest.raises(ArchiveConflict, match="never replaced"):
        stage_release(paths, other)
    assert paths.groups.read_bytes() == b'{"group": 0}\n'
