"""The file store's segments: loads and merges against a dict model across chunk boundaries,
a crash at every write of a commit, a directory written before segments, and a reader whose
segments another process merged away. (The behaviour every store shares is in
``tests/contract/test_history_store.py``.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from stream_release.errors import HistoryStoreError
from stream_release.history import FileHistoryStore, HistoryRows
from stream_release.history import _segments as segments_module
from stream_release.history import file_store as file_store_module
from stream_release.history.file_store import HEAD_FILE, LEGACY_FILE, SEGMENTS_DIR

VALUES = tuple(f"v{i}" for i in range(6))
Model = dict[bytes, list[tuple[int, float, int]]]


def random_pseudonyms(rng: np.random.Generator, n: int) -> NDArray[np.bytes_]:
    """n distinct pseudonyms; a quarter share their first 8 bytes, so that the merges and
    lookups compare the second halves too."""
    ps = np.frombuffer(rng.bytes(16 * n), dtype="S16").copy()
    ps[: n // 4] = [b"\x05" * 8 + rng.bytes(8) for _ in range(n // 4)]
    return ps


def random_rows(rng: np.random.Generator, n: int, empty_share: float = 0.0) -> HistoryRows:
    """n individuals with 0-3 entries each (an empty row with probability ``empty_share``,
    else 1-3)."""
    counts = rng.integers(1, 4, size=n)
    counts[rng.random(n) < empty_share] = 0
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    value = np.concatenate(
        [np.zeros(0, np.int64)]
        + [np.sort(rng.choice(len(VALUES), size=c, replace=False)) for c in counts]
    ).astype(np.int32)
    m = int(indptr[-1])
    return HistoryRows(
        indptr, value, -rng.exponential(size=m), rng.integers(1, 9, size=m).astype(np.int32)
    )


def rows_of(history: HistoryRows, i: int) -> list[tuple[int, float, int]]:
    lo, hi = int(history.indptr[i]), int(history.indptr[i + 1])
    return list(
        zip(
            history.value[lo:hi].tolist(),
            history.log_p[lo:hi].tolist(),
            history.links[lo:hi].tolist(),
            strict=True,
        )
    )


def assert_matches(store: FileHistoryStore, model: Model, probe: NDArray[np.bytes_]) -> None:
    got = store.load(probe)
    assert got.n_individuals == probe.shape[0]
    for i, p in enumerate(probe.tolist()):
        assert rows_of(got, i) == model.get(p.ljust(16, b"\x00"), []), i


def commit(
    store: FileHistoryStore, model: Model, sequence: int, ps: NDArray[np.bytes_], h: HistoryRows
) -> None:
    store.commit(sequence, ps, h, VALUES, f"record {sequence}".encode())
    for i, p in enumerate(ps.tolist()):
        model[p.ljust(16, b"\x00")] = rows_of(h, i)
    for p in [p for p, r in model.items() if not r]:
        del model[p]


def segment_dirs(directory: Path) -> list[str]:
    return sorted(p.name for p in (directory / SEGMENTS_DIR).iterdir())


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks of 7 rows, so that loads and merges cross many chunk boundaries."""
    monkeypatch.setattr(segments_module, "CHUNK_ROWS", 7)


@pytest.mark.usefixtures("small_chunks")
@pytest.mark.parametrize("returning", [0.2, 0.9])
def test_a_series_loads_as_the_model_says_with_few_segments(
    tmp_path: Path, returning: float
) -> None:
    """Twelve releases of churn (``returning``: the share of a release's individuals seen
    before; some rows empty, which removes the individual): every load agrees with a dict of
    the latest rows, a fresh instance too; the segments stay O(log releases) and nothing the
    head does not name is left on disk."""
    rng = np.random.default_rng(27)
    pool = random_pseudonyms(rng, 2000)
    store = FileHistoryStore(tmp_path)
    model: Model = {}
    seen: list[int] = []
    fresh = 0
    for sequence in range(1, 13):
        n = int(rng.integers(40, 120))
        back = min(int(returning * n), len(seen))
        old = rng.choice(seen, size=back, replace=False) if back else np.zeros(0, np.int64)
        new = np.arange(fresh, fresh + n - back)
        fresh += n - back
        chosen = np.concatenate([old, new]).astype(np.int64)
        seen = sorted(set(seen) | set(new.tolist()))
        ps = pool[rng.permutation(chosen)]
        commit(store, model, sequence, ps, random_rows(rng, ps.shape[0], empty_share=0.1))
        probe = np.concatenate([pool[: fresh + 30], pool[rng.integers(0, fresh + 1, 50)]])
        assert_matches(store, model, probe)
        assert_matches(FileHistoryStore(tmp_path), model, probe)
        names = segment_dirs(tmp_path)
        assert len(names) <= 1 + int(np.log2(sequence)) + 1, names
        assert all(name.endswith(f"{sequence:08d}") or name < f"{sequence:08d}" for name in names)
        assert names == sorted(segment.path.name for segment in store._head().segments)
    assert store.record(12) == b"record 12"


def test_an_empty_row_removes_an_individual_kept_in_an_older_segment(tmp_path: Path) -> None:
    """A release's empty row is kept in its segment above older ones (a tombstone), so the
    individual's older row is no longer read; merged into the oldest segment, both go."""
    rng = np.random.default_rng(4)
    ps = random_pseudonyms(rng, 40)
    store = FileHistoryStore(tmp_path)
    model: Model = {}
    commit(store, model, 1, ps, random_rows(rng, 40))
    commit(store, model, 2, ps[:3], HistoryRows.empty(3))  # 3 rows on 40: not merged
    assert len(segment_dirs(tmp_path)) == 2
    assert_matches(store, model, ps)
    big = random_pseudonyms(rng, 60)
    commit(store, model, 3, big, random_rows(rng, 60))  # 40 <= 3 + 60: everything merges
    assert segment_dirs(tmp_path) == ["00000001-00000003"]
    assert_matches(store, model, np.concatenate([ps, big]))
    stored = FileHistoryStore(tmp_path)._head().segments[0]
    assert stored.rows == 40 - 3 + 60


@pytest.mark.parametrize(
    ("size", "failing", "after"),
    [
        (5, "00000003-00000003", ["00000001-00000002", "00000003-00000003"]),
        (5, HEAD_FILE, ["00000001-00000002", "00000003-00000003"]),
        (30, "00000001-00000003", ["00000001-00000003"]),
        (30, HEAD_FILE, ["00000001-00000003"]),
    ],
)
def test_a_commit_that_fails_at_any_write_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int, failing: str, after: list[str]
) -> None:
    """Release 3 writes its rows as a segment (``size`` 5: on top of the 30 rows of releases
    1-2) or merged with them (30), then the head: a failure at either rename leaves the
    history of release 2 to this and to another instance, and the next commit of release 3
    succeeds and cleans up."""
    rng = np.random.default_rng(3)
    ps = random_pseudonyms(rng, 30)
    store = FileHistoryStore(tmp_path)
    model: Model = {}
    commit(store, model, 1, ps[:10], random_rows(rng, 10))
    commit(store, model, 2, ps[10:], random_rows(rng, 20))
    assert segment_dirs(tmp_path) == ["00000001-00000002"]
    before = dict(model)
    real_replace = os.replace

    def failing_replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        if Path(dst).name == failing:
            raise OSError(28, "No space left on device")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(HistoryStoreError, match="history is unchanged"):
        store.commit(3, ps[:size], random_rows(rng, size), VALUES, b"lost")
    monkeypatch.undo()
    for instance in (store, FileHistoryStore(tmp_path)):
        assert instance.last_sequence() == 2
        assert instance.record(3) is None
        assert_matches(instance, before, ps)
    commit(store, model, 3, ps[:size], random_rows(rng, size))
    assert_matches(FileHistoryStore(tmp_path), model, ps)
    assert segment_dirs(tmp_path) == after
    assert not [p for p in tmp_path.rglob("*") if p.name.endswith(".tmp")]


def test_a_reader_whose_segments_are_merged_away_mid_load_reads_the_new_head(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process commits between the reader's read of the head and of the segments,
    merging the segments the reader's head names away: the load starts again from the new
    head."""
    rng = np.random.default_rng(5)
    ps = random_pseudonyms(rng, 50)
    reader, writer = FileHistoryStore(tmp_path), FileHistoryStore(tmp_path)
    model: Model = {}
    commit(writer, model, 1, ps[:30], random_rows(rng, 30))
    commit(writer, model, 2, ps[30:40], random_rows(rng, 10))
    stale = reader._head()
    assert len(stale.segments) == 2
    real_load = file_store_module._load
    heads: list[int] = []

    def load_after_a_rival_commit(head: Any, pseudonyms: NDArray[np.bytes_]) -> HistoryRows:
        heads.append(head.sequence)
        if len(heads) == 1:
            commit(writer, model, 3, ps[10:], random_rows(rng, 40))  # merges both away
            assert not stale.segments[0].path.exists()
        if len(heads) == 2:  # and again, under the retry
            commit(writer, model, 4, ps, random_rows(rng, 50))
        return real_load(head, pseudonyms)

    monkeypatch.setattr(file_store_module, "_load", load_after_a_rival_commit)
    assert_matches(reader, model, ps)
    assert heads == [2, 3, 4]


def test_shrinking_releases_still_merge(tmp_path: Path) -> None:
    """Releases one row smaller each time: every segment left holds more than twice the rows
    of the next newer one, so their number stays logarithmic."""
    rng = np.random.default_rng(8)
    ps = random_pseudonyms(rng, 1400)
    store = FileHistoryStore(tmp_path)
    model: Model = {}
    at = 0
    for sequence, n in enumerate(range(60, 30, -1), start=1):
        commit(store, model, sequence, ps[at : at + n], random_rows(rng, n))
        at += n
        rows = [segment.rows for segment in store._head().segments]
        assert all(rows[i] > 2 * rows[i + 1] for i in range(len(rows) - 1)), rows
        assert len(rows) <= 1 + int(np.log2(at)), rows
    assert_matches(FileHistoryStore(tmp_path), model, ps[:at])


def test_a_missing_segment_is_reported_as_corrupt(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    ps = random_pseudonyms(rng, 10)
    store = FileHistoryStore(tmp_path)
    store.commit(1, ps, random_rows(rng, 10), VALUES, b"r")
    (tmp_path / SEGMENTS_DIR / "00000001-00000001" / "entries.bin").unlink()
    with pytest.raises(HistoryStoreError, match="missing: the store is corrupt"):
        FileHistoryStore(tmp_path).load(ps)


def test_a_truncated_segment_is_reported_as_corrupt(tmp_path: Path) -> None:
    rng = np.random.default_rng(6)
    ps = random_pseudonyms(rng, 10)
    store = FileHistoryStore(tmp_path)
    store.commit(1, ps, random_rows(rng, 10), VALUES, b"r")
    path = tmp_path / SEGMENTS_DIR / "00000001-00000001" / "entries.bin"
    path.write_bytes(path.read_bytes()[:-16])
    with pytest.raises(HistoryStoreError, match="corrupt"):
        FileHistoryStore(tmp_path).load(ps)


def write_legacy(directory: Path, ps: NDArray[np.bytes_], history: HistoryRows) -> None:
    """A ``history.npz`` as stores wrote before segments (pseudonyms ascending)."""
    order = np.argsort(ps)
    counts = np.diff(history.indptr)[order]
    at = np.concatenate(
        [np.arange(history.indptr[i], history.indptr[i + 1]) for i in order]
    ).astype(np.int64)
    directory.mkdir(parents=True, exist_ok=True)
    np.savez(
        directory / LEGACY_FILE,
        sequence=np.int64(4),
        pseudonyms=ps[order],
        indptr=np.concatenate([[0], np.cumsum(counts)]).astype(np.int64),
        value=history.value[at].astype(np.uint32),
        log_p=history.log_p[at],
        links=history.links[at].astype(np.uint32),
        values=np.array(VALUES),
        key_check=np.frombuffer(b"k" * 16, dtype=np.uint8),
    )


def test_a_store_written_before_segments_is_read_then_converted(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    ps = random_pseudonyms(rng, 80)
    history = random_rows(rng, 80)
    write_legacy(tmp_path, ps, history)
    model: Model = {p.ljust(16, b"\x00"): rows_of(history, i) for i, p in enumerate(ps.tolist())}
    store = FileHistoryStore(tmp_path)
    assert store.last_sequence() == 4 and store.values() == VALUES
    assert store.key_check() == b"k" * 16
    assert_matches(store, model, ps)
    commit(store, model, 5, ps[:10], random_rows(rng, 10))
    assert not (tmp_path / LEGACY_FILE).exists() and (tmp_path / HEAD_FILE).exists()
    assert segment_dirs(tmp_path) == ["00000001-00000004", "00000005-00000005"]
    fresh = FileHistoryStore(tmp_path)
    assert fresh.last_sequence() == 5 and fresh.key_check() == b"k" * 16
    assert_matches(fresh, model, ps)
