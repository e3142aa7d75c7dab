"""Staging in a real Redis: idempotent, duplicate ids and late rows refused, cut exactly once."""

from __future__ import annotations

import numpy as np
import pytest
import redis

from stream_release.config import SchemaSettings, Settings
from stream_release.core.privacy.linkage import HistoryRows
from stream_release.history.keys import RedisKeys
from stream_release.history.redis_store import RedisHistoryStore
from stream_release.stream.intake import RecordValidator
from stream_release.stream.messages import SnapshotRecord
from stream_release.stream.staging import RedisStaging, SealOutcome, StageOutcome

pytestmark = pytest.mark.integration

SCHEMA = SchemaSettings(id="id", sensitive="disease", qid=("sex", "age"))
VALIDATOR = RecordValidator(Settings(schema=SCHEMA), {})


@pytest.fixture
def staging(redis_url: str, redis_prefix: str) -> RedisStaging:
    return RedisStaging(redis.Redis.from_url(redis_url), RedisKeys(redis_prefix), SCHEMA)


def _row(sex: str, age: int, disease: str) -> bytes:
    record = SnapshotRecord(release="r", id="x", qid={"sex": sex, "age": age}, sensitive=disease)
    row = VALIDATOR.staged_row(record)
    assert isinstance(row, bytes)
    return row


P = [bytes([i]) * 16 for i in range(1, 6)]


def test_rows_are_staged_idempotently(staging: RedisStaging) -> None:
    rows = [_row("M", 30 + i, "flu") for i in range(3)]
    assert staging.stage("2026-10", P[:3], rows) == ([StageOutcome.STAGED] * 3, False)
    # re-delivery of the same rows changes nothing
    assert staging.stage("2026-10", P[:3], rows).outcomes == [StageOutcome.REDELIVERED] * 3
    # the same id with other content is a duplicate id in the snapshot
    assert staging.stage("2026-10", [P[0]], [_row("F", 30, "flu")]).outcomes == [
        StageOutcome.DUPLICATE_ID
    ]
    assert staging.status("2026-10").staged == 3
    # "34" and 34 stage the same bytes
    same = SnapshotRecord(release="r", id="x", qid={"sex": "M", "age": "30"}, sensitive="flu")
    assert staging.stage("2026-10", [P[0]], [VALIDATOR.staged_row(same)]).outcomes == [
        StageOutcome.REDELIVERED
    ]


def test_a_pseudonym_ending_in_nul_is_staged_and_read_back_whole(staging: RedisStaging) -> None:
    nul = b"\x07" * 15 + b"\x00"
    staging.stage("n", [nul, P[0]], [_row("M", 1, "x"), _row("F", 2, "y")])
    pseudonyms, snapshot = staging.load("n")
    assert [pseudonyms[i : i + 1].tobytes() for i in range(2)] == sorted([nul, P[0]])
    assert sorted(snapshot.ids.tolist()) == sorted([nul.hex(), P[0].hex()])


def test_a_release_is_ready_only_when_sealed_and_complete(staging: RedisStaging) -> None:
    assert staging.seal("a", 3) is SealOutcome.SEALED
    assert staging.seal("a", 3) is SealOutcome.REDELIVERED
    assert staging.seal("a", 4) is SealOutcome.CONFLICT
    assert not staging.stage("a", P[:2], [_row("M", 1, "x"), _row("M", 2, "y")]).complete
    assert not staging.status("a").ready and staging.ready() == []
    assert staging.stage("a", [P[2]], [_row("M", 3, "z")]).complete
    assert staging.status("a").ready
    assert [s.label for s in staging.ready()] == ["a"]
    # complete: a fourth id is refused, re-deliveries still accepted
    assert staging.stage("a", [P[3], P[0]], [_row("F", 9, "q"), _row("M", 1, "x")]) == (
        [StageOutcome.OVER_SEAL, StageOutcome.REDELIVERED],
        True,
    )


def test_the_cut_reads_what_was_staged_in_a_canonical_order(staging: RedisStaging) -> None:
    rows = {P[4]: _row("F", 40, "cold"), P[1]: _row("M", 20, "flu"), P[2]: _row("M", 25, "x")}
    staging.stage("b", list(rows), list(rows.values()))
    pseudonyms, snapshot = staging.load("b")
    assert pseudonyms.tolist() == sorted(rows)
    assert snapshot.ids.tolist() == [p.hex() for p in sorted(rows)]
    assert snapshot.qid["age"].tolist() == ["20", "25", "40"]
    assert snapshot.sensitive.tolist() == ["flu", "x", "cold"]


def test_the_cut_reads_the_same_rows_from_its_copy_as_from_redis(
    redis_url: str, redis_prefix: str
) -> None:
    """The staging process's own copy (complete: it staged every row) and a fresh process
    (which must read Redis) load the same snapshot, byte for byte; a copy missing rows (some
    staged by another process) is not used."""
    rng = np.random.default_rng(7)
    client = redis.Redis.from_url(redis_url)
    keys = RedisKeys(redis_prefix)
    pseudonyms = [rng.bytes(15) + b"\x00" if i % 5 == 0 else rng.bytes(16) for i in range(600)]
    rows = [_row("MF"[i % 2], int(rng.integers(20, 25)), f"d{i % 3}") for i in range(600)]
    for label, stager in (("whole", RedisStaging(client, keys, SCHEMA)), ("split", None)):
        staging = stager or RedisStaging(client, keys, SCHEMA)
        other = RedisStaging(client, keys, SCHEMA)
        for start in range(0, 600, 150):
            # "split": a quarter of the rows is staged by another process
            by = other if stager is None and start == 300 else staging
            by.stage(label, pseudonyms[start : start + 150], rows[start : start + 150])
        # re-deliveries and refusals add nothing to the copy
        staging.stage(label, pseudonyms[:50], rows[:50])
        staging.stage(label, pseudonyms[:10], rows[10:20])
        from_copy = staging.load(label)
        from_redis = RedisStaging(client, keys, SCHEMA).load(label)
        assert from_copy[0].tobytes() == from_redis[0].tobytes()
        a, b = from_copy[1], from_redis[1]
        assert a.ids.tolist() == b.ids.tolist() and a.sha256 == b.sha256
        assert a.sensitive.tolist() == b.sensitive.tolist()
        assert all(a.qid[q].tolist() == b.qid[q].tolist() for q in SCHEMA.qid)
        assert sorted(a.ids.tolist()) == sorted(p.hex() for p in pseudonyms)


def test_the_cut_takes_its_copy_only_when_it_has_as_many_rows_as_redis(
    redis_url: str, redis_prefix: str
) -> None:
    """Swap one staged row in Redis behind the stager's back (HLEN unchanged): the stager's
    cut still reads its copy, a fresh process reads Redis. With one row more in Redis than in
    the copy, the stager reads Redis too."""
    client = redis.Redis.from_url(redis_url)
    keys = RedisKeys(redis_prefix)
    for label, extra in (("swap", False), ("more", True)):
        staging = RedisStaging(client, keys, SCHEMA)
        staging.stage(label, P[:3], [_row("M", 1, "x"), _row("F", 2, "y"), _row("M", 3, "z")])
        client.hset(keys.stage_rows(label), P[4], _row("F", 9, "w"))
        if not extra:
            client.hdel(keys.stage_rows(label), P[0])
        ids = {p.hex() for p in P[:3]} if not extra else {p.hex() for p in (*P[:3], P[4])}
        assert set(staging.load(label)[1].ids.tolist()) == ids
    assert set(RedisStaging(client, keys, SCHEMA).load("swap")[1].ids.tolist()) == {
        p.hex() for p in (P[1], P[2], P[4])
    }


def test_commit_with_a_label_cuts_the_release_exactly_once(
    staging: RedisStaging, redis_url: str, redis_prefix: str
) -> None:
    staging.stage("c", P[:2], [_row("M", 1, "x"), _row("F", 2, "y")])
    staging.seal("c", 2)
    store = RedisHistoryStore(redis.Redis.from_url(redis_url), redis_prefix)
    pseudonyms, _ = staging.load("c")
    history = HistoryRows(
        np.array([0, 1, 2]),
        np.array([0, 0], np.int32),
        np.array([-0.5, -0.5]),
        np.array([1, 1], np.int32),
    )
    store.commit(1, pseudonyms, history, ("x",), b"record", label="c")
    assert staging.committed("c") == 1
    status = staging.status("c")
    assert status.staged == 0 and status.sealed is None and not status.ready
    assert staging.open_labels() == []
    # afterwards rows and seals for "c" are late / no-ops
    assert staging.stage("c", [P[3]], [_row("M", 3, "z")]).outcomes == [StageOutcome.LATE]
    assert staging.seal("c", 2) is SealOutcome.ALREADY_CUT
    assert staging.open_labels() == []


def test_published_sequence_never_moves_backwards(staging: RedisStaging) -> None:
    assert staging.published() == 0
    assert staging.mark_published(2) == 2
    assert staging.mark_published(1) == 2
    assert staging.published() == 2


def test_no_raw_id_reaches_redis(staging: RedisStaging, redis_url: str, redis_prefix: str) -> None:
    from stream_release.history.pseudonym import Pseudonymizer

    ids = ["alice-0001", "bob-0002"]
    pseudonyms = Pseudonymizer(b"k" * 32).pseudonyms(ids).tolist()
    staging.stage("d", pseudonyms, [_row("M", 1, "x"), _row("F", 2, "y")])
    client = redis.Redis.from_url(redis_url)
    dump = b"".join(
        k + b"".join(client.hgetall(k).keys()) if client.type(k) == b"hash" else k
        for k in client.scan_iter(match=f"{redis_prefix}:*")
    )
    assert all(i.encode() not in dump for i in ids)
