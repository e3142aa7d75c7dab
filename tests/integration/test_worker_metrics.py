"""The worker's ``/metrics`` and ``/health`` over HTTP, end to end (docs/contract.md §5).

A worker subprocess (as in ``test_worker.py``) with ``SR_SERVICE_METRICS_PORT`` on a free port
publishes one small snapshot; its metrics then count the staged records and the release, carry
its breach maximum and bound, and neither they nor the worker's log name an individual.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from helpers import adult_snapshot, write_config
from prometheus_client.parser import text_string_to_metric_families
from test_worker import (
    ID_PATTERN,
    Worker,
    _publish,
    _stop,
    _wait_for,
    set_publish_environment,
    worker_environment,
)

from stream_release.config import TopicSettings
from stream_release.devtools.local_services import free_port

pytestmark = pytest.mark.integration

ROWS = 120
"""Rows of the snapshot (ids ``p-0`` .. ``p-119``)."""
T = TypeVar("T")
HTTP_TIMEOUT_S = 20.0
"""Longest wait for the endpoint to answer and show the published release."""


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:  # 503: degraded, still a JSON body
        return exc.code, exc.read()


def _samples(text: str) -> dict[str, float]:
    """``name`` or ``name{k=v,...}`` -> value, for every sample of the exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def poll(worker: Worker, url: str, accept: Callable[[int, bytes], T | None], what: str) -> T:
    """GET ``url`` every 0.2 s (the worker alive) until ``accept(status, body)`` returns
    something, and return it; fails after :data:`HTTP_TIMEOUT_S` naming ``what``."""
    deadline = time.monotonic() + HTTP_TIMEOUT_S
    while True:
        worker.check_alive()
        try:
            status, body = _get(url)
        except OSError:
            status, body = 0, b""
        found = accept(status, body)
        if found is not None:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"{url} never {what}: {status} {body.decode()}\n{worker.tail()}")
        time.sleep(0.2)


def _scrape_until(
    worker: Worker, base: str, done: Callable[[dict[str, float]], bool]
) -> tuple[dict[str, float], str]:
    """The samples and text of ``base/metrics`` once ``done`` holds for the samples."""

    def accept(status: int, body: bytes) -> tuple[dict[str, float], str] | None:
        samples = _samples(body.decode()) if status == 200 else {}
        return (samples, body.decode()) if samples and done(samples) else None

    return poll(worker, f"{base}/metrics", accept, "showed the expected samples")


def test_worker_serves_metrics_and_health(
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_publish_environment(monkeypatch, kafka_bootstrap, kafka_topics)
    config = write_config(tmp_path, shared_data)
    snap = adult_snapshot(shared_data, tmp_path / "m01.csv", ROWS)
    port = free_port()
    env = worker_environment(
        kafka_bootstrap,
        redis_url,
        tmp_path / "archive",
        kafka_topics,
        redis_prefix,
        extra={"SR_SERVICE_METRICS_HOST": "127.0.0.1", "SR_SERVICE_METRICS_PORT": str(port)},
    )
    worker = Worker(config, env, tmp_path / "worker.log")
    worker.start()
    try:
        _publish(config, snap)
        manifests = _wait_for(
            worker, kafka_bootstrap, kafka_topics.manifests, lambda m: len(m) >= 1, "release 1"
        )
        manifest = json.loads(manifests[0].value)

        # the counter moves once the broker acknowledged the release: poll briefly
        base = f"http://127.0.0.1:{port}"
        samples, text = _scrape_until(
            worker, base, lambda s: s.get("sr_releases_published_total") == 1
        )

        assert samples["sr_release_sequence"] == 1
        assert samples["sr_records_staged_total"] == ROWS
        assert sum(v for k, v in samples.items() if k.startswith("sr_records_rejected_total")) == 0
        assert samples["sr_release_breach_bound"] == pytest.approx(manifest["breach"]["bound"])
        assert samples["sr_release_breach_max"] == pytest.approx(manifest["breach"]["max"])
        assert 0 < samples["sr_release_breach_max"] <= samples["sr_release_breach_bound"]
        assert samples["sr_release_suppressed_rows"] == manifest["suppressed"]
        assert samples["sr_publish_seconds_count"] == 1
        assert samples["sr_group_seconds_count"] == 1
        assert ID_PATTERN.search(text) is None, "/metrics names an individual"

        status, body = _get(f"{base}/health")
        assert status == 200
        assert json.loads(body) == {
            "status": "ok",
            "reasons": [],
            "redis": True,
            "kafka": True,
            "publication_ok": True,
            "published_sequence": 1,
            "config_error": None,
            "store_error": None,
            "refused": None,
            "blocked": [],
        }
        assert _stop(worker) == 0

        # restarted, the release gauges show the committed state, not 0 or nothing
        worker.start()
        restored, _ = _scrape_until(worker, base, lambda s: s.get("sr_release_sequence") == 1)
        for name in ("sr_release_breach_max", "sr_release_breach_bound"):
            assert restored[name] == samples[name]
        assert restored["sr_release_suppressed_rows"] == manifest["suppressed"]
        assert restored["sr_release_avg_group_size"] == samples["sr_release_avg_group_size"]
        assert _stop(worker) == 0
    finally:
        worker.kill()
    log = worker.log.read_text(errors="replace")
    assert ID_PATTERN.search(log) is None, "the worker logged an id"
