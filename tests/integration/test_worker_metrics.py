"""The worker's ``/metrics`` and ``/health`` over HTTP, end to end (docs/contract.md §5).

A worker subprocess (:class:`support.worker.Worker`) with ``SR_SERVICE_METRICS_PORT`` on a free
port publishes one small snapshot; its metrics then count the staged records and the release,
carry its breach maximum and bound, and neither they nor the worker's log name an individual.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from support.data import adult_snapshot, write_config
from support.http import http_get, metric_samples, poll
from support.worker import (
    ID_PATTERN,
    MakeWorker,
    Worker,
    metrics_environment,
    publish_with_cli,
    wait_for,
)

from stream_release.config import TopicSettings
from stream_release.devtools.local_services import free_port

pytestmark = pytest.mark.integration

ROWS = 120
"""Rows of the snapshot (ids ``p-0`` .. ``p-119``)."""


def _scrape_until(
    worker: Worker, base: str, done: Callable[[dict[str, float]], bool]
) -> tuple[dict[str, float], str]:
    """The samples and text of ``base/metrics`` once ``done`` holds for the samples."""

    def accept(status: int, body: bytes) -> tuple[dict[str, float], str] | None:
        samples = metric_samples(body.decode()) if status == 200 else {}
        return (samples, body.decode()) if samples and done(samples) else None

    return poll(worker, f"{base}/metrics", accept, "showed the expected samples")


def test_worker_serves_metrics_and_health(
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
    make_worker: MakeWorker,
) -> None:
    config = write_config(tmp_path, shared_data)
    snap = adult_snapshot(shared_data, tmp_path / "m01.csv", ROWS)
    port = free_port()
    worker = make_worker(config, extra=metrics_environment(port))
    worker.start()
    try:
        publish_with_cli(config, snap)
        manifests = wait_for(
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

        status, body = http_get(f"{base}/health")
        assert status == 200
        assert json.loads(body) == {
            "status": "ok",
            "reasons": [],
            "ready": True,
            "unready_reasons": [],
            "notes": [],
            "horizon": manifest["strategy"]["horizon"],
            "past_horizon": False,
            "redis": True,
            "kafka": True,
            "publication_ok": True,
            "published_sequence": 1,
            "config_error": None,
            "store_error": None,
            "refused": None,
            "blocked": [],
        }
        assert worker.stop() == 0

        # restarted, the release gauges show the committed state, not 0 or nothing
        worker.start()
        restored, _ = _scrape_until(worker, base, lambda s: s.get("sr_release_sequence") == 1)
        for name in ("sr_release_breach_max", "sr_release_breach_bound"):
            assert restored[name] == samples[name]
        assert restored["sr_release_suppressed_rows"] == manifest["suppressed"]
        assert restored["sr_release_avg_group_size"] == samples["sr_release_avg_group_size"]
        assert worker.stop() == 0
    finally:
        worker.kill()
    log = worker.log.read_text(errors="replace")
    assert ID_PATTERN.search(log) is None, "the worker logged an id"
