"""A what-if history: commits kept in memory on top of a store that is never written.

:class:`OverlayHistoryStore` answers every read of the
:class:`~stream_release.history.types.HistoryStore` protocol as the base store would after the
commits made to the overlay, and writes nothing to the base. Offline ``anonymize`` plans a whole
run against it first, so that a run whose third snapshot is infeasible publishes nothing at all;
only then are the same commits applied to the real store.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from stream_release.core.privacy.linkage import HistoryRows
from stream_release.errors import KeyMismatch, SequenceConflict
from stream_release.history._csr import gather_rows, lookup_pseudonyms, merge_rows
from stream_release.history._validate import (
    Commit,
    check_commit,
    check_key_check,
    check_pseudonyms,
    check_sequence,
    check_state,
    check_state_keys,
    key_mismatch_message,
)
from stream_release.history.types import ENTRY_DTYPE, PSEUDONYM_DTYPE, HistoryStore

__all__ = ["OverlayHistoryStore"]


class OverlayHistoryStore:
    """:class:`~stream_release.history.types.HistoryStore` over ``base``; commits stay here.

    Parameters
    ----------
    base : HistoryStore
        Read, never written (not closed by :meth:`close` either).
    """

    def __init__(self, base: HistoryStore) -> None:
        self._base = base
        self._reset()

    def _reset(self) -> None:
        base = self._base
        self._sequence = base.last_sequence()
        self._values = base.values()
        self._key_check = base.key_check()
        self._ps = np.zeros(0, PSEUDONYM_DTYPE)
        self._indptr = np.zeros(1, np.int64)
        self._entries = np.zeros(0, ENTRY_DTYPE)
        self._records: dict[int, bytes] = {}
        self._state: dict[bytes, bytes] = {}

    def __repr__(self) -> str:
        return f"OverlayHistoryStore({self._base!r})"

    def last_sequence(self) -> int:
        return self._sequence

    def values(self) -> tuple[str, ...]:
        return self._values

    def key_check(self) -> bytes | None:
        return self._key_check

    def record(self, sequence: int) -> bytes | None:
        seq = check_sequence(sequence)
        if seq in self._records:
            return self._records[seq]
        return self._base.record(seq)

    def load(self, pseudonyms: NDArray[np.bytes_]) -> HistoryRows:
        """The base's rows, with those committed here in their place."""
        ps = check_pseudonyms(pseudonyms)
        base = self._base.load(ps)
        where = lookup_pseudonyms(self._ps, ps)
        if not np.any(where >= 0):
            return base
        pool = np.empty(base.n_entries + self._entries.shape[0], dtype=ENTRY_DTYPE)
        m = base.n_entries
        pool["value"][:m], pool["log_p"][:m], pool["links"][:m] = (
            base.value,
            base.log_p,
            base.links,
        )
        pool[m:] = self._entries
        found = where >= 0
        starts = np.where(found, m + self._indptr[np.maximum(where, 0)], base.indptr[:-1])
        ends = np.where(found, m + self._indptr[np.maximum(where, 0) + 1], base.indptr[1:])
        indptr, entries = gather_rows(pool, starts, ends - starts)
        return HistoryRows(
            indptr,
            entries["value"].astype(np.int32),
            entries["log_p"].astype(np.float64),
            entries["links"].astype(np.int32),
        )

    def load_state(self, keys: Sequence[bytes]) -> list[bytes | None]:
        wanted = check_state_keys(keys)
        missing = [key for key in wanted if key not in self._state]
        below = dict(zip(missing, self._base.load_state(missing), strict=True))
        return [self._state[key] if key in self._state else below[key] for key in wanted]

    def commit(
        self,
        sequence: int,
        pseudonyms: NDArray[np.bytes_],
        history: HistoryRows,
        values: tuple[str, ...],
        record: bytes,
        *,
        label: str | None = None,
        state: Mapping[bytes, bytes] | None = None,
        key_check: bytes | None = None,
    ) -> None:
        """Keep the commit in memory, with the checks of a real store (``label`` ignored)."""
        c, entries, check = self._checked(sequence, pseudonyms, history, values, record,
                                          state, key_check)  # fmt: skip
        self._ps, self._indptr, self._entries = merge_rows(
            self._ps,
            self._indptr,
            self._entries,
            c.pseudonyms[c.order],
            c.indptr[:-1][c.order],
            np.diff(c.indptr)[c.order],
            c.entries,
            keep_empty=True,  # an individual emptied here must hide the base's rows
        )
        self._state.update(entries)
        self._records[c.sequence] = c.record
        self._values = c.values
        self._sequence = c.sequence
        if self._key_check is None:
            self._key_check = check

    def check(
        self,
        sequence: int,
        pseudonyms: NDArray[np.bytes_],
        history: HistoryRows,
        values: tuple[str, ...],
        record: bytes,
        *,
        state: Mapping[bytes, bytes] | None = None,
        key_check: bytes | None = None,
    ) -> None:
        """Raise what :meth:`commit` would, and keep nothing: for the last release of a dry
        run, which no later one reads (at a million rows, the copy of its history was the
        peak of ``anonymize``'s memory)."""
        self._checked(sequence, pseudonyms, history, values, record, state, key_check)

    def _checked(
        self,
        sequence: int,
        pseudonyms: NDArray[np.bytes_],
        history: HistoryRows,
        values: tuple[str, ...],
        record: bytes,
        state: Mapping[bytes, bytes] | None,
        key_check: bytes | None,
    ) -> tuple[Commit, dict[bytes, bytes], bytes | None]:
        c = check_commit(sequence, pseudonyms, history, values, record)
        entries = check_state(state)
        check = check_key_check(key_check)
        if c.sequence != self._sequence + 1:
            raise SequenceConflict(
                f"commit of release {c.sequence} refused: the last release of the what-if "
                f"series over {self._base!r} is {self._sequence}, so the next must be "
                f"{self._sequence + 1}"
            )
        if c.values[: len(self._values)] != self._values:
            raise SequenceConflict(
                f"commit of release {c.sequence} refused: the stored value dictionary "
                f"({len(self._values)} values) is not a prefix of the given one "
                f"({len(c.values)} values); reload the dictionary and plan the release again"
            )
        if check is not None and self._key_check not in (None, check):
            raise KeyMismatch(key_mismatch_message(repr(self._base)))
        return c, entries, check

    def close(self) -> None:
        """Drop the commits kept here (the base stays open)."""
        self._reset()
