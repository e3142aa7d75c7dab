"""What becomes of a sealed release, told to its producer and to ``/health`` (issue 12, items 4
and 6), on the session's Apache Kafka and Redis.

One worker; three snapshots sent with ``stream-release publish --wait``:

- a publishable one: exit 0, the sequence printed;
- one whose protected value is held by every row (infeasible at l = 2): the worker refuses it,
  sends a status message with the reason (``sr.status``), logs the reason itself; ``publish``
  exits 1 with it, and ``/health`` is 503 naming the refused release, after a restart too;
- one with a record whose QID value is outside its hierarchy: the record is rejected, so the
  seal can never complete: a ``blocked`` status, ``publish`` exits 1, ``/health`` 503 names it.

Without a worker, ``publish --wait`` gives up after ``--timeout`` with exit 1.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest
from support.data import adult_snapshot, write_config
from support.http import health_until
from support.kafka_topics import read_topic
from support.schemas import schema_errors
from support.worker import MakeWorker, metrics_environment, set_publish_environment

from stream_release.cli.main import main
from stream_release.config import TopicSettings
from stream_release.devtools.datasets import ADULT_SENSITIVE
from stream_release.devtools.local_services import free_port
from stream_release.stream.messages import ReleaseNotice

pytestmark = pytest.mark.integration

ROWS = 300
WAIT_S = "60"


def _rewrite(source: Path, target: Path, change: dict[int, dict[str, str]]) -> Path:
    """``source`` with the cells of ``change`` (row index -> column -> value) replaced; ``-1``
    changes every row."""
    with source.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter=";"))
    for index, row in enumerate(rows):
        row.update(change.get(-1, {}))
        row.update(change.get(index, {}))
    with target.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), delimiter=";")
        writer.writeheader()
        writer.writerows(rows)
    return target


def _publish_wait(
    capsys: pytest.CaptureFixture[str], config: Path, snap: Path, timeout: str = WAIT_S
) -> tuple[int, str, str]:
    capsys.readouterr()
    argv = ["publish", "--config", str(config), "--release", snap.stem, str(snap)]
    code = main([*argv, "--wait", "--timeout", timeout])
    out, err = capsys.readouterr()
    return code, out, err


def test_publish_wait_reports_published_refused_and_blocked_releases(
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
    make_worker: MakeWorker,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = write_config(tmp_path, shared_data)
    good = adult_snapshot(shared_data, tmp_path / "r1.csv", ROWS)
    infeasible = _rewrite(good, tmp_path / "r2.csv", {-1: {ADULT_SENSITIVE: "Sales"}})
    blocked = _rewrite(good, tmp_path / "r3.csv", {7: {"age": "not-an-age"}})
    port = free_port()
    worker = make_worker(config, extra=metrics_environment(port))
    health = f"http://127.0.0.1:{port}/health"
    worker.start()
    try:
        code, out, err = _publish_wait(capsys, config, good)
        assert (code, err) == (0, "")
        assert "published as sequence 1" in out

        code, out, err = _publish_wait(capsys, config, infeasible)
        assert code == 1, err
        [line] = err.strip().splitlines()
        assert "release r2 refused: infeasible: protected value 'Sales'" in line
        assert "largest feasible setting" in line and "new label" in line
        body = health_until(worker, health, "release 'r2' refused")
        assert body["refused"]["error"] == "GuaranteeUnsatisfiable"  # type: ignore[index]
        worker.kill()  # a restart does not forget the refusal (no release after it yet)
        worker = make_worker(config, extra=metrics_environment(port))
        worker.start()
        body = health_until(worker, health, "release 'r2' refused")
        assert body["refused"]["release"] == "r2"  # type: ignore[index]

        code, out, err = _publish_wait(capsys, config, blocked)
        assert code == 1, err
        [line] = err.strip().splitlines()
        assert f"release r3 blocked: sealed with {ROWS} ids, {ROWS - 1} staged and 1" in line
        body = health_until(worker, health, "release 'r3' blocked")
        assert body["blocked"][0]["rejected"] == 1  # type: ignore[index]
    finally:
        worker.kill()

    status_messages = read_topic(kafka_bootstrap, kafka_topics.status)
    assert schema_errors("status", [m.value for m in status_messages]) == []
    notices = [ReleaseNotice.model_validate_json(m.value) for m in status_messages]
    assert [(n.release, n.status) for n in notices] == [("r2", "refused"), ("r3", "blocked")]
    assert "not-an-age" not in json.dumps([n.model_dump() for n in notices])
    log = [json.loads(line) for line in worker.log.read_text().splitlines() if line.startswith("{")]
    [refused] = [entry for entry in log if entry.get("event") == "release_refused"]
    assert refused["detail"].startswith("infeasible: protected value 'Sales'")
    assert any(entry.get("event") == "release_blocked" for entry in log)


def test_publish_wait_without_a_worker_times_out(
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    set_publish_environment(monkeypatch, kafka_bootstrap, kafka_topics)
    config = write_config(tmp_path, shared_data)
    snap = adult_snapshot(shared_data, tmp_path / "r1.csv", 50)
    started = time.monotonic()
    code, _, err = _publish_wait(capsys, config, snap, timeout="2")
    assert code == 1
    assert "release r1 timeout: no manifest or status for release 'r1' within 2 s" in err
    assert time.monotonic() - started < 30
