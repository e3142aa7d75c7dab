"""A mechanism release the worker cannot make, on a real Redis and the session's broker (the
release service's core and its runner with the real release producer, no worker process).

* The operator's configuration (``ConfigError``: reconstruction-private-rr's series parameters
  changed mid-series): the release is not refused; it stays staged and ready, each attempt logs
  one ``config_error`` line naming the release and the fix, ``/health`` is degraded with the
  problem while releases committed before it are still sent, and once the worker runs the
  series' configuration again the release is cut as the next sequence.
* The snapshot's data (``SchemaError``: a sensitive value outside the configured domain): the
  release is refused (``release_refused``), its records are late, and the series continues.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from support.data import adult_snapshot
from support.kafka_topics import read_topic
from support.mechanisms import kind_config
from support.service_runs import log_events, metric_sample, record_messages, stage_sealed

from stream_release.audit import audit_directory
from stream_release.config import KafkaSettings, Settings, load_settings
from stream_release.errors import NEW_SERIES_CAVEAT
from stream_release.stream.intake import Incoming
from stream_release.stream.notices import CONFIG_FIX
from stream_release.stream.runner import ServiceRunner
from stream_release.stream.service import ReleaseService

pytestmark = pytest.mark.integration

KIND = "reconstruction-private-rr"
KEY = "mechanism-fault-test-key-0123456789"
ROWS = 400


def _settings(
    directory: Path, data: Path, prefix: str, kafka: KafkaSettings, p: float = 0.5
) -> Settings:
    directory.mkdir(exist_ok=True)
    config = kind_config(directory, data, KIND)
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("p = 0.5\n", f"p = {p}\n"), encoding="utf-8")
    return load_settings(
        config,
        history={"key": KEY, "prefix": prefix},
        service={"retry_interval_s": 0.01},
        kafka=kafka.model_dump(),
    )


@pytest.fixture
def snapshot(shared_data: Path, tmp_path: Path) -> Path:
    """The first :data:`ROWS` rows of Adult."""
    return adult_snapshot(shared_data, tmp_path / "rows.csv", ROWS)


def test_a_configuration_the_series_cannot_continue_holds_the_release_and_is_reported(
    snapshot: Path,
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
    archive = tmp_path / "archive"
    client = redis.Redis.from_url(redis_url)
    series = _settings(tmp_path / "series", shared_data, redis_prefix, release_kafka)
    first = ReleaseService(series, client, archive)
    stage_sealed(first, snapshot, "t01", 0)
    [manifest] = first.cut_ready()
    assert (manifest["sequence"], manifest["mechanism"]["p"]) == (1, 0.5)

    # the worker restarted with another p: release 1 is still sent, t02 is held, not refused
    changed = ReleaseService(
        _settings(tmp_path / "changed", shared_data, redis_prefix, release_kafka, 0.6),
        client,
        archive,
    )
    stage_sealed(changed, snapshot, "t02", 10_000)
    runner = make_runner(changed)
    caplog.clear()
    for _ in range(3):  # the first publication, then two periodic retries
        loop.run(runner.cut_and_send())
    assert runner.publication_ok
    assert changed.staging.published() == 1
    manifests = read_topic(release_kafka.bootstrap, release_kafka.topics.manifests)
    assert [m.value for m in manifests] == [changed.outgoing(1)[-1].value]
    assert changed.store.last_sequence() == 1
    [ready] = changed.staging.ready()
    assert (ready.label, ready.staged, ready.committed) == ("t02", ROWS, None)
    assert not log_events(caplog, "release_refused") and not log_events(
        caplog, "publication_failed"
    )
    problems = log_events(caplog, "config_error")
    assert len(problems) == 3  # one line per attempt
    for record in problems:
        assert record.levelno == logging.ERROR
        assert (record.release, record.rows, record.error) == ("t02", ROWS, "ConfigError")
        assert "differ from those this series started with" in record.detail
        assert record.fix == CONFIG_FIX and "restart the worker" in record.getMessage()
        assert "'t02'" in record.getMessage()
    assert metric_sample(runner, "sr_config_error") == 1
    assert metric_sample(runner, "sr_releases_refused_total") == 0  # held, not refused
    status, body = loop.run(runner.health())
    assert (status, body["status"], body["publication_ok"]) == (503, "degraded", True)
    assert body["config_error"]["release"] == "t02"
    assert "to change them, start a new history" in body["config_error"]["error"]
    assert NEW_SERIES_CAVEAT in body["config_error"]["error"]

    # the series' configuration again: t02 is cut as release 2, the problem is gone
    fixed = ReleaseService(
        _settings(tmp_path / "fixed", shared_data, redis_prefix, release_kafka), client, archive
    )
    runner = make_runner(fixed)
    caplog.clear()
    loop.run(runner.cut_and_send())
    assert [r.sequence for r in log_events(caplog, "committed")] == [2]
    assert fixed.config_problem is None and fixed.staging.published() == 2
    assert metric_sample(runner, "sr_config_error") == 0
    status, body = loop.run(runner.health())
    assert (status, body["status"], body["config_error"]) == (200, "ok", None)
    report = audit_directory(archive)
    assert report.ok, report.table()
    client.close()


def test_a_value_outside_the_domain_refuses_the_release_and_the_series_goes_on(
    snapshot: Path,
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
    settings = _settings(tmp_path, shared_data, redis_prefix, release_kafka)
    client = redis.Redis.from_url(redis_url)
    service = ReleaseService(settings, client, tmp_path / "archive")
    messages = record_messages(snapshot, "t01", settings.schema.qid, 0)
    outside = json.loads(messages[7].value)
    outside["sensitive"] = "Astronaut"  # not in the occupation hierarchy's leaves
    messages[7] = messages[7]._replace(value=json.dumps(outside).encode())
    assert service.accept_records(messages).rejected == []
    seal = json.dumps({"release": "t01", "records": ROWS}).encode()
    assert service.accept_seal(Incoming("sr.control", 0, 1, None, seal)) is None
    runner = make_runner(service)
    loop.run(runner.cut_and_send())
    assert service.refused == ["t01"] and service.store.last_sequence() == 0
    assert metric_sample(runner, "sr_releases_refused_total") == 1
    assert metric_sample(runner, "sr_config_error") == 0
    [refused] = log_events(caplog, "release_refused")
    assert (refused.release, refused.error) == ("t01", "SchemaError")
    assert "Astronaut" not in refused.getMessage()  # a value is never logged
    assert service.config_problem is None and service.store.last_sequence() == 0
    [late] = service.accept_records(messages[:1]).rejected
    assert late.error.startswith("late:")

    stage_sealed(service, snapshot, "t02", 10_000)
    [manifest] = service.cut_ready()
    assert (manifest["release"], manifest["sequence"]) == ("t02", 1)
    assert audit_directory(tmp_path / "archive").ok
    client.close()
