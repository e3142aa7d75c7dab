"""The history in a local directory: one ``history.npz`` plus one file per release record.

Layout of ``directory``::

    history.npz                    the whole history and the commit point, arrays:
        sequence    () int64         last committed release (absent file = 0)
        pseudonyms  (N,) S16         every individual with history, strictly ascending bytewise
        indptr      (N+1,) int64     entries of pseudonyms[i] are [indptr[i], indptr[i+1])
        value       (M,) uint32      global value id, ascending within an individual
        log_p       (M,) float64     log of the running product P(o, s), <= 0 (-inf allowed)
        links       (M,) uint32      releases that linked o to s
        values      (V,) unicode     the value dictionary, index = global value id
        state_keys, state_values   (B,) uint8   the mechanism state entries (optional: absent
        state_key_ptr, state_value_ptr (S+1,)   in a store written before they existed = no
                                   int64        state): entry i is key
                                                ``state_keys[state_key_ptr[i]:state_key_ptr[i+1]]``
                                                with the matching slice of ``state_values``,
                                                keys strictly ascending bytewise
        key_check   (16,) uint8      keyed check value of the pseudonymisation key the history
                                     was written under (optional: absent in a store written
                                     before it existed; recorded by the next commit)
    records/release-00000001.bin   the record of release 1, ...
    .lock                          flock(2) target serialising commits of several processes

A commit writes the record file first (temporary file, fsync, rename), then the new history
(with the mechanism state entries of :meth:`FileHistoryStore.load_state`) to a temporary
file, fsyncs it, renames it over ``history.npz`` and fsyncs the directory. The sequence
inside ``history.npz`` is the commit point: a record file whose sequence is above it belongs
to a commit that did not happen, is never returned by :meth:`FileHistoryStore.record` and is
overwritten by the next commit of that sequence. A crash therefore leaves either the
old or the new history, never a mixture.

Loads and commits are vectorised (sorted-array lookups with ``np.searchsorted``, CSR gathers
with ``np.repeat``/``cumsum``): no Python loop runs per individual or per entry. The parsed
history stays cached in memory and is re-read only when ``history.npz`` changes on disk.

Cost: a load of n individuals is O(n log n + n log N); a commit rewrites the whole file,
O(n log n + N + M) for N individuals and M entries stored. On a churn series N grows with
every release (everyone ever seen keeps a history), so a commit, and the memory the store
holds, grow with the series' length where the Redis store's do not
(:class:`~stream_release.history.redis_store.RedisHistoryStore` writes only the release's
individuals).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import NDArray

from stream_release.errors import HistoryStoreError, KeyMismatch, SequenceConflict
from stream_release.history._csr import gather_rows, lookup_pseudonyms, merge_rows
from stream_release.history._validate import (
    check_commit,
    check_key_check,
    check_pseudonyms,
    check_sequence,
    check_state,
    check_state_keys,
    key_mismatch_message,
)
from stream_release.history.types import ENTRY_DTYPE, PSEUDONYM_DTYPE, HistoryRows

__all__ = ["HISTORY_FILE", "RECORDS_DIR", "FileHistoryStore"]

HISTORY_FILE = "history.npz"
RECORDS_DIR = "records"
_LOCK_FILE = ".lock"
_ARRAYS = ("sequence", "pseudonyms", "indptr", "value", "log_p", "links", "values")
_STATE_ARRAYS = ("state_keys", "state_key_ptr", "state_values", "state_value_ptr")


@dataclass(frozen=True, eq=False)
class _State:
    """The parsed ``history.npz``.

    Entries of ``pseudonyms[i]`` are ``entries[indptr[i]:indptr[i+1]]``.
    """

    sequence: int
    pseudonyms: NDArray[np.bytes_]
    indptr: NDArray[np.int64]
    entries: NDArray[np.void]
    values: tuple[str, ...]
    state: dict[bytes, bytes] = field(default_factory=dict)
    """The mechanism state entries (byte key -> byte value)."""
    key_check: bytes | None = None
    """The keyed check value of the pseudonymisation key (None: not recorded yet)."""

    @classmethod
    def empty(cls) -> _State:
        return cls(
            0,
            np.zeros(0, PSEUDONYM_DTYPE),
            np.zeros(1, np.int64),
            np.zeros(0, ENTRY_DTYPE),
            (),
        )


class FileHistoryStore:
    """:class:`~stream_release.history.types.HistoryStore` in a local directory.

    Parameters
    ----------
    directory : Path
        Where the history lives; created by the first commit. A missing or empty directory is
        an empty store (sequence 0).
    """

    def __init__(self, directory: Path) -> None:
        self._dir = Path(directory)
        self._path = self._dir / HISTORY_FILE
        self._cache: tuple[tuple[int, int, int], _State] | None = None

    def __repr__(self) -> str:
        return f"FileHistoryStore({str(self._dir)!r})"

    @property
    def directory(self) -> Path:
        return self._dir

    # -- reads -------------------------------------------------------------------------------

    def last_sequence(self) -> int:
        """Sequence number of the last committed release; 0 before the first."""
        return self._state().sequence

    def values(self) -> tuple[str, ...]:
        """The append-only value dictionary (index = global value id)."""
        return self._state().values

    def record(self, sequence: int) -> bytes | None:
        """The record committed with ``sequence``; None if that release is not committed."""
        seq = check_sequence(sequence)
        if seq < 1 or seq > self._state().sequence:
            return None
        path = self._record_path(seq)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HistoryStoreError(f"cannot read release record {str(path)!r}: {exc}") from exc

    def load(self, pseudonyms: NDArray[np.bytes_]) -> HistoryRows:
        """History of ``pseudonyms`` (n,) S16, row i for ``pseudonyms[i]`` (empty if unknown)."""
        ps = check_pseudonyms(pseudonyms)
        state = self._state()
        where = lookup_pseudonyms(state.pseudonyms, ps)
        found = where >= 0
        starts = state.indptr[np.where(found, where, 0)]
        counts = state.indptr[np.where(found, where + 1, 0)] - starts
        indptr, entries = gather_rows(state.entries, starts, counts)
        return HistoryRows(
            indptr,
            entries["value"].astype(np.int32),
            entries["log_p"].astype(np.float64),
            entries["links"].astype(np.int32),
        )

    def load_state(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The committed mechanism state entry of each key (``None``: never written)."""
        state = self._state().state
        return [state.get(key) for key in check_state_keys(keys)]

    def key_check(self) -> bytes | None:
        """The check value of the key the history was written under (None: not recorded)."""
        return self._state().key_check

    # -- the commit --------------------------------------------------------------------------

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
        """Atomically store release ``sequence`` (see the module docstring for how).

        ``label`` is refused: staging for the streaming service lives in Redis only.
        ``state`` (mechanism state entries, byte key -> byte value) is written into the same
        ``history.npz``, so it commits with the release. ``key_check`` (the pseudonymisation
        key's check value) is recorded when the store has none yet.

        Raises
        ------
        SequenceConflict
            ``sequence`` is not ``last_sequence() + 1`` or the stored dictionary is not a
            prefix of ``values``; nothing is changed.
        KeyMismatch
            The store recorded another ``key_check``; nothing is changed.
        HistoryStoreError
            The directory or a file cannot be written; the history is unchanged.
        TypeError, ValueError
            Malformed arguments (see :func:`~stream_release.history._validate.check_commit`).
        """
        if label is not None:
            raise ValueError(
                f"label = {label!r}: the file history store has no staging; the streaming "
                "service needs a redis:// history"
            )
        c = check_commit(sequence, pseudonyms, history, values, record)
        new_entries = check_state(state)
        check = check_key_check(key_check)
        try:
            self._dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HistoryStoreError(
                f"cannot create the history directory {str(self._dir)!r}: {exc}"
            ) from exc
        with self._locked():
            stored = self._state()
            if c.sequence != stored.sequence + 1:
                raise SequenceConflict(
                    f"commit of release {c.sequence} refused: the last committed release in "
                    f"{str(self._dir)!r} is {stored.sequence}, so the next must be "
                    f"{stored.sequence + 1}"
                )
            if c.values[: len(stored.values)] != stored.values:
                raise SequenceConflict(
                    f"commit of release {c.sequence} refused: the stored value dictionary "
                    f"({len(stored.values)} values) is not a prefix of the given one "
                    f"({len(c.values)} values); reload the dictionary and plan the release again"
                )
            if check is not None and stored.key_check not in (None, check):
                raise KeyMismatch(key_mismatch_message(repr(self)))
            # The given individuals in pseudonym order, as a CSR over c.entries.
            new_ps = c.pseudonyms[c.order]
            new_starts = c.indptr[:-1][c.order]
            new_counts = np.diff(c.indptr)[c.order]
            merged = merge_rows(
                stored.pseudonyms,
                stored.indptr,
                stored.entries,
                new_ps,
                new_starts,
                new_counts,
                c.entries,
            )
            states = {**stored.state, **new_entries} if new_entries else stored.state
            recorded = stored.key_check if stored.key_check is not None else check
            new_state = _State(c.sequence, *merged, c.values, states, recorded)
            self._write_atomic(self._record_path(c.sequence), lambda f: f.write(c.record))
            self._write_atomic(self._path, lambda f: _save(f, new_state))
            self._fsync_dir(self._dir)
            self._remember(new_state)

    def close(self) -> None:
        """Drop the in-memory copy of the history."""
        self._cache = None

    # -- files -------------------------------------------------------------------------------

    def _record_path(self, sequence: int) -> Path:
        return self._dir / RECORDS_DIR / f"release-{sequence:08d}.bin"

    def _state(self) -> _State:
        """The committed history, from the cache unless ``history.npz`` changed on disk."""
        try:
            st = self._path.stat()
        except FileNotFoundError:
            self._cache = None
            return _State.empty()
        except OSError as exc:
            raise HistoryStoreError(f"cannot read the history {str(self._path)!r}: {exc}") from exc
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._cache is not None and self._cache[0] == stamp:
            return self._cache[1]
        state = self._read()
        self._cache = (stamp, state)
        return state

    def _remember(self, state: _State) -> None:
        try:
            st = self._path.stat()
        except OSError:
            self._cache = None
            return
        self._cache = ((st.st_ino, st.st_mtime_ns, st.st_size), state)

    def _read(self) -> _State:
        try:
            with np.load(self._path, allow_pickle=False) as npz:
                missing = [name for name in _ARRAYS if name not in npz.files]
                if missing:
                    raise HistoryStoreError(
                        f"the history {str(self._path)!r} lacks arrays {missing}: "
                        "the store is corrupt"
                    )
                arrays = {name: npz[name] for name in _ARRAYS}
                stored = [name for name in _STATE_ARRAYS if name in npz.files]
                if stored and len(stored) != len(_STATE_ARRAYS):
                    raise HistoryStoreError(
                        f"the history {str(self._path)!r} has some mechanism state arrays but "
                        f"not all of {list(_STATE_ARRAYS)}: the store is corrupt"
                    )
                state = _unpack_state(*(npz[name] for name in stored)) if stored else {}
                key_check = npz["key_check"].tobytes() if "key_check" in npz.files else None
        except HistoryStoreError:
            raise
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise HistoryStoreError(f"cannot read the history {str(self._path)!r}: {exc}") from exc
        indptr = arrays["indptr"].astype(np.int64, copy=False)
        n, m = arrays["pseudonyms"].shape[0], arrays["value"].shape[0]
        if indptr.shape != (n + 1,) or indptr[-1] != m or arrays["log_p"].shape != (m,):
            raise HistoryStoreError(
                f"the history {str(self._path)!r} has inconsistent array shapes: "
                "the store is corrupt"
            )
        entries = np.empty(m, dtype=ENTRY_DTYPE)
        entries["value"] = arrays["value"]
        entries["log_p"] = arrays["log_p"]
        entries["links"] = arrays["links"]
        return _State(
            int(arrays["sequence"]),
            np.ascontiguousarray(arrays["pseudonyms"], dtype=PSEUDONYM_DTYPE),
            indptr,
            entries,
            tuple(arrays["values"].tolist()),
            state,
            key_check,
        )

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        path = self._dir / _LOCK_FILE
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise HistoryStoreError(f"cannot open the lock file {str(path)!r}: {exc}") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _write_atomic(self, path: Path, write: Callable[[BinaryIO], object]) -> None:
        """Write ``path`` through a temporary file in its directory, fsync, rename."""
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(tmp, "wb") as f:
                write(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            raise HistoryStoreError(
                f"cannot write {str(path)!r}: {exc}; the history is unchanged"
            ) from exc

    @staticmethod
    def _fsync_dir(directory: Path) -> None:
        try:
            fd = os.open(directory, os.O_RDONLY)
        except OSError as exc:
            raise HistoryStoreError(f"cannot sync the directory {str(directory)!r}: {exc}") from exc
        try:
            os.fsync(fd)
        except OSError as exc:
            raise HistoryStoreError(f"cannot sync the directory {str(directory)!r}: {exc}") from exc
        finally:
            os.close(fd)


def _pack_state(
    state: dict[bytes, bytes],
) -> dict[str, NDArray[np.uint8] | NDArray[np.int64]]:
    """The ``state_*`` arrays of ``history.npz`` (keys ascending bytewise)."""
    keys = sorted(state)
    out: dict[str, NDArray[np.uint8] | NDArray[np.int64]] = {}
    for name, parts in (("key", keys), ("value", [state[k] for k in keys])):
        ptr = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=ptr[1:])
        out[f"state_{name}s"] = np.frombuffer(b"".join(parts), dtype=np.uint8)
        out[f"state_{name}_ptr"] = ptr
    return out


def _unpack_state(
    keys: NDArray[np.uint8],
    key_ptr: NDArray[np.int64],
    values: NDArray[np.uint8],
    value_ptr: NDArray[np.int64],
) -> dict[bytes, bytes]:
    """Inverse of :func:`_pack_state`."""
    kb, vb = keys.tobytes(), values.tobytes()
    kp, vp = key_ptr.tolist(), value_ptr.tolist()
    if len(kp) != len(vp) or (kp and (kp[-1] != len(kb) or vp[-1] != len(vb))):
        raise HistoryStoreError("the mechanism state arrays of the history are inconsistent")
    return {kb[kp[i] : kp[i + 1]]: vb[vp[i] : vp[i + 1]] for i in range(len(kp) - 1)}


def _save(f: BinaryIO, state: _State) -> None:
    # Any: np.savez's keywords also include ``allow_pickle: bool``
    arrays: dict[str, Any] = _pack_state(state.state)
    if state.key_check is not None:
        arrays["key_check"] = np.frombuffer(state.key_check, dtype=np.uint8)
    arrays |= {
        "sequence": np.int64(state.sequence),
        "pseudonyms": state.pseudonyms,
        "indptr": state.indptr,
        "value": state.entries["value"],
        "log_p": state.entries["log_p"],
        "links": state.entries["links"],
        "values": np.array(state.values, dtype=str) if state.values else np.zeros(0, dtype="U1"),
    }
    np.savez(f, **arrays)
