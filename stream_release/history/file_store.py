"""The history in a local directory: a head file, immutable sorted segments, one file per
release record.

Layout of ``directory``::

    head.npz                       the commit point, arrays:
        format      () int64         2
        sequence    () int64         last committed release (absent file = 0)
        segments    (S,) unicode     the segment directories in effect, oldest first
        segment_rows, segment_entries (S,) int64   their sizes (checked against the files)
        values      (V,) unicode     the value dictionary, index = global value id
        state_keys, state_values   (B,) uint8   the mechanism state entries: entry i is key
        state_key_ptr, state_value_ptr (S+1,)   ``state_keys[state_key_ptr[i]:state_key_ptr[i+1]]``
                                   int64        with the matching slice of ``state_values``,
                                                keys strictly ascending bytewise
        key_check   (16,) uint8      keyed check value of the pseudonymisation key the history
                                     was written under (optional: absent until recorded)
    segments/00000001-00000004/    the rows committed by releases 1..4 that no later segment
                                   replaces (:mod:`stream_release.history._segments`)
    segments/00000005-00000005/    ... newer segments replace older rows of the same individual
    records/release-00000001.bin   the record of release 1, ...
    .lock                          flock(2) target serialising commits of several processes

An individual's history is its row in the newest segment holding it. A commit writes the
release's record, then the release's rows as a new segment (O(n log n) for its n
individuals, whatever the history holds), merged with the newest segments while the next
older holds at most twice their rows (:data:`MERGE_RATIO`: O(log N) segments for N
individuals stored, each row rewritten O(log N) times: amortised O(n log N) per release,
one compiled k-way pass per commit), then writes the new
head to a temporary file, fsyncs it, renames it over ``head.npz`` and fsyncs the directory.
The head is the commit point: segments and records it does not name belong to a commit that
did not happen or were merged away, are never read, and are deleted by the next commit. A
crash therefore leaves either the old or the new history, never a mixture.

A load reads each segment, newest first, a chunk at a time for the individuals not found in
a newer one: O(n log n + N) for N individuals stored (the sequential read of their
pseudonyms) with memory bounded by the release and the chunk. Nothing holds the whole
history in memory: the memory of a commit or a load does not grow with the series.

A directory written before segments existed holds the whole history in one ``history.npz``
(the head's arrays plus ``pseudonyms``, ``indptr``, ``value``, ``log_p`` and ``links``). It is
read as it is; its next commit writes that history as the first segment and removes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import zipfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
from numpy.typing import NDArray

from stream_release.core.privacy.linkage import HistoryRows, gather_rows
from stream_release.errors import HistoryStoreError, KeyMismatch, SequenceConflict
from stream_release.history._csr import pseudonym_words
from stream_release.history._segments import (
    Rows,
    Segment,
    entries_of,
    merge_segments,
    segment_name,
    write_segment,
)
from stream_release.history._validate import (
    check_commit,
    check_key_check,
    check_pseudonyms,
    check_sequence,
    check_state,
    check_state_keys,
    key_mismatch_message,
)
from stream_release.history.types import ENTRY_DTYPE, PSEUDONYM_DTYPE, argsort_pseudonyms

__all__ = ["HEAD_FILE", "LEGACY_FILE", "RECORDS_DIR", "SEGMENTS_DIR", "FileHistoryStore"]

HEAD_FILE = "head.npz"
LEGACY_FILE = "history.npz"
SEGMENTS_DIR = "segments"
RECORDS_DIR = "records"
FORMAT = 2
MERGE_RATIO = 2
"""The newest segments merge while the next older one holds at most this many times their
rows: every segment left holds more than twice the rows of the next newer one, so there are
O(log N) segments for N individuals stored however the releases' sizes vary (with a ratio
of 1, releases shrinking by one row each would never merge)."""
_LOCK_FILE = ".lock"
_HEAD_ARRAYS = ("format", "sequence", "segments", "segment_rows", "segment_entries", "values")
_LEGACY_ARRAYS = ("sequence", "pseudonyms", "indptr", "value", "log_p", "links", "values")
_STATE_ARRAYS = ("state_keys", "state_key_ptr", "state_values", "state_value_ptr")


@dataclass(frozen=True, eq=False)
class _Head:
    """The committed state: what ``head.npz`` (or a ``history.npz``) says."""

    sequence: int
    segments: tuple[Segment, ...]
    """Oldest first."""
    values: tuple[str, ...]
    state: dict[bytes, bytes] = field(default_factory=dict)
    """The mechanism state entries (byte key -> byte value)."""
    key_check: bytes | None = None
    """The keyed check value of the pseudonymisation key (None: not recorded yet)."""
    legacy: Rows | None = None
    """The whole history of a store written before segments (then ``segments`` is empty)."""

    @classmethod
    def empty(cls) -> _Head:
        return cls(0, (), ())


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
        self._head_path = self._dir / HEAD_FILE
        self._legacy_path = self._dir / LEGACY_FILE
        self._segments_dir = self._dir / SEGMENTS_DIR
        self._cache: tuple[tuple[object, ...], _Head] | None = None

    def __repr__(self) -> str:
        return f"FileHistoryStore({str(self._dir)!r})"

    @property
    def directory(self) -> Path:
        return self._dir

    # -- reads -------------------------------------------------------------------------------

    def last_sequence(self) -> int:
        """Sequence number of the last committed release; 0 before the first."""
        return self._head().sequence

    def values(self) -> tuple[str, ...]:
        """The append-only value dictionary (index = global value id)."""
        return self._head().values

    def record(self, sequence: int) -> bytes | None:
        """The record committed with ``sequence``; None if that release is not committed."""
        seq = check_sequence(sequence)
        if seq < 1 or seq > self._head().sequence:
            return None
        path = self._record_path(seq)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise HistoryStoreError(f"cannot read release record {str(path)!r}: {exc}") from exc

    def load(self, pseudonyms: NDArray[np.bytes_]) -> HistoryRows:
        """History of ``pseudonyms`` (n,) S16, row i for ``pseudonyms[i]`` (empty if unknown).

        A segment that vanished under the read (a commit of another process merged it away)
        makes the load start again from the new head, as long as commits keep coming.
        """
        ps = check_pseudonyms(pseudonyms)
        head = self._head()
        while True:
            try:
                return _load(head, ps)
            except FileNotFoundError:
                self._cache = None
                fresh = self._head()
                if fresh.sequence == head.sequence:
                    raise HistoryStoreError(
                        f"a segment of the history {str(self._dir)!r} named by its head is "
                        "missing: the store is corrupt"
                    ) from None
                head = fresh  # commits merged the segments away: read the new head's
            except OSError as exc:
                raise HistoryStoreError(
                    f"cannot read the history {str(self._dir)!r}: {exc}"
                ) from exc

    def load_state(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The committed mechanism state entry of each key (``None``: never written)."""
        state = self._head().state
        return [state.get(key) for key in check_state_keys(keys)]

    def key_check(self) -> bytes | None:
        """The check value of the key the history was written under (None: not recorded)."""
        return self._head().key_check

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
        ``head.npz``, so it commits with the release. ``key_check`` (the pseudonymisation
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
            self._segments_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise HistoryStoreError(
                f"cannot create the history directory {str(self._dir)!r}: {exc}"
            ) from exc
        with self._locked():
            stored = self._head()
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
            self._write_atomic(self._record_path(c.sequence), lambda f: f.write(c.record))
            try:
                segments = self._write_segments(stored, c.sequence, c.pseudonyms, c.order,
                                                c.indptr, c.entries)  # fmt: skip
            except OSError as exc:
                raise HistoryStoreError(
                    f"cannot write the history segments in {str(self._segments_dir)!r}: "
                    f"{exc}; the history is unchanged"
                ) from exc
            states = {**stored.state, **new_entries} if new_entries else stored.state
            recorded = stored.key_check if stored.key_check is not None else check
            new_head = _Head(c.sequence, segments, c.values, states, recorded)
            self._write_atomic(self._head_path, lambda f: _save_head(f, new_head))
            self._fsync_dir(self._dir)
            self._remember(new_head)
            self._remove_unused(new_head)

    def close(self) -> None:
        """Forget the cached head."""
        self._cache = None

    # -- segments ----------------------------------------------------------------------------

    def _write_segments(
        self,
        stored: _Head,
        sequence: int,
        pseudonyms: NDArray[np.bytes_],
        order: NDArray[np.intp],
        indptr: NDArray[np.int64],
        entries: NDArray[np.void],
    ) -> tuple[Segment, ...]:
        """The segments after release ``sequence``, written and synced (none of them is named
        by a committed head; the head is the caller's).

        The release's rows (in pseudonym ``order``) go on top of the stored segments, and the
        newest ones are merged into one segment while the next older holds at most
        :data:`MERGE_RATIO` times the rows merged so far: one pass over the merged segments
        (and, when the store has a ``history.npz``, its whole history is the oldest
        segment)."""
        counts = np.diff(indptr)[order]
        new_indptr = np.zeros(order.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=new_indptr[1:])
        release = Rows(
            pseudonyms[order], new_indptr, gather_rows(entries, indptr[:-1][order], counts)[1]
        )
        levels: list[Segment | Rows] = list(stored.segments)
        firsts = [int(segment.path.name.split("-")[0]) for segment in stored.segments]
        if stored.legacy is not None and stored.legacy.rows:
            levels, firsts = [stored.legacy], [1]
        levels.append(release)
        firsts.append(sequence)
        start, size = len(levels) - 1, release.rows
        while start > 0 and levels[start - 1].rows <= MERGE_RATIO * size:
            start -= 1
            size += levels[start].rows
        kept = [
            write_segment(self._segments_dir / segment_name(1, stored.sequence), level)
            if isinstance(level, Rows)  # a history.npz not merged now
            else level
            for level in levels[:start]
        ]
        merged = merge_segments(
            levels[start:],
            self._segments_dir / segment_name(firsts[start], sequence),
            oldest=start == 0,
        )
        self._fsync_dir(self._segments_dir)
        self._fsync_dir(self._dir)  # the first commit created segments/ (and records/)
        self._fsync_dir(self._record_path(sequence).parent)
        return (*kept, merged)

    def _remove_unused(self, head: _Head) -> None:
        """Delete what ``head`` does not name: merged-away segments, leftovers of commits that
        did not happen, a ``history.npz`` converted to segments. A failure only leaves
        garbage, which the next commit tries again."""
        named = {segment.path.name for segment in head.segments}
        with contextlib.suppress(OSError):
            for path in self._segments_dir.iterdir():
                if path.name not in named:
                    shutil.rmtree(path, ignore_errors=True)
        with contextlib.suppress(OSError):
            self._legacy_path.unlink(missing_ok=True)

    # -- files -------------------------------------------------------------------------------

    def _record_path(self, sequence: int) -> Path:
        return self._dir / RECORDS_DIR / f"release-{sequence:08d}.bin"

    def _stamp(self) -> tuple[object, ...] | None:
        """Identity of the committed files (head, else a ``history.npz``); None if neither."""
        for path in (self._head_path, self._legacy_path):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise HistoryStoreError(f"cannot read the history {str(path)!r}: {exc}") from exc
            return (path.name, st.st_ino, st.st_mtime_ns, st.st_size)
        if self._head_path.exists():  # a commit converted history.npz between the two stats
            return self._stamp()
        return None

    def _head(self) -> _Head:
        """The committed head, from the cache unless the files changed on disk."""
        stamp = self._stamp()
        if stamp is None:
            self._cache = None
            return _Head.empty()
        if self._cache is not None and self._cache[0] == stamp:
            return self._cache[1]
        if stamp[0] == HEAD_FILE:
            head = self._read_head()
        else:
            try:
                head = self._read_legacy()
            except HistoryStoreError:
                if self._head_path.exists():  # a commit converted it while it was read
                    return self._head()
                raise
        self._cache = (stamp, head)
        return head

    def _remember(self, head: _Head) -> None:
        try:
            stamp = self._stamp()
        except HistoryStoreError:
            stamp = None
        self._cache = None if stamp is None else (stamp, head)

    def _read_npz(
        self, path: Path, names: tuple[str, ...]
    ) -> tuple[dict[str, NDArray[Any]], dict[bytes, bytes], bytes | None]:
        """The arrays ``names`` of ``path``, its mechanism state and its key check."""
        try:
            with np.load(path, allow_pickle=False) as npz:
                missing = [name for name in names if name not in npz.files]
                if missing:
                    raise HistoryStoreError(
                        f"the history {str(path)!r} lacks arrays {missing}: the store is corrupt"
                    )
                arrays = {name: npz[name] for name in names}
                stored = [name for name in _STATE_ARRAYS if name in npz.files]
                if stored and len(stored) != len(_STATE_ARRAYS):
                    raise HistoryStoreError(
                        f"the history {str(path)!r} has some mechanism state arrays but "
                        f"not all of {list(_STATE_ARRAYS)}: the store is corrupt"
                    )
                state = _unpack_state(*(npz[name] for name in stored)) if stored else {}
                key_check = npz["key_check"].tobytes() if "key_check" in npz.files else None
        except HistoryStoreError:
            raise
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            raise HistoryStoreError(f"cannot read the history {str(path)!r}: {exc}") from exc
        return arrays, state, key_check

    def _read_head(self) -> _Head:
        arrays, state, key_check = self._read_npz(self._head_path, _HEAD_ARRAYS)
        if int(arrays["format"]) != FORMAT:
            raise HistoryStoreError(
                f"the history {str(self._head_path)!r} has format {int(arrays['format'])}; "
                f"this version reads format {FORMAT}: use the version that wrote it"
            )
        names = arrays["segments"].tolist()
        rows, entries = arrays["segment_rows"].tolist(), arrays["segment_entries"].tolist()
        if not len(names) == len(rows) == len(entries):
            raise HistoryStoreError(
                f"the history {str(self._head_path)!r} lists {len(names)} segments with "
                f"{len(rows)} sizes: the store is corrupt"
            )
        segments = tuple(
            Segment(self._segments_dir / name, int(r), int(e))
            for name, r, e in zip(names, rows, entries, strict=True)
        )
        return _Head(
            int(arrays["sequence"]),
            segments,
            tuple(arrays["values"].tolist()),
            state,
            key_check,
        )

    def _read_legacy(self) -> _Head:
        arrays, state, key_check = self._read_npz(self._legacy_path, _LEGACY_ARRAYS)
        indptr = arrays["indptr"].astype(np.int64, copy=False)
        n, m = arrays["pseudonyms"].shape[0], arrays["value"].shape[0]
        if indptr.shape != (n + 1,) or indptr[-1] != m or arrays["log_p"].shape != (m,):
            raise HistoryStoreError(
                f"the history {str(self._legacy_path)!r} has inconsistent array shapes: "
                "the store is corrupt"
            )
        entries = np.empty(m, dtype=ENTRY_DTYPE)
        entries["value"] = arrays["value"]
        entries["log_p"] = arrays["log_p"]
        entries["links"] = arrays["links"]
        legacy = Rows(
            np.ascontiguousarray(arrays["pseudonyms"], dtype=PSEUDONYM_DTYPE), indptr, entries
        )
        return _Head(
            int(arrays["sequence"]),
            (),
            tuple(arrays["values"].tolist()),
            state,
            key_check,
            legacy,
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


def _save_head(f: BinaryIO, head: _Head) -> None:
    # Any: np.savez's keywords also include ``allow_pickle: bool``
    arrays: dict[str, Any] = _pack_state(head.state)
    if head.key_check is not None:
        arrays["key_check"] = np.frombuffer(head.key_check, dtype=np.uint8)
    names = [segment.path.name for segment in head.segments]
    arrays |= {
        "format": np.int64(FORMAT),
        "sequence": np.int64(head.sequence),
        "segments": np.array(names, dtype=str) if names else np.zeros(0, dtype="U1"),
        "segment_rows": np.array([s.rows for s in head.segments], dtype=np.int64),
        "segment_entries": np.array([s.entries for s in head.segments], dtype=np.int64),
        "values": np.array(head.values, dtype=str) if head.values else np.zeros(0, dtype="U1"),
    }
    np.savez(f, **arrays)


def _load(head: _Head, pseudonyms: NDArray[np.bytes_]) -> HistoryRows:
    """History of ``pseudonyms`` under ``head``: their distinct pseudonyms in order are looked
    up in each segment, newest first, until found (a ``history.npz`` store: in its rows)."""
    n = pseudonyms.shape[0]
    sources: list[Segment | Rows] = list(reversed(head.segments))
    if head.legacy is not None:
        sources.append(head.legacy)
    if n == 0 or not sources:
        return HistoryRows.empty(n)
    order = argsort_pseudonyms(pseudonyms)
    words = pseudonym_words(pseudonyms[order])
    first = np.ones(n, dtype=bool)
    first[1:] = np.any(words[1:] != words[:-1], axis=1)
    distinct = words[first]
    slot = np.empty(n, dtype=np.int64)
    slot[order] = np.cumsum(first) - 1  # input row -> its distinct pseudonym
    starts = np.zeros(distinct.shape[0], dtype=np.int64)
    counts = np.zeros(distinct.shape[0], dtype=np.int64)
    pool: list[NDArray[np.uint64]] = []
    offset = 0
    todo = np.arange(distinct.shape[0])
    for source in sources:
        if todo.shape[0] == 0:
            break
        hit, found_counts, found = source.lookup(distinct[todo])
        at = todo[hit]
        counts[at] = found_counts
        starts[at] = offset + np.cumsum(found_counts) - found_counts
        pool.append(found)
        offset += found.shape[0]
        todo = todo[~hit]
    entries = entries_of(np.concatenate(pool)) if pool else np.zeros(0, ENTRY_DTYPE)
    indptr, rows = gather_rows(entries, starts[slot], counts[slot])
    return HistoryRows(
        indptr,
        rows["value"].astype(np.int32),
        rows["log_p"].astype(np.float64),
        rows["links"].astype(np.int32),
    )
