"""``stream-release worker`` end to end: a subprocess on the test broker and Redis
(docs/contract.md §5).

Snapshots sent with ``stream-release publish`` come out of the worker as releases equal, byte for
byte, to offline ``anonymize`` on the same snapshots with the same key; the archive passes the
audit; bad records go to ``sr.rejected`` with their reason (ids and keys as their keyed
pseudonyms); SIGTERM stops the worker; a worker killed with SIGKILL and started again publishes
every release exactly once by sequence.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from support.kafka_topics import read_topic
from support.schemas import schema_errors
from support.worker import (
    ID_PATTERN,
    KEY,
    Worker,
    manifest_sequences,
    offline_releases,
    publish_series,
    publish_with_cli,
    send_messages,
    wait_for,
)

from stream_release.audit import audit_directory
from stream_release.config import TopicSettings
from stream_release.devtools.datasets import ADULT_QID
from stream_release.history.pseudonym import Pseudonymizer

pytestmark = pytest.mark.integration


def test_worker_publishes_the_offline_releases_and_rejects_bad_records(
    adult_worker: tuple[Path, list[Path], Worker],
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
) -> None:
    config, snaps, worker = adult_worker
    offline = offline_releases(config, snaps, tmp_path / "offline")
    manifests = publish_series(worker, config, snaps, kafka_bootstrap, kafka_topics)
    assert manifest_sequences(manifests) == [1, 2]
    assert [m.key for m in manifests] == [s.stem.encode() for s in snaps]
    groups = read_topic(kafka_bootstrap, kafka_topics.releases)
    by_release = [[g.value for g in groups if g.key == s.stem.encode()] for s in snaps]
    assert by_release == offline
    assert len(groups) == sum(len(lines) for lines in offline)
    assert audit_directory(tmp_path / "archive").ok

    # a malformed record and a second, different row for an id already staged
    row = {"release": "t03", "id": "p-1", "qid": _qid(snaps[0]), "sensitive": "Sales"}
    other = {**row, "sensitive": "Tech-support"}
    asyncio.run(
        send_messages(
            kafka_bootstrap,
            kafka_topics.records,
            [
                (b"bad-key", b"not json"),
                (b"p-1", json.dumps(row).encode()),
                (b"p-1", json.dumps(other).encode()),
            ],
        )
    )
    rejected = wait_for(
        worker, kafka_bootstrap, kafka_topics.rejected, lambda m: len(m) >= 2, "two rejections"
    )
    # service.rejected_raw = "redact" (default): keys and ids as their keyed pseudonyms
    pseudonym = Pseudonymizer(KEY.encode()).keyed_digest
    assert [m.key for m in rejected] == [
        f"pseudonym:{pseudonym(key).hex()}".encode() for key in (b"bad-key", b"p-1")
    ]
    assert schema_errors("rejected", [m.value for m in rejected]) == []
    assert schema_errors("manifest", [m.value for m in manifests]) == []
    values = [json.loads(m.value) for m in rejected]
    assert "not JSON" in values[0]["error"]
    assert json.loads(values[0]["raw"]) == {
        "redacted": True,
        "bytes": len(b"not json"),
        "pseudonym": pseudonym(b"not json").hex(),
    }
    assert values[1]["error"].startswith("duplicate id")
    assert values[1]["topic"] == kafka_topics.records
    assert json.loads(values[1]["raw"]) == {**other, "id": f"pseudonym:{pseudonym(b'p-1').hex()}"}
    assert not any(ID_PATTERN.search(m.value.decode()) for m in rejected)

    assert worker.stop() == 0
    log = worker.log.read_text(errors="replace")
    assert ID_PATTERN.search(log) is None, "the worker logged an id"
    # structured logs: every line a JSON object; our events carry their fields
    entries = [json.loads(line) for line in log.splitlines() if line.strip()]
    events = {entry.get("event") for entry in entries}
    assert {"committed", "sent", "rejected"} <= events
    committed = [entry for entry in entries if entry.get("event") == "committed"]
    assert [entry["sequence"] for entry in committed] == [1, 2]


def test_worker_killed_after_a_release_publishes_each_release_once(
    adult_worker: tuple[Path, list[Path], Worker],
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_topics: TopicSettings,
) -> None:
    config, snaps, worker = adult_worker
    offline = offline_releases(config, snaps, tmp_path / "offline")
    worker.start()
    publish_with_cli(config, snaps[0])
    wait_for(worker, kafka_bootstrap, kafka_topics.manifests, lambda m: len(m) >= 1, "release 1")
    worker.kill()

    worker.start()
    publish_with_cli(config, snaps[1])
    manifests = wait_for(
        worker,
        kafka_bootstrap,
        kafka_topics.manifests,
        lambda m: 2 in manifest_sequences(m),
        "release 2 after the restart",
    )
    by_sequence: dict[int, bytes] = {}
    for message in manifests:
        sequence = json.loads(message.value)["sequence"]
        assert by_sequence.setdefault(sequence, message.value) == message.value
    assert sorted(by_sequence) == [1, 2]
    groups = read_topic(kafka_bootstrap, kafka_topics.releases)
    for snap, lines in zip(snaps, offline, strict=True):
        sent = [g.value for g in groups if g.key == snap.stem.encode()]
        assert len(sent) % len(lines) == 0 and sent[: len(lines)] == lines
    assert audit_directory(tmp_path / "archive").ok
    assert worker.stop() == 0


def _qid(snap: Path) -> dict[str, str]:
    """The QIDs of the first row of ``snap`` (valid hierarchy leaves)."""
    header, first = snap.read_text().splitlines()[:2]
    row = dict(zip(header.split(";"), first.split(";"), strict=True))
    return {name: row[name] for name in ADULT_QID}
