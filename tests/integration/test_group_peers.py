"""Two configurations in one consumer group (issue 12, item 8): the second worker is refused.

A worker runs and has published a release; a second worker with the same ``kafka.group_id``
but another ``privacy.l`` exits 2 with one line instead of taking part of the records. A worker
with the first one's configuration, started on the same group after it stopped, runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.data import adult_snapshot, write_config
from support.worker import MakeWorker, publish_with_cli, wait_for

from stream_release.config import TopicSettings

pytestmark = pytest.mark.integration

EXIT_TIMEOUT_S = 60.0


def test_a_worker_with_another_configuration_in_the_group_is_refused(
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
    make_worker: MakeWorker,
) -> None:
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    config = write_config(first_dir, shared_data)
    other = write_config(second_dir, shared_data, l=3)
    first = make_worker(config, log="first.log")
    second = make_worker(other, log="second.log")  # same group, topics, Redis
    first.start()
    publish_with_cli(config, adult_snapshot(shared_data, tmp_path / "r1.csv", 200))
    manifests = wait_for(
        first, kafka_bootstrap, kafka_topics.manifests, lambda m: len(m) >= 1, "release 1"
    )
    assert json.loads(manifests[0].value)["sequence"] == 1
    second.start()
    code = second.exit_code(EXIT_TIMEOUT_S, "the second worker")
    lines = second.log.read_text().splitlines()
    assert code == 2, lines
    [line] = lines
    assert "has a worker running with another configuration" in line
    first.check_alive()
    assert first.stop() == 0

    # the first configuration again, on the same group: it runs (every worker is killed at
    # the end by the fixture)
    again = make_worker(config, log="again.log")
    again.start()
    publish_with_cli(config, adult_snapshot(shared_data, tmp_path / "r2.csv", 200))
    wait_for(again, kafka_bootstrap, kafka_topics.manifests, lambda m: len(m) >= 2, "release 2")
