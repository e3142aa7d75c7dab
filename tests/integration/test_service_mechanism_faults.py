"""A mechanism release the worker cannot make, on a real Redis (the release service's core and
its runner, without a broker).

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
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
from helpers import adult_snapshot
from test_mechanisms import kind_config
from test_service_core import _messages
from worker_stubs import StubProducer, StubReleases

from stream_release.audit import audit_directory
from stream_release.config import Settings, load_settings
from stream_release.stream.app import ServiceRunner
from stream_release.stream.intake import Incoming
from stream_release.stream.notices import CONFIG_FIX
from stream_release.stream.service import ReleaseService

pytestmark = pytest.mark.integration

KIND = "reconstruction-private-rr"
KEY = "mechanism-fault-test-key-0123456789"
ROWS = 400


def _settings(directory: Path, data: Path, prefix: str, p: float = 0.5) -> Settings:
    directory.mkdir(exist_ok=True)
    config = kind_config(directory, data, KIND)
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace("p = 0.5\n", f"p = {p}\n"), encoding="utf-8")
    return load_settings(
        config, history={"key": KEY, "prefix": prefix}, service={"retry_interval_s": 0.01}
    )


def _stage(service: ReleaseService, snapshot: Path, label: str, offset: int) -> None:
    """Stage every row of ``snapshot`` as release ``label``, then its seal."""
    messages = _messages(snapshot, label, service.settings.schema.qid, offset)
    assert service.accept_records(messages).rejected == []
    seal = json.dumps({"release": label, "records": len(messages)}).encode()
    assert service.accept_seal(Incoming("sr.control", 0, offset, None, seal)) is None


def _runner(service: ReleaseService, bootstrap: str) -> tuple[ServiceRunner, StubProducer]:
    """A runner of ``service`` with a stand-in producer; ``/health`` probes the broker at
    ``bootstrap`` (the session's)."""
    producer = StubProducer()
    monitor = SimpleNamespace(tp_committed_offsets={}, tp_end_offsets={})
    app = SimpleNamespace(producer=producer, monitor=monitor)
    kafka = service.settings.kafka.model_copy(update={"bootstrap": bootstrap})
    settings = service.settings.model_copy(update={"kafka": kafka})
    runner = ServiceRunner(app, service, settings)  # type: ignore[arg-type]
    runner.releases = StubReleases(producer)  # type: ignore[assignment]
    return runner, producer


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


def test_a_configuration_the_series_cannot_continue_holds_the_release_and_is_reported(
    kafka_bootstrap: str,
    shared_data: Path,
    tmp_path: Path,
    redis_url: str,
    redis_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    snapshot = adult_snapshot(shared_data, tmp_path / "rows.csv", ROWS)
    archive = tmp_path / "archive"
    client = redis.Redis.from_url(redis_url)
    series = _settings(tmp_path / "series", shared_data, redis_prefix)
    first = ReleaseService(series, client, archive)
    _stage(first, snapshot, "t01", 0)
    [manifest] = first.cut_ready()
    assert (manifest["sequence"], manifest["mechanism"]["p"]) == (1, 0.5)

    # the worker restarted with another p: release 1 is still sent, t02 is held, not refused
    changed = ReleaseService(_settings(tmp_path / "changed", shared_data, redis_prefix, 0.6),
                             client, archive)  # fmt: skip
    _stage(changed, snapshot, "t02", 10_000)
    runner, producer = _runner(changed, kafka_bootstrap)
    caplog.clear()
    for _ in range(3):  # the first publication, then two periodic retries
        asyncio.run(runner.publish())
    assert runner.publication_ok
    assert changed.staging.published() == 1
    assert [value for topic, _, value in producer.sent if topic.endswith("manifests")] == [
        changed.outgoing(1)[-1].value
    ]
    assert changed.store.last_sequence() == 1
    [ready] = changed.staging.ready()
    assert (ready.label, ready.staged, ready.committed) == ("t02", ROWS, None)
    assert not _events(caplog, "release_refused") and not _events(caplog, "publication_failed")
    problems = _events(caplog, "config_error")
    assert len(problems) == 3  # one line per attempt
    for record in problems:
        assert record.levelno == logging.ERROR
        assert (record.release, record.rows, record.error) == ("t02", ROWS, "ConfigError")
        assert "differ from those this series started with" in record.detail
        assert record.fix == CONFIG_FIX and "restart the worker" in record.getMessage()
        assert "'t02'" in record.getMessage()
    assert _sample(runner, "sr_config_error") == 1
    assert _sample(runner, "sr_releases_refused_total") == 0  # held, not refused
    status, body = asyncio.run(runner.health())
    assert (status, body["status"], body["publication_ok"]) == (503, "degraded", True)
    assert body["config_error"]["release"] == "t02"
    assert "start a new history to change them" in body["config_error"]["error"]

    # the series' configuration again: t02 is cut as release 2, the problem is gone
    fixed = ReleaseService(_settings(tmp_path / "fixed", shared_data, redis_prefix), client,
                           archive)  # fmt: skip
    runner, _ = _runner(fixed, kafka_bootstrap)
    caplog.clear()
    asyncio.run(runner.publish())
    assert [r.sequence for r in _events(caplog, "committed")] == [2]
    assert fixed.config_problem is None and fixed.staging.published() == 2
    assert _sample(runner, "sr_config_error") == 0
    status, body = asyncio.run(runner.health())
    assert (status, body["status"], body["config_error"]) == (200, "ok", None)
    report = audit_directory(archive)
    assert report.ok, report.table()
    client.close()


def test_a_value_outside_the_domain_refuses_the_release_and_the_series_goes_on(
    kafka_bootstrap: str,
    shared_data: Path,
    tmp_path: Path,
    redis_url: str,
    redis_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    snapshot = adult_snapshot(shared_data, tmp_path / "rows.csv", ROWS)
    settings = _settings(tmp_path, shared_data, redis_prefix)
    client = redis.Redis.from_url(redis_url)
    service = ReleaseService(settings, client, tmp_path / "archive")
    messages = _messages(snapshot, "t01", settings.schema.qid, 0)
    outside = json.loads(messages[7].value)
    outside["sensitive"] = "Astronaut"  # not in the occupation hierarchy's leaves
    messages[7] = messages[7]._replace(value=json.dumps(outside).encode())
    assert service.accept_records(messages).rejected == []
    seal = json.dumps({"release": "t01", "records": ROWS}).encode()
    assert service.accept_seal(Incoming("sr.control", 0, 1, None, seal)) is None
    runner, _ = _runner(service, kafka_bootstrap)
    asyncio.run(runner.publish())
    assert service.refused == ["t01"] and service.store.last_sequence() == 0
    assert _sample(runner, "sr_releases_refused_total") == 1
    assert _sample(runner, "sr_config_error") == 0
    [refused] = _events(caplog, "release_refused")
    assert (refused.release, refused.error) == ("t01", "SchemaError")
    assert "Astronaut" not in refused.getMessage()  # a value is never logged
    assert service.config_problem is None and service.store.last_sequence() == 0
    [late] = service.accept_records(messages[:1]).rejected
    assert late.error.startswith("late:")

    _stage(service, snapshot, "t02", 10_000)
    [manifest] = service.cut_ready()
    assert (manifest["release"], manifest["sequence"]) == ("t02", 1)
    assert audit_directory(tmp_path / "archive").ok
    client.close()


def _sample(runner: ServiceRunner, name: str) -> float:
    """The value of the unlabelled metric sample ``name`` in the runner's registry."""
    value = runner.metrics.registry.get_sample_value(name)
    assert value is not None, f"no sample {name}"
    return value
