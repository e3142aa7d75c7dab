"""``stream-release publish`` against a real Kafka-protocol broker (docs/contract.md §3, §5)."""

from __future__ import annotations

import asyncio
import csv
import json
import socket
import time
from pathlib import Path

import pytest
from aiokafka.partitioner import DefaultPartitioner
from support.data import adult_snapshot, write_config
from support.kafka_topics import read_topic

from stream_release.cli.main import main
from stream_release.config import KafkaSettings, TopicSettings
from stream_release.devtools.datasets import ADULT_QID, ADULT_SENSITIVE
from stream_release.stream.kafka import ensure_topics

pytestmark = pytest.mark.integration

ROWS = 200
UNREACHABLE_LIMIT_S = 10.0
"""An unreachable bootstrap must be reported within this many seconds."""


@pytest.fixture
def kafka_env(
    kafka_bootstrap: str, kafka_topics: TopicSettings, monkeypatch: pytest.MonkeyPatch
) -> TopicSettings:
    """Point ``load_settings`` at the test broker and this test's topics (env beats file)."""
    monkeypatch.setenv("SR_KAFKA_BOOTSTRAP", kafka_bootstrap)
    monkeypatch.setenv("SR_KAFKA_TOPICS", kafka_topics.model_dump_json())
    return kafka_topics


def _publish(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["publish", *args])
    captured = capsys.readouterr()
    return code, captured.out.strip(), captured.err.strip()


def test_publish_sends_every_row_then_the_seal(
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_env: TopicSettings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = write_config(tmp_path, shared_data)
    snapshot = adult_snapshot(shared_data, tmp_path / "snap.csv", ROWS)
    code, out, err = _publish(
        capsys, "--config", str(config), "--release", "2026-10", str(snapshot)
    )
    assert (code, err) == (0, "")

    with snapshot.open(encoding="utf-8", newline="") as fh:
        rows = {row["id"]: row for row in csv.DictReader(fh, delimiter=";")}
    assert len(rows) == ROWS
    # one summary line, naming the count and the topic, never an id
    assert len(out.splitlines()) == 1
    assert f"{ROWS} records" in out and kafka_env.records in out
    assert "p-" not in out

    records = read_topic(kafka_bootstrap, kafka_env.records)
    assert len(records) == ROWS
    seen = set()
    for message in records:
        key = message.key.decode("utf-8")
        value = json.loads(message.value)
        assert set(value) == {"release", "id", "qid", "sensitive"}
        assert value["release"] == "2026-10"
        assert value["id"] == key
        row = rows[key]
        assert value["qid"] == {name: row[name] for name in ADULT_QID}
        assert all(isinstance(v, str) for v in value["qid"].values())
        assert value["sensitive"] == row[ADULT_SENSITIVE]
        seen.add(key)
    assert seen == set(rows)

    seals = read_topic(kafka_bootstrap, kafka_env.control)
    assert len(seals) == 1
    assert seals[0].key == b"2026-10"
    assert json.loads(seals[0].value) == {"release": "2026-10", "records": ROWS}
    # the other topics are the worker's: publish writes nothing there
    assert read_topic(kafka_bootstrap, kafka_env.releases) == []


def test_duplicate_id_exits_2_and_sends_nothing(
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_env: TopicSettings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = write_config(tmp_path, shared_data)
    snapshot = adult_snapshot(shared_data, tmp_path / "snap.csv", 20)
    lines = snapshot.read_text(encoding="utf-8").splitlines()
    lines.append(lines[5])  # p-4 again, at line 22
    snapshot.write_text("\n".join(lines) + "\n", encoding="utf-8")

    code, out, err = _publish(capsys, "--config", str(config), "--release", "r1", str(snapshot))
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1
    assert "more than once" in err and "lines 6 and 22" in err, err
    assert read_topic(kafka_bootstrap, kafka_env.records) == []
    assert read_topic(kafka_bootstrap, kafka_env.control) == []


def test_failed_record_leaves_no_seal(
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_env: TopicSettings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A record the producer refuses (too large) ends the run before the seal is sent."""
    monkeypatch.setenv("SR_KAFKA_MAX_MESSAGE_BYTES", "1024")
    config = write_config(tmp_path, shared_data)
    snapshot = adult_snapshot(shared_data, tmp_path / "snap.csv", 20)
    lines = snapshot.read_text(encoding="utf-8").splitlines()
    header = lines[0].split(";")
    big = lines[10].split(";")
    big[header.index("native-country")] = "x" * 2000
    lines[10] = ";".join(big)
    snapshot.write_text("\n".join(lines) + "\n", encoding="utf-8")

    code, _, err = _publish(capsys, "--config", str(config), "--release", "r1", str(snapshot))
    assert code == 2
    assert len(err.splitlines()) == 1
    assert kafka_bootstrap in err and "max_message_bytes" in err, err
    assert "x" * 50 not in err  # the record's content is not echoed
    assert read_topic(kafka_bootstrap, kafka_env.control) == []


def test_unreachable_bootstrap_exits_2_quickly(
    shared_data: Path,
    tmp_path: Path,
    kafka_env: TopicSettings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{sock.getsockname()[1]}"  # nothing listens once it is closed
    monkeypatch.setenv("SR_KAFKA_BOOTSTRAP", address)
    config = write_config(tmp_path, shared_data)
    snapshot = adult_snapshot(shared_data, tmp_path / "snap.csv", 20)

    start = time.monotonic()
    code, out, err = _publish(capsys, "--config", str(config), "--release", "r1", str(snapshot))
    elapsed = time.monotonic() - start
    assert code == 2
    assert out == ""
    assert len(err.splitlines()) == 1
    assert address in err and "SR_KAFKA_BOOTSTRAP" in err, err
    assert elapsed < UNREACHABLE_LIMIT_S


def test_ensure_topics_creates_only_missing_topics(
    kafka_bootstrap: str, kafka_topics: TopicSettings
) -> None:
    settings = KafkaSettings(bootstrap=kafka_bootstrap, topics=kafka_topics)
    names = [kafka_topics.records, kafka_topics.control]
    assert asyncio.run(ensure_topics(settings, names)) == names
    assert asyncio.run(ensure_topics(settings, [*names, kafka_topics.rejected])) == [
        kafka_topics.rejected
    ]
    assert asyncio.run(ensure_topics(settings, names)) == []


def test_a_seal_counts_the_ids_sent_to_each_partition(
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_env: TopicSettings,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``kafka.partitions = 3``: the records topic is created with 3 partitions, every record
    goes to its key's partition (Kafka's default partitioner, the same in every release), and
    the seal gives the distinct ids each partition received."""
    monkeypatch.setenv("SR_KAFKA_PARTITIONS", "3")
    config = write_config(tmp_path, shared_data)
    snapshot = adult_snapshot(shared_data, tmp_path / "snap.csv", ROWS)
    code, _, err = _publish(capsys, "--config", str(config), "--release", "r1", str(snapshot))
    assert (code, err) == (0, "")

    records = read_topic(kafka_bootstrap, kafka_env.records)
    assert len(records) == ROWS
    received = [0, 0, 0]
    place = DefaultPartitioner()
    for message in records:
        received[message.partition] += 1
        assert message.partition == place(message.key, [0, 1, 2], [0, 1, 2])
    assert all(received), f"{ROWS} ids left a partition empty: {received}"
    (seal,) = read_topic(kafka_bootstrap, kafka_env.control)
    assert json.loads(seal.value) == {"release": "r1", "records": ROWS, "partitions": received}


def test_publish_refuses_a_records_topic_of_other_partitions(
    shared_data: Path,
    tmp_path: Path,
    kafka_bootstrap: str,
    kafka_env: TopicSettings,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The topic exists with 2 partitions, the configuration says 3: nothing is sent, and the
    message gives the fix (the shards are fixed for a series)."""
    settings = KafkaSettings(bootstrap=kafka_bootstrap, topics=kafka_env)
    asyncio.run(ensure_topics(settings, [kafka_env.records], partitions=2))
    monkeypatch.setenv("SR_KAFKA_PARTITIONS", "3")
    config = write_config(tmp_path, shared_data)
    snapshot = adult_snapshot(shared_data, tmp_path / "snap.csv", 20)
    code, out, err = _publish(capsys, "--config", str(config), "--release", "r1", str(snapshot))
    assert code == 2 and out == ""
    assert f"kafka.partitions = 3, but the topic {kafka_env.records!r} has 2 partitions" in err
    assert "SR_KAFKA_PARTITIONS=2" in err
    assert read_topic(kafka_bootstrap, kafka_env.records) == []
    assert read_topic(kafka_bootstrap, kafka_env.control) == []
