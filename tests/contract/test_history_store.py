"""One HistoryStore contract, run against every backend (STYLE.md rule 5).

``store`` is parametrized over the file store (a tmp directory), the Redis store (a real
``redis-server`` from ``tests/conftest.py``, marked ``integration``) and the in-memory overlay
of a what-if series over an empty file store. ``open_store()`` opens another instance on the
same storage, to play a second process (the overlay's storage is its memory: every "instance"
is the one overlay). The backend-specific tests at
the end cover how each one keeps a commit atomic.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import redis
import redis.connection
from numpy.typing import NDArray
from support.tables import keyed_pseudonyms

from stream_release.errors import HistoryStoreError, KeyMismatch, SequenceConflict
from stream_release.history import (
    FileHistoryStore,
    HistoryRows,
    HistoryStore,
    RedisHistoryStore,
    RedisKeys,
    make_history_store,
)
from stream_release.history import redis_store as redis_store_module
from stream_release.history.overlay_store import OverlayHistoryStore
from stream_release.history.redis_store import WATCH_ATTEMPTS

Entry = tuple[int, float, int]
OpenStore = Callable[[], HistoryStore]


# -- helpers ---------------------------------------------------------------------------------


def pseudonyms(*names: str) -> NDArray[np.bytes_]:
    """Deterministic 16-byte pseudonyms for readable names (the key does not matter here)."""
    return keyed_pseudonyms(names)


# Pseudonyms whose trailing bytes are NUL: numpy drops those when it hands out one element.
NUL_TAILED = np.frombuffer(b"\x07" * 15 + b"\x00" + b"\x00" * 16, dtype="S16").copy()


def rows(*individuals: list[Entry]) -> HistoryRows:
    """HistoryRows from one list of (value, log_p, links) per individual."""
    counts = [len(entries) for entries in individuals]
    flat = [entry for entries in individuals for entry in entries]
    return HistoryRows(
        np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        np.array([e[0] for e in flat], dtype=np.int32),
        np.array([e[1] for e in flat], dtype=np.float64),
        np.array([e[2] for e in flat], dtype=np.int32),
    )


def as_lists(history: HistoryRows) -> list[list[Entry]]:
    """Per individual, its entries as Python tuples (exact float comparison)."""
    ip = history.indptr.tolist()
    v, lp, lk = history.value.tolist(), history.log_p.tolist(), history.links.tolist()
    return [[(v[j], lp[j], lk[j]) for j in range(ip[i], ip[i + 1])] for i in range(len(ip) - 1)]


def take_rows(history: HistoryRows, index: NDArray[np.int64]) -> HistoryRows:
    """Rows ``history[index[i]]`` (empty where ``index[i] < 0``), vectorised."""
    known = index >= 0
    src = np.where(known, index, 0)
    starts = history.indptr[src]
    counts = np.where(known, history.indptr[src + 1] - starts, 0)
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    gather = np.repeat(starts - indptr[:-1], counts) + np.arange(indptr[-1])
    return HistoryRows(indptr, history.value[gather], history.log_p[gather], history.links[gather])


def assert_rows_equal(actual: HistoryRows, expected: HistoryRows) -> None:
    assert actual.indptr.dtype == np.int64
    assert actual.value.dtype == np.int32
    assert actual.log_p.dtype == np.float64
    assert actual.links.dtype == np.int32
    np.testing.assert_array_equal(actual.indptr, expected.indptr)
    np.testing.assert_array_equal(actual.value, expected.value)
    np.testing.assert_array_equal(actual.log_p, expected.log_p)  # exact, -inf == -inf
    np.testing.assert_array_equal(actual.links, expected.links)


def snapshot(store: HistoryStore, probe: NDArray[np.bytes_]) -> tuple[object, ...]:
    """Everything observable about ``store`` (records 1..3, history of ``probe``)."""
    return (
        store.last_sequence(),
        store.values(),
        tuple(store.record(s) for s in range(1, 4)),
        as_lists(store.load(probe)),
    )


# -- fixtures --------------------------------------------------------------------------------


@pytest.fixture(params=["file", pytest.param("redis", marks=pytest.mark.integration), "overlay"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[OpenStore]:
    """Factory of store instances sharing one empty storage (a directory / a key prefix)."""
    opened: list[HistoryStore] = []
    if request.param == "file":

        def make() -> HistoryStore:
            return FileHistoryStore(tmp_path / "history")

    elif request.param == "overlay":
        overlay = OverlayHistoryStore(FileHistoryStore(tmp_path / "history"))

        def make() -> HistoryStore:
            return overlay

    else:
        url: str = request.getfixturevalue("redis_url")
        prefix: str = request.getfixturevalue("redis_prefix")

        def make() -> HistoryStore:
            return RedisHistoryStore.from_url(url, prefix)

    def open_one() -> HistoryStore:
        store = make()
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: OpenStore) -> HistoryStore:
    return open_store()


A, B, C, D = pseudonyms("alice", "bob", "carol", "dave")
VALUES = ("flu", "hiv", "cancer")


def commit_first(store: HistoryStore) -> None:
    """Release 1: alice, bob and carol."""
    store.commit(
        1,
        np.array([A, B, C]),
        rows([(0, -0.5, 1), (2, -0.25, 1)], [(1, -0.1, 1)], [(0, -0.7, 2)]),
        VALUES,
        b"record one",
    )


# -- the contract ----------------------------------------------------------------------------


def test_empty_store_has_sequence_zero_and_no_values(store: HistoryStore) -> None:
    assert store.last_sequence() == 0
    assert store.values() == ()
    assert store.record(1) is None
    assert store.record(0) is None


def test_load_of_unknown_pseudonyms_gives_empty_rows(store: HistoryStore) -> None:
    got = store.load(np.array([A, B, A]))
    assert got.n_individuals == 3
    assert got.n_entries == 0
    np.testing.assert_array_equal(got.indptr, [0, 0, 0, 0])
    assert store.load(np.zeros(0, dtype="S16")).n_individuals == 0


def test_commit_then_load_round_trips_exactly(store: HistoryStore) -> None:
    history = rows(
        [(0, 0.0, 1), (1, -1e-300, 3), (2, -5e-324, 7), (4, -700.0, 2**31 - 1)],
        [(3, -np.inf, 1)],
        [],
        [(4, -0.6931471805599453, 2)],
        [(0, -1e-17, 1), (1, -745.1332191019411, 4)],
    )
    ps = np.concatenate([pseudonyms("a", "b", "c"), NUL_TAILED])
    values = ("v0", "v1", "v2", "v3", "ünïcødé ✓")
    store.commit(1, ps, history, values, b"r1")
    assert store.last_sequence() == 1
    assert store.values() == values
    assert_rows_equal(store.load(ps), history)


def test_load_follows_input_order_with_duplicates_and_unknowns(store: HistoryStore) -> None:
    commit_first(store)
    (unknown,) = pseudonyms("nobody")
    got = store.load(np.array([B, unknown, A, B, NUL_TAILED[1], C, A]))
    assert as_lists(got) == [
        [(1, -0.1, 1)],
        [],
        [(0, -0.5, 1), (2, -0.25, 1)],
        [(1, -0.1, 1)],
        [],
        [(0, -0.7, 2)],
        [(0, -0.5, 1), (2, -0.25, 1)],
    ]


def test_second_commit_replaces_only_the_named_individuals(store: HistoryStore) -> None:
    commit_first(store)
    store.commit(
        2,
        np.array([D, B, C]),
        rows([(3, -0.2, 1)], [(1, -0.3, 2), (3, -0.2, 1)], []),
        (*VALUES, "asthma"),
        b"record two",
    )
    assert store.last_sequence() == 2
    assert store.values() == (*VALUES, "asthma")
    assert as_lists(store.load(np.array([A, B, C, D]))) == [
        [(0, -0.5, 1), (2, -0.25, 1)],  # alice untouched
        [(1, -0.3, 2), (3, -0.2, 1)],  # bob replaced
        [],  # carol emptied
        [(3, -0.2, 1)],  # dave new
    ]
    assert store.record(1) == b"record one"
    assert store.record(2) == b"record two"


@pytest.mark.parametrize("sequence", [0, 1, 3, -1], ids=["zero", "same", "plus-two", "negative"])
def test_wrong_sequence_conflicts_and_changes_nothing(store: HistoryStore, sequence: int) -> None:
    commit_first(store)
    probe = np.array([A, B, C, D])
    before = snapshot(store, probe)
    with pytest.raises(SequenceConflict, match="next must be 2"):
        store.commit(sequence, np.array([A, D]), rows([], [(3, -1.0, 1)]), (*VALUES, "x"), b"bad")
    assert snapshot(store, probe) == before


def test_first_commit_must_be_sequence_one(store: HistoryStore) -> None:
    with pytest.raises(SequenceConflict, match="next must be 1"):
        store.commit(2, np.array([A]), rows([(0, -1.0, 1)]), VALUES, b"r")
    assert store.last_sequence() == 0
    assert store.values() == ()
    assert store.record(2) is None
    assert store.load(np.array([A])).n_entries == 0


@pytest.mark.parametrize(
    "values",
    [("hiv", "flu", "cancer"), ("flu", "hiv"), ("flu", "hiv", "asthma", "cancer")],
    ids=["reordered", "shorter", "inserted"],
)
def test_value_dictionary_must_extend_the_stored_one(
    store: HistoryStore, values: tuple[str, ...]
) -> None:
    commit_first(store)
    probe = np.array([A, B, C, D])
    before = snapshot(store, probe)
    with pytest.raises(SequenceConflict, match="not a prefix"):
        store.commit(2, np.array([D]), rows([(0, -1.0, 1)]), values, b"bad")
    assert snapshot(store, probe) == before


def test_record_returns_the_committed_bytes(store: HistoryStore) -> None:
    record = bytes(range(256)) * 3 + b"\x00"
    store.commit(1, np.array([A]), rows([(0, -1.0, 1)]), ("flu",), record)
    assert store.record(1) == record
    assert store.record(2) is None


def test_another_instance_sees_the_commit(open_store: OpenStore) -> None:
    commit_first(open_store())
    other = open_store()
    assert other.last_sequence() == 1
    assert other.values() == VALUES
    assert other.record(1) == b"record one"
    assert as_lists(other.load(np.array([C]))) == [[(0, -0.7, 2)]]


def test_a_stale_instance_loses_to_a_rival_commit(open_store: OpenStore) -> None:
    first, rival = open_store(), open_store()
    commit_first(first)
    assert first.last_sequence() == rival.last_sequence() == 1
    rival.commit(2, np.array([A]), rows([(0, -2.0, 2)]), VALUES, b"rival")
    with pytest.raises(SequenceConflict):
        first.commit(2, np.array([D]), rows([(1, -1.0, 1)]), (*VALUES, "x"), b"loser")
    assert first.record(2) == b"rival"
    assert first.values() == VALUES
    assert as_lists(first.load(np.array([A, D]))) == [[(0, -2.0, 2)], []]


@pytest.mark.parametrize(
    ("ps", "history", "message"),
    [
        ([A, B], rows([(0, -1.0, 1)]), "indptr"),
        ([A], rows([(3, -1.0, 1)]), "ids index values"),
        ([A], rows([(-1, -1.0, 1)]), "ids index values"),
        ([A], rows([(0, 0.5, 1)]), "log_p"),
        ([A], rows([(0, float("nan"), 1)]), "log_p"),
        ([A], rows([(0, -1.0, 0)]), "links"),
        ([A], rows([(1, -1.0, 1), (0, -1.0, 1)]), "ascending"),
        ([A], rows([(1, -1.0, 1), (1, -2.0, 1)]), "ascending"),
        ([A, A], rows([(0, -1.0, 1)], [(1, -1.0, 1)]), "duplicates"),
    ],
    ids=[
        "rows-mismatch",
        "value-too-big",
        "value-negative",
        "log-p-positive",
        "log-p-nan",
        "links-zero",
        "descending",
        "repeated-value",
        "duplicate-pseudonym",
    ],
)
def test_malformed_commit_is_refused_before_anything_is_written(
    store: HistoryStore, ps: list[bytes], history: HistoryRows, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        store.commit(1, np.array(ps, dtype="S16"), history, VALUES, b"r")
    assert store.last_sequence() == 0
    assert store.values() == ()


def test_large_round_trip_is_vectorised(store: HistoryStore) -> None:
    n, per = 200_000, 5
    rng = np.random.default_rng(2010)
    ps = np.frombuffer(rng.bytes(16 * n), dtype="S16").copy()
    values = tuple(f"v{i}" for i in range(2 * per))
    history = HistoryRows(
        np.arange(0, n * per + 1, per, dtype=np.int64),
        (np.tile(np.arange(per) * 2, n) + np.repeat(rng.integers(0, 2, n), per)).astype(np.int32),
        -rng.exponential(size=n * per),
        rng.integers(1, 20, size=n * per).astype(np.int32),
    )
    store.commit(1, ps, history, values, b"big")
    unknown = np.frombuffer(rng.bytes(16 * 1000), dtype="S16")
    index = np.concatenate([rng.permutation(n), np.full(1000, -1)])
    rng.shuffle(index)
    query = np.where(index >= 0, ps[np.maximum(index, 0)], unknown[np.cumsum(index < 0) % 1000])
    assert_rows_equal(store.load(query), take_rows(history, index))
    # a second release touching a tenth of them keeps the rest
    touched = rng.choice(n, size=n // 10, replace=False)
    new = HistoryRows(
        np.arange(0, touched.size + 1, dtype=np.int64),
        np.zeros(touched.size, np.int32),
        np.full(touched.size, -3.0),
        np.ones(touched.size, np.int32),
    )
    store.commit(2, ps[touched], new, values, b"big2")
    expected_index = np.arange(n)
    got = store.load(ps)
    untouched = np.setdiff1d(expected_index, touched)
    assert_rows_equal(take_rows(got, untouched), take_rows(history, untouched))
    assert_rows_equal(take_rows(got, touched), new)


def test_mechanism_state_commits_with_the_release(open_store: OpenStore) -> None:
    """State entries are read back by key (None when never written), later commits overwrite
    only the keys they name, another instance sees them, and a release without history (the
    mechanisms' empty HistoryRows) commits."""
    store = open_store()
    keys = [b"sampled-k-anonymity:series", b"\x00\x01", A.ljust(16, b"\x00")]
    assert store.load_state(keys) == [None, None, None]
    assert store.load_state([]) == []
    store.commit(
        1,
        np.zeros(0, dtype="S16"),
        HistoryRows.empty(0),
        (),
        b"r1",
        state={keys[0]: b'{"epsilon": 1.0}', keys[1]: b""},
    )
    assert store.last_sequence() == 1
    assert store.load_state(keys) == [b'{"epsilon": 1.0}', b"", None]
    store.commit(
        2, np.zeros(0, dtype="S16"), HistoryRows.empty(0), (), b"r2", state={keys[0]: b"two"}
    )
    other = open_store()
    assert other.load_state(keys[::-1]) == [None, b"", b"two"]
    assert other.record(2) == b"r2"


def test_mechanism_state_is_not_written_by_a_refused_commit(store: HistoryStore) -> None:
    commit_first(store)
    with pytest.raises(SequenceConflict):
        store.commit(
            3, np.zeros(0, dtype="S16"), HistoryRows.empty(0), VALUES, b"r", state={b"k": b"v"}
        )
    with pytest.raises(TypeError, match="state maps bytes to bytes"):
        store.commit(
            2, np.zeros(0, dtype="S16"), HistoryRows.empty(0), VALUES, b"r", state={"k": b"v"}
        )
    with pytest.raises(ValueError, match="1 to 512 bytes"):
        store.load_state([b""])
    assert store.load_state([b"k"]) == [None]
    assert store.last_sequence() == 1


K1, K2 = hashlib.blake2b(b"one", digest_size=16).digest(), hashlib.blake2b(b"two").digest()[:16]


def test_the_key_check_is_recorded_by_the_first_commit_and_another_key_refused(
    open_store: OpenStore,
) -> None:
    store = open_store()
    assert store.key_check() is None
    store.commit(1, np.array([A]), rows([(0, -0.5, 1)]), VALUES, b"r1", key_check=K1)
    assert store.key_check() == K1
    with pytest.raises(KeyMismatch, match="another pseudonymisation key"):
        store.commit(2, np.array([B]), rows([(1, -0.1, 1)]), VALUES, b"r2", key_check=K2)
    other = open_store()
    assert (other.last_sequence(), other.key_check(), other.record(2)) == (1, K1, None)
    assert_rows_equal(other.load(np.array([B])), rows([]))
    other.commit(2, np.array([B]), rows([(1, -0.1, 1)]), VALUES, b"r2", key_check=K1)
    assert store.key_check() == K1 and store.last_sequence() == 2


def test_a_store_written_before_key_checks_records_one_at_its_next_commit(
    store: HistoryStore,
) -> None:
    commit_first(store)  # no key_check: an older version's commit
    assert store.key_check() is None
    store.commit(2, np.array([D]), rows([(0, -0.2, 1)]), VALUES, b"r2", key_check=K2)
    assert store.key_check() == K2


# -- how each backend keeps a commit atomic ----------------------------------------------------


@pytest.mark.integration
def test_redis_commit_whose_watch_is_invalidated_applies_nothing(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rival commits between the loser's WATCH/check and its MULTI: EXEC is discarded, the
    retry sees the new sequence and the loser gets SequenceConflict with nothing applied."""
    loser = RedisHistoryStore.from_url(redis_url, redis_prefix)
    rival = RedisHistoryStore.from_url(redis_url, redis_prefix)
    try:
        commit_first(loser)
        original = redis.connection.Connection.send_command
        rival_commits: list[int] = []

        def multi_after_rival(conn: redis.connection.Connection, *args: Any, **kwargs: Any) -> None:
            if args[0] == "MULTI" and not rival_commits:
                rival_commits.append(2)
                rival.commit(2, np.array([A]), rows([(0, -2.0, 2)]), VALUES, b"rival")
            original(conn, *args, **kwargs)

        monkeypatch.setattr(redis.connection.Connection, "send_command", multi_after_rival)
        with pytest.raises(SequenceConflict, match="next must be 3"):
            loser.commit(
                2, np.array([B, D]), rows([], [(3, -1.0, 1)]), (*VALUES, "loser"), b"loser"
            )
        assert rival_commits == [2]
        assert loser.last_sequence() == 2
        assert loser.record(2) == b"rival"
        assert loser.values() == VALUES
        assert as_lists(loser.load(np.array([A, B, D]))) == [
            [(0, -2.0, 2)],
            [(1, -0.1, 1)],  # not deleted by the loser
            [],  # not written by the loser
        ]
    finally:
        loser.close()
        rival.close()


@pytest.mark.integration
def test_redis_commit_sends_no_health_check_inside_its_transaction(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py PINGs a connection idle for ``health_check_interval`` before its next send.
    Inside MULTI that PING would read a queued command's reply as its PONG, drop the
    connection and, with retries (``redis.Redis``'s default), send the rest on a new one
    outside the transaction: found by a review, with individuals left without history. A
    commit whose MSETs take longer than the interval applies whole."""
    client = redis.Redis.from_url(redis_url, health_check_interval=1, retry_on_timeout=True)
    store = RedisHistoryStore(client, redis_prefix)
    monkeypatch.setattr(redis_store_module, "CHUNK", 2)
    pack = redis_store_module.mset_command
    packed: list[int] = []

    def slowly(*args: Any) -> Any:
        packed.append(1)
        if len(packed) == 2:
            time.sleep(1.3)  # past the interval, with the first MSET's reply unread
        return pack(*args)

    monkeypatch.setattr(redis_store_module, "mset_command", slowly)
    people = pseudonyms(*(f"p{i}" for i in range(6)))
    history = rows(*([(i % 3, -0.5, 1)] for i in range(6)))
    try:
        store.commit(1, people, history, VALUES, b"r1")
        assert len(packed) == 3 and store.last_sequence() == 1
        assert as_lists(store.load(people)) == as_lists(history)
    finally:
        client.close()


@pytest.mark.integration
def test_redis_commit_gives_up_when_the_watch_keeps_failing(
    redis_url: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = RedisHistoryStore.from_url(redis_url, redis_prefix)
    other = redis.Redis.from_url(redis_url)
    try:
        commit_first(store)
        original = redis.connection.Connection.send_command
        touches: list[int] = []

        def multi_after_touch(conn: redis.connection.Connection, *args: Any, **kwargs: Any) -> None:
            if args[0] == "MULTI":
                touches.append(1)
                other.set(RedisKeys(redis_prefix).sequence, b"1")  # same value, still a write
            original(conn, *args, **kwargs)

        monkeypatch.setattr(redis.connection.Connection, "send_command", multi_after_touch)
        with pytest.raises(HistoryStoreError, match=f"{WATCH_ATTEMPTS} attempts") as info:
            store.commit(2, np.array([D]), rows([(0, -1.0, 1)]), VALUES, b"r2")
        assert not isinstance(info.value, SequenceConflict)
        assert len(touches) == WATCH_ATTEMPTS
        monkeypatch.undo()
        assert store.last_sequence() == 1
        assert store.record(2) is None
        assert store.load(np.array([D])).n_entries == 0
    finally:
        store.close()
        other.close()


@pytest.mark.integration
def test_redis_keys_hold_no_id_and_one_blob_per_individual(
    redis_url: str, redis_prefix: str
) -> None:
    store = RedisHistoryStore.from_url(redis_url, redis_prefix)
    raw = redis.Redis.from_url(redis_url)
    try:
        commit_first(store)
        keys = RedisKeys(redis_prefix)
        stored = set(raw.scan_iter(match=keys.match))
        expected = {keys.individual(p).encode() for p in (A, B, C)}
        expected |= {keys.sequence.encode(), keys.values.encode(), keys.record(1).encode()}
        assert stored == expected
        for name in ("alice", "bob", "carol"):
            assert not any(name.encode() in key for key in stored)
        assert raw.strlen(keys.individual(A)) == 2 * 16
    finally:
        store.close()
        raw.close()


@pytest.mark.integration
def test_redis_corrupt_blob_is_reported(redis_url: str, redis_prefix: str) -> None:
    store = RedisHistoryStore.from_url(redis_url, redis_prefix)
    raw = redis.Redis.from_url(redis_url)
    try:
        raw.set(RedisKeys(redis_prefix).individual(A), b"\x00" * 15)
        with pytest.raises(HistoryStoreError, match="corrupt"):
            store.load(np.array([A]))
    finally:
        store.close()
        raw.close()


def test_redis_failure_is_wrapped_without_the_password() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once the socket is closed
    store = RedisHistoryStore.from_url(f"redis://:hunter2@127.0.0.1:{port}/0", "sr")
    try:
        with pytest.raises(HistoryStoreError, match=f"127.0.0.1:{port}") as info:
            store.last_sequence()
        assert isinstance(info.value.__cause__, redis.RedisError)
        assert "hunter2" not in str(info.value)
        with pytest.raises(HistoryStoreError, match="commit of release 1"):
            store.commit(1, np.array([A]), rows([(0, -1.0, 1)]), VALUES, b"r")
    finally:
        store.close()


def test_file_commit_interrupted_before_the_commit_point_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The record file and the segments are written, then writing head.npz fails (a crash
    there): the history and sequence stay as they were, the orphan record is ignored and
    overwritten."""
    store = FileHistoryStore(tmp_path)
    commit_first(store)
    probe = np.array([A, B, C, D])
    before = snapshot(store, probe)
    real_replace = os.replace

    def failing_replace(src: str | Path, dst: str | Path) -> None:
        if Path(dst).name == "head.npz":
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(HistoryStoreError, match="history is unchanged"):
        store.commit(2, np.array([D]), rows([(0, -1.0, 1)]), VALUES, b"lost")
    monkeypatch.undo()
    assert (tmp_path / "records" / "release-00000002.bin").read_bytes() == b"lost"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]
    fresh = FileHistoryStore(tmp_path)
    assert snapshot(fresh, probe) == before
    assert snapshot(store, probe) == before
    fresh.commit(2, np.array([D]), rows([(1, -1.0, 1)]), VALUES, b"kept")
    assert store.record(2) == b"kept"
    assert as_lists(store.load(np.array([D]))) == [[(1, -1.0, 1)]]


def test_make_history_store_picks_the_backend(tmp_path: Path) -> None:
    for url in ("redis://127.0.0.1:6379/0", "rediss://example.org:6380/1", "unix:///tmp/r.sock"):
        store = make_history_store(url, "sr")
        assert isinstance(store, RedisHistoryStore)
        store.close()
    assert isinstance(make_history_store(tmp_path, "sr"), FileHistoryStore)
    assert isinstance(make_history_store(str(tmp_path / "h"), "sr"), FileHistoryStore)
