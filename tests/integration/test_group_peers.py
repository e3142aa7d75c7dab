"""Two configurations in one consumer group (issue 12, item 8): the second worker is refused.

A worker runs and has published a release; a second worker with the same ``kafka.group_id``
but another ``privacy.l`` exits 2 with one line instead of taking part of the records. A worker
with the first one's configuration, started on the same group after it stopped, runs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import adult_snapshot, write_config
from test_worker import (
    Worker,
    _publish,
    _stop,
    _wait_for,
    set_publish_environment,
    worker_environment,
)

from stream_release.config import TopicSettings

pytestmark = pytest.mark.integration

EXIT_TIMEOUT_S = 60.0


def test_a_worker_with_another_configuration_in_the_group_is_refused(
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
    redis_url: str,
    redis_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    set_publish_environment(monkeypatch, kafka_bootstrap, kafka_topics)
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    config = write_config(first_dir, shared_data)
    other = write_config(second_dir, shared_data, l=3)
    env = worker_environment(
        kafka_bootstrap, redis_url, tmp_path / "archive", kafka_topics, redis_prefix
    )
    first = Worker(config, env, tmp_path / "first.log")
    second = Worker(other, env, tmp_path / "second.log")  # same group, topics, Redis
    first.start()
    try:
        _publish(config, adult_snapshot(shared_data, tmp_path / "r1.csv", 200))
        manifests = _wait_for(
            first, kafka_bootstrap, kafka_topics.manifests, lambda m: len(m) >= 1, "release 1"
        )
        assert json.loads(manifests[0].value)["sequence"] == 1
        second.start()
        assert second.proc is not None
        try:
            code = second.proc.wait(timeout=EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the second worker kept running:\n{second.tail()}")
        lines = second.log.read_text().splitlines()
        assert code == 2, lines
        [line] = lines
        assert "has a worker running with another configuration" in line
        first.check_alive()
        assert _stop(first) == 0

        # the first configuration again, on the same group: it runs
        again = Worker(config, env, tmp_path / "again.log")
        again.start()
        try:
            _publish(config, adult_snapshot(shared_data, tmp_path / "r2.csv", 200))
            _wait_for(
                again, kafka_bootstrap, kafka_topics.manifests, lambda m: len(m) >= 2, "release 2"
            )
        finally:
            again.kill()
    finally:
        first.kill()
        second.kill()
