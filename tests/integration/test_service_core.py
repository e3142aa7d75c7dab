"""The release service's core on a real Redis: staging, the cut, commit, re-sending.

The releases the service cuts from streamed records equal what offline ``anonymize`` publishes
from the same snapshots (same key, same settings), and its archive passes the audit.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import redis
from support.data import adult_series, adult_snapshot, write_config
from support.service_runs import record_messages

from stream_release.audit import audit_directory
from stream_release.config import load_settings
from stream_release.pipeline.anonymize import anonymize_files
from stream_release.stream.intake import Incoming
from stream_release.stream.messages import ReleaseNotice
from stream_release.stream.service import ReleaseService

pytestmark = pytest.mark.integration
KEY = "service-test-key-0123456789abcdef"


@pytest.fixture
def setup(shared_data: Path, tmp_path: Path, redis_url: str, redis_prefix: str):  # type: ignore[no-untyped-def]
    config = write_config(tmp_path, shared_data)
    settings = load_settings(config, history={"key": KEY, "prefix": redis_prefix})
    snaps = adult_series(shared_data, tmp_path, 20, rounds=2)
    service = ReleaseService(settings, redis.Redis.from_url(redis_url), tmp_path / "archive")
    return settings, snaps, service


def test_streamed_releases_equal_offline_ones(setup, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    settings, snaps, service = setup
    rng = np.random.default_rng(0)
    sent: dict[int, list[bytes]] = {}
    for k, snap in enumerate(snaps, start=1):
        messages = record_messages(snap, snap.stem, settings.schema.qid, 10_000 * k)
        order = rng.permutation(len(messages))  # arrival order must not matter
        shuffled = [messages[i] for i in order]
        assert service.accept_records(shuffled[: len(shuffled) // 2]) == ([], False)
        assert service.cut_ready() == []  # not sealed yet
        seal = {"release": snap.stem, "records": len(messages)}
        assert (
            service.accept_seal(Incoming("sr.control", 0, k, None, json.dumps(seal).encode()))
            is None
        )
        assert service.cut_ready() == []  # sealed but incomplete
        assert service.accept_records(shuffled[len(shuffled) // 2 :] + shuffled[::5]) == (
            [],
            True,
        )  # + re-deliveries; the release is complete
        [manifest] = service.cut_ready()
        assert manifest["sequence"] == k and manifest["release"] == snap.stem
        assert service.pending() == [k]
        out = service.outgoing(k)
        assert (
            len(out) == manifest["groups"] + 1 and out[-1].topic == settings.kafka.topics.manifests
        )
        # the same release is sent again after a crash before it is marked: same bytes
        assert [o.value for o in service.outgoing(k)] == [o.value for o in out]
        sent[k] = [o.value for o in out[:-1]]
        service.mark_published(k)
        assert service.pending() == []
    # the record of release 1 is deleted once release 2 is sent; the last one sent is kept
    keys, client = service.keys, service.client
    assert client.exists(keys.record(1)) == 0 and client.exists(keys.record(2)) == 1
    assert client.get(keys.records_from) == b"2"
    assert service.last_state()[0]["sequence"] == 2
    assert audit_directory(tmp_path / "archive").ok

    offline = tmp_path / "offline"
    anonymize_files(load_settings(tmp_path / "config.toml", history={"key": KEY}), offline, snaps)
    for k in (1, 2):
        assert (offline / f"release-{k:04d}.jsonl").read_bytes() == (
            tmp_path / "archive" / f"release-{k:04d}.jsonl"
        ).read_bytes()
        assert sent[k] == (offline / f"release-{k:04d}.jsonl").read_bytes().splitlines()


def test_bad_input_is_rejected_with_its_reason_and_coordinates(setup) -> None:  # type: ignore[no-untyped-def]
    settings, snaps, service = setup
    good = record_messages(snaps[0], "t01", settings.schema.qid, 0)[:3]
    bad_value = json.loads(good[0].value)
    bad_value["qid"]["education"] = "Bachelor"
    duplicate = json.loads(good[1].value)
    duplicate["sensitive"] = "Sales" if duplicate["sensitive"] != "Sales" else "Tech-support"
    batch = [
        *good,
        Incoming("sr.records", 3, 41, b"k", b"not json"),
        Incoming("sr.records", 3, 42, None, json.dumps(bad_value).encode()),
        Incoming("sr.records", 3, 43, None, json.dumps(duplicate).encode()),
    ]
    rejected = service.accept_records(batch).rejected
    assert [(r.partition, r.offset) for r in rejected] == [(3, 41), (3, 42), (3, 43)]
    assert "not JSON" in rejected[0].error
    assert "qid.education = 'Bachelor'" in rejected[1].error
    assert rejected[2].error.startswith("duplicate id")
    # service.rejected_raw = "redact" (default): the message without its id, the key hashed
    pseudonym = service.pseudonymizer.keyed_digest
    assert json.loads(rejected[0].raw) == {
        "redacted": True,
        "bytes": len(b"not json"),
        "pseudonym": pseudonym(b"not json").hex(),
    }
    assert [r.key for r in rejected] == [f"pseudonym:{pseudonym(b'k').hex()}".encode(), None, None]
    ident = duplicate["id"]
    assert json.loads(rejected[2].raw) == {
        **duplicate,
        "id": f"pseudonym:{pseudonym(ident.encode()).hex()}",
    }
    assert not any(ident in r.raw or ident in r.error for r in rejected)
    assert service.staging.status("t01").staged == 3
    # a conflicting seal, then late records after the cut
    assert (
        service.accept_seal(Incoming("sr.control", 0, 1, None, b'{"release": "t01", "records": 3}'))
        is None
    )
    conflict = service.accept_seal(
        Incoming("sr.control", 0, 2, None, b'{"release": "t01", "records": 4}')
    )
    assert conflict is not None and "seal conflict" in conflict.error
    # three rows cannot meet ratio 4.85: the release is refused, nothing committed, and it
    # does not stall the series: its records are late from now on
    assert service.cut_ready() == []
    assert service.store.last_sequence() == 0
    assert service.staging.status("t01").committed == 0 and service.staging.open_labels() == []
    [late] = service.accept_records(good[:1]).rejected
    assert late.error.startswith("late:")
    assert (
        service.accept_seal(Incoming("sr.control", 0, 3, None, b'{"release": "t01", "records": 3}'))
        is None
    )  # a seal for a cut release changes nothing
    # the next release is cut as usual, as sequence 1
    following = record_messages(snaps[1], "t02", settings.schema.qid, 100)
    assert service.accept_records(following).rejected == []
    seal = json.dumps({"release": "t02", "records": len(following)}).encode()
    assert service.accept_seal(Incoming("sr.control", 0, 4, None, seal)) is None
    [manifest] = service.cut_ready()
    assert (manifest["release"], manifest["sequence"]) == ("t02", 1)


def test_full_rejected_raw_sends_the_message_and_key_as_received(
    shared_data: Path, tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    settings = load_settings(
        write_config(tmp_path, shared_data),
        history={"key": KEY, "prefix": redis_prefix},
        service={"rejected_raw": "full"},
    )
    service = ReleaseService(settings, redis.Redis.from_url(redis_url), tmp_path / "archive")
    value = b'{"release": "t01", "id": "p-1"}'
    [rejected] = service.accept_records([Incoming("sr.records", 0, 5, b"p-1", value)]).rejected
    assert "qid is missing" in rejected.error
    assert (rejected.raw, rejected.key) == (value.decode(), b"p-1")


def test_protected_values_that_name_nothing_refuse_the_release_with_a_status(
    shared_data: Path, tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    """Issue 26, item 4: the worker checks the protected values as offline ``anonymize`` does
    and refuses the release with a status message (``sr.status``) naming the closest match;
    nothing is committed."""
    config = write_config(tmp_path, shared_data, protected=["adm-clerical", "Sales "])
    settings = load_settings(config, history={"key": KEY, "prefix": redis_prefix})
    service = ReleaseService(settings, redis.Redis.from_url(redis_url), tmp_path / "archive")
    snap = adult_snapshot(shared_data, tmp_path / "t01.csv", 300)
    messages = record_messages(snap, "t01", settings.schema.qid, 0)
    assert service.accept_records(messages).rejected == []
    seal = json.dumps({"release": "t01", "records": len(messages)}).encode()
    assert service.accept_seal(Incoming("sr.control", 0, 0, None, seal)) is None
    assert service.cut_ready() == []
    assert service.store.last_sequence() == 0 and service.refused == ["t01"]
    [raw] = service.staging.status_outbox()
    notice = ReleaseNotice.model_validate_json(raw)
    assert (notice.release, notice.status, notice.error) == (
        "t01",
        "refused",
        "GuaranteeUnsatisfiable",
    )
    assert notice.reason.startswith("release 't01': privacy.protected names values no row")
    assert "'adm-clerical' (closest: 'Adm-clerical'), 'Sales ' (closest: 'Sales')" in notice.reason
    assert not (tmp_path / "archive").exists() or not any((tmp_path / "archive").iterdir())
