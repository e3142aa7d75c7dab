"""The what-if history: commits kept in memory over a store that is never written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stream_release.errors import KeyMismatch, SequenceConflict
from stream_release.history import FileHistoryStore, HistoryRows
from stream_release.history.overlay_store import OverlayHistoryStore

A, B, C = (name.ljust(16, "-").encode() for name in ("alice", "bob", "carol"))
VALUES = ("flu", "hiv")
CHECK = bytes(range(16))


def _rows(*individuals: list[tuple[int, float, int]]) -> HistoryRows:
    indptr = np.cumsum([0, *(len(i) for i in individuals)]).astype(np.int64)
    flat = [e for i in individuals for e in i]
    return HistoryRows(
        indptr,
        np.array([e[0] for e in flat], dtype=np.int32),
        np.array([e[1] for e in flat], dtype=np.float64),
        np.array([e[2] for e in flat], dtype=np.int32),
    )


def _as_lists(h: HistoryRows) -> list[list[tuple[int, float, int]]]:
    return [
        list(zip(h.value[a:b].tolist(), h.log_p[a:b].tolist(), h.links[a:b].tolist(), strict=True))
        for a, b in zip(h.indptr[:-1].tolist(), h.indptr[1:].tolist(), strict=True)
    ]


@pytest.fixture
def base(tmp_path: Path) -> FileHistoryStore:
    store = FileHistoryStore(tmp_path / "history")
    store.commit(
        1,
        np.array([A, B]),
        _rows([(0, -0.5, 1)], [(1, -0.1, 1)]),
        VALUES,
        b"one",
        state={b"k": b"v1"},
        key_check=CHECK,
    )
    return store


def test_commits_stay_in_memory_and_reads_see_them(base: FileHistoryStore) -> None:
    overlay = OverlayHistoryStore(base)
    overlay.commit(
        2,
        np.array([B, C]),
        _rows([(1, -0.3, 2)], [(0, -0.2, 1), (2, -0.4, 1)]),
        (*VALUES, "cancer"),
        b"two",
        state={b"k": b"v2", b"j": b"w"},
        key_check=CHECK,
    )
    assert (overlay.last_sequence(), overlay.values()) == (2, (*VALUES, "cancer"))
    assert _as_lists(overlay.load(np.array([C, A, B, C]))) == [
        [(0, -0.2, 1), (2, -0.4, 1)],
        [(0, -0.5, 1)],
        [(1, -0.3, 2)],
        [(0, -0.2, 1), (2, -0.4, 1)],
    ]
    assert overlay.record(2) == b"two" and overlay.record(1) == b"one"
    assert overlay.load_state([b"j", b"k", b"x"]) == [b"w", b"v2", None]
    # the base store is untouched
    assert (base.last_sequence(), base.values(), base.record(2)) == (1, VALUES, None)
    assert _as_lists(base.load(np.array([B, C]))) == [[(1, -0.1, 1)], []]
    assert base.load_state([b"k", b"j"]) == [b"v1", None]


def test_an_emptied_individual_hides_the_base_rows(base: FileHistoryStore) -> None:
    overlay = OverlayHistoryStore(base)
    overlay.commit(2, np.array([A]), HistoryRows.empty(1), VALUES, b"two")
    assert _as_lists(overlay.load(np.array([A, B]))) == [[], [(1, -0.1, 1)]]


@pytest.mark.parametrize("method", ["commit", "check"])
def test_the_contract_checks_hold_in_memory(base: FileHistoryStore, method: str) -> None:
    overlay = OverlayHistoryStore(base)
    keep = getattr(overlay, method)
    with pytest.raises(SequenceConflict):
        keep(3, np.array([A]), _rows([(0, -0.1, 1)]), VALUES, b"x")
    with pytest.raises(SequenceConflict):
        keep(2, np.array([A]), _rows([(0, -0.1, 1)]), ("other",), b"x")
    with pytest.raises(KeyMismatch):
        keep(2, np.array([A]), _rows([(0, -0.1, 1)]), VALUES, b"x", key_check=b"k" * 16)
    with pytest.raises(ValueError, match="duplicates"):
        keep(2, np.array([A, A]), _rows([(0, -0.1, 1)], [(1, -0.1, 1)]), VALUES, b"x")
    assert overlay.last_sequence() == 1


def test_a_check_keeps_nothing(base: FileHistoryStore) -> None:
    overlay = OverlayHistoryStore(base)
    overlay.check(
        2, np.array([A]), _rows([(1, -0.1, 1)]), (*VALUES, "x"), b"two", state={b"k": b"w"}
    )
    assert overlay.last_sequence() == 1
    assert overlay.values() == VALUES
    assert overlay.record(2) is None
    assert overlay.load_state([b"k"]) == [b"v1"]
    assert _as_lists(overlay.load(np.array([A]))) == [[(0, -0.5, 1)]]
