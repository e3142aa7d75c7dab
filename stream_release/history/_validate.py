"""Argument checks shared by every history store (validate once, at the edge).

A store is where the history leaves the process: it refuses malformed arguments before touching
storage, with the same messages whatever the backend, so the contract suite sees one behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from stream_release.core.privacy.linkage import HistoryRows
from stream_release.errors import NEW_SERIES_CAVEAT
from stream_release.history.types import ENTRY_DTYPE, PSEUDONYM_DTYPE, argsort_pseudonyms

_LINKS_MAX = int(np.iinfo(np.int32).max)


@dataclass(frozen=True, eq=False)
class Commit:
    """A checked commit: arrays in storage dtypes, ``history`` consistent with ``pseudonyms``."""

    sequence: int
    pseudonyms: NDArray[np.bytes_]
    """(n,) S16, distinct."""
    indptr: NDArray[np.int64]
    """(n+1,) int64, entries of pseudonyms[i] are ``entries[indptr[i]:indptr[i+1]]``."""
    entries: NDArray[np.void]
    """(m,) ENTRY_DTYPE."""
    order: NDArray[np.intp]
    """(n,) permutation sorting ``pseudonyms`` ascending (bytewise)."""
    values: tuple[str, ...]
    record: bytes


def check_sequence(sequence: object, name: str = "sequence") -> int:
    """``sequence`` as an int; TypeError unless it is an int (bools and floats refused)."""
    if isinstance(sequence, bool) or not isinstance(sequence, int | np.integer):
        raise TypeError(f"{name} must be an int, not {type(sequence).__name__}")
    return int(sequence)


def check_pseudonyms(pseudonyms: object) -> NDArray[np.bytes_]:
    """``pseudonyms`` as a contiguous ``(n,) S16`` array.

    Accepts a 1-D bytes array of item size <= 16 (numpy infers a shorter size when every
    pseudonym in a list ends with NUL bytes) or a sequence of bytes.
    """
    arr = np.asarray(pseudonyms)
    if arr.ndim != 1:
        raise ValueError(f"pseudonyms must be 1-D, got shape {arr.shape}")
    if arr.size == 0:
        return np.zeros(0, dtype=PSEUDONYM_DTYPE)
    if arr.dtype.kind != "S":
        raise TypeError(f"pseudonyms must be an S16 bytes array, got dtype {arr.dtype}")
    if arr.dtype.itemsize > PSEUDONYM_DTYPE.itemsize:
        raise ValueError(f"pseudonyms must be 16 bytes each (dtype S16), got dtype {arr.dtype}")
    return np.ascontiguousarray(arr, dtype=PSEUDONYM_DTYPE)


def check_values(values: object) -> tuple[str, ...]:
    """The value dictionary: a tuple of distinct str without NUL characters."""
    if isinstance(values, str) or not isinstance(values, tuple | list):
        raise TypeError(f"values must be a tuple of str, not {type(values).__name__}")
    out = tuple(values)
    for i, value in enumerate(out):
        if not isinstance(value, str):
            raise TypeError(f"values[{i}] is a {type(value).__name__}; values must be str")
        if "\x00" in value:
            raise ValueError(f"values[{i}] contains a NUL character, which no store keeps")
    if len(set(out)) != len(out):
        raise ValueError("values must be distinct: the dictionary maps each value to one id")
    return out


def to_entries(history: HistoryRows) -> NDArray[np.void]:
    """The entries of ``history`` packed as ``(m,) ENTRY_DTYPE`` (no checks)."""
    entries = np.empty(history.n_entries, dtype=ENTRY_DTYPE)
    entries["value"] = history.value
    entries["log_p"] = history.log_p
    entries["links"] = history.links
    return entries


def check_commit(
    sequence: object,
    pseudonyms: object,
    history: object,
    values: object,
    record: object,
) -> Commit:
    """Check the arguments of :meth:`HistoryStore.commit`.

    Raises
    ------
    TypeError
        A wrong type (``history`` not a HistoryRows, ``record`` not bytes, ...).
    ValueError
        ``history`` has not one row per pseudonym, a malformed ``indptr``, a value id outside
        ``values``, value ids not strictly ascending within an individual, ``log_p`` NaN or
        > 0, ``links`` < 1; or duplicate pseudonyms.
    """
    seq = check_sequence(sequence)
    ps = check_pseudonyms(pseudonyms)
    vals = check_values(values)
    if not isinstance(history, HistoryRows):
        raise TypeError(f"history must be a HistoryRows, not {type(history).__name__}")
    if not isinstance(record, bytes | bytearray | memoryview):
        raise TypeError(f"record must be bytes, not {type(record).__name__}")
    rows = _checked_rows(history, ps.shape[0], len(vals))
    order = argsort_pseudonyms(ps)
    ordered = ps[order]
    if ps.shape[0] > 1 and np.any(ordered[1:] == ordered[:-1]):
        raise ValueError("pseudonyms holds duplicates: commit each individual once")
    return Commit(seq, ps, rows.indptr, to_entries(rows), order, vals, bytes(record))


def _checked_rows(history: HistoryRows, n: int, n_values: int) -> HistoryRows:
    """``history`` as arrays, checked to hold one row per each of ``n`` pseudonyms
    (:func:`_checked_indptr`) and entries of ids below ``n_values`` (:func:`_check_entries`)."""
    indptr = np.asarray(history.indptr)
    if indptr.shape != (n + 1,):
        raise ValueError(
            f"history.indptr has shape {indptr.shape}; one row per pseudonym needs ({n + 1},)"
        )
    indptr = indptr.astype(np.int64, copy=False)
    m = int(np.asarray(history.value).shape[0]) if np.ndim(history.value) == 1 else -1
    for name in ("value", "log_p", "links"):
        shape = np.shape(getattr(history, name))
        if shape != (m,) or m < 0:
            raise ValueError(f"history.{name} has shape {shape}; expected (m,) like history.value")
    if indptr[0] != 0 or indptr[-1] != m or np.any(np.diff(indptr) < 0):
        raise ValueError(
            f"history.indptr must rise from 0 to the number of entries ({m}) without decreasing"
        )
    rows = HistoryRows(
        indptr,
        np.asarray(history.value),
        np.asarray(history.log_p, dtype=np.float64),
        np.asarray(history.links),
    )
    if m:
        _check_entries(rows, n_values)
    return rows


def _check_entries(rows: HistoryRows, n_values: int) -> None:
    """The (non-empty) entries of ``rows``: integer value ids below ``n_values``, strictly
    ascending within each individual; ``log_p`` <= 0 and never NaN; ``links`` >= 1."""
    value, log_p, links, m = rows.value, rows.log_p, rows.links, rows.value.shape[0]
    if value.dtype.kind not in "iu" or links.dtype.kind not in "iu":
        raise TypeError("history.value and history.links must be integer arrays")
    low, high = int(value.min()), int(value.max())
    if low < 0 or high >= n_values:
        raise ValueError(
            f"history.value holds ids in [{low}, {high}]; ids index values (0..{n_values - 1})"
        )
    if np.isnan(log_p).any() or (log_p > 0).any():
        raise ValueError("history.log_p must be <= 0 (a log of a product of ratios), never NaN")
    low, high = int(links.min()), int(links.max())
    if low < 1 or high > _LINKS_MAX:
        raise ValueError(f"history.links holds counts in [{low}, {high}]; each must be >= 1")
    same_owner = np.ones(m - 1, dtype=bool)
    starts = rows.indptr[1:-1]
    starts = starts[(starts > 0) & (starts < m)]
    same_owner[starts - 1] = False
    if np.any(np.diff(value.astype(np.int64))[same_owner] <= 0):
        raise ValueError("history.value must be strictly ascending within each individual")


MAX_STATE_KEY_BYTES = 512
"""Longest mechanism state key (the Redis key name holds it in hex)."""


def check_state(state: object) -> dict[bytes, bytes]:
    """Check the ``state`` argument of :meth:`HistoryStore.commit`: a mapping of non-empty
    byte keys (at most :data:`MAX_STATE_KEY_BYTES`) to byte values; ``None`` is no state.

    Raises
    ------
    TypeError
        Not a mapping, or a key or value that is not bytes.
    ValueError
        An empty or too long key.
    """
    if state is None:
        return {}
    if not isinstance(state, Mapping):
        raise TypeError(f"state must be a mapping of bytes to bytes, not {type(state).__name__}")
    out: dict[bytes, bytes] = {}
    for key, value in state.items():
        if not isinstance(key, bytes | bytearray) or not isinstance(value, bytes | bytearray):
            raise TypeError(
                "state maps bytes to bytes; got a "
                f"{type(key).__name__} key with a {type(value).__name__} value"
            )
        if not 0 < len(key) <= MAX_STATE_KEY_BYTES:
            raise ValueError(
                f"a state key has {len(key)} bytes; keys need 1 to {MAX_STATE_KEY_BYTES} bytes"
            )
        out[bytes(key)] = bytes(value)
    return out


def check_state_keys(keys: object) -> list[bytes]:
    """Check the ``keys`` argument of :meth:`HistoryStore.load_state` (as in
    :func:`check_state`); returns them as a list of bytes, in order."""
    if isinstance(keys, bytes | bytearray | str) or not isinstance(keys, Sequence):
        raise TypeError(f"keys must be a sequence of bytes keys, not {type(keys).__name__}")
    out = []
    for key in keys:
        if not isinstance(key, bytes | bytearray):
            raise TypeError(f"a state key must be bytes, not {type(key).__name__}")
        if not 0 < len(key) <= MAX_STATE_KEY_BYTES:
            raise ValueError(
                f"a state key has {len(key)} bytes; keys need 1 to {MAX_STATE_KEY_BYTES} bytes"
            )
        out.append(bytes(key))
    return out


def decode_entries(data: bytes, lengths: NDArray[np.int64]) -> HistoryRows:
    """HistoryRows from the concatenated packed entries of n individuals.

    ``lengths[i]`` is the number of entries of individual i; ``data`` their ENTRY_DTYPE bytes.
    """
    entries = np.frombuffer(data, dtype=ENTRY_DTYPE)
    indptr = np.zeros(lengths.shape[0] + 1, dtype=np.int64)
    np.cumsum(lengths, out=indptr[1:])
    return HistoryRows(
        indptr,
        entries["value"].astype(np.int32),
        entries["log_p"].astype(np.float64),
        entries["links"].astype(np.int32),
    )


KEY_CHECK_BYTES = 16
"""Length of a pseudonymisation key's check value (:meth:`Pseudonymizer.key_check`)."""


def check_key_check(key_check: object) -> bytes | None:
    """The ``key_check`` argument of a commit: None or :data:`KEY_CHECK_BYTES` bytes."""
    if key_check is None:
        return None
    if not isinstance(key_check, bytes | bytearray) or len(key_check) != KEY_CHECK_BYTES:
        raise ValueError(f"key_check must be {KEY_CHECK_BYTES} bytes or None")
    return bytes(key_check)


def key_mismatch_message(store: str) -> str:
    """The one line of :class:`~stream_release.errors.KeyMismatch` for ``store``."""
    return (
        f"the history in {store} was written under another pseudonymisation key (its recorded "
        "key check value differs): opening it under this key would start every history "
        "afresh and void the guarantee. Use the key the series was started with "
        "(history.key_file, SR_HISTORY_KEY, or the pseudonym.key of its private directory), "
        f"or start a new series (another history location or history.prefix): "
        f"{NEW_SERIES_CAVEAT}"
    )
