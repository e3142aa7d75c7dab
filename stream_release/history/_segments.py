"""Immutable sorted history segments on disk, read and merged a chunk at a time.

A segment is a directory of three raw little-endian arrays::

    pseudonyms.bin   (n,) S16            strictly ascending bytewise
    indptr.bin       (n+1,) int64        entries of pseudonyms[i]: [indptr[i], indptr[i+1])
    entries.bin      (m,) ENTRY_DTYPE    (value, log_p, links), 16 bytes each

An individual's row may be empty: in a segment above the oldest one, an empty row replaces
the individual's rows in older segments (a *tombstone*); the oldest segment holds none.

Nothing here holds a whole segment in memory: :meth:`Segment.lookup` and
:func:`merge_segments` read :data:`CHUNK_ROWS` pseudonyms at a time (and the indptr and entry
ranges those rows need), so the memory a load or a merge takes is bounded by the chunk and
the release, not by the history on disk. Reads go through the page cache with ``readinto``
into arrays the process owns and frees, not through a mapping that would stay resident.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import numpy as np
from numba import njit
from numpy.typing import NDArray

from stream_release.errors import HistoryStoreError
from stream_release.history._csr import find_from, find_sorted, pseudonym_words
from stream_release.history.types import ENTRY_DTYPE, PSEUDONYM_DTYPE

__all__ = ["CHUNK_ROWS", "Rows", "Segment", "merge_segments", "segment_name", "write_segment"]

CHUNK_ROWS = 1 << 18
"""Pseudonyms read at a time (4 MiB, with their indptr 2 MiB and their entries)."""

_PSEUDONYMS, _INDPTR, _ENTRIES = "pseudonyms.bin", "indptr.bin", "entries.bin"
_INDPTR_DTYPE = np.dtype("<i8")
_RAW = np.dtype(np.uint64)
"""Pseudonyms and entries are both 16 bytes: the compiled passes move them as two words."""


def segment_name(first: int, last: int) -> str:
    """The directory name of the segment holding the commits of releases ``first..last``."""
    return f"{first:08d}-{last:08d}"


def entries_of(raw: NDArray[np.uint64]) -> NDArray[np.void]:
    """(m, 2) uint64 entries as the (m,) ENTRY_DTYPE array of the same bytes."""
    return np.ascontiguousarray(raw).view(ENTRY_DTYPE).reshape(-1)


def raw_entries(entries: NDArray[np.void]) -> NDArray[np.uint64]:
    """(m,) ENTRY_DTYPE entries as (m, 2) uint64 words of the same bytes."""
    return np.ascontiguousarray(entries, ENTRY_DTYPE).view(_RAW).reshape(-1, 2)


class _Source(Protocol):
    """Sorted rows read by ranges: an open segment or rows in memory."""

    rows: int

    def pseudonyms(self, lo: int, hi: int) -> NDArray[np.bytes_]: ...

    def indptr(self, lo: int, hi: int) -> NDArray[np.int64]: ...

    def entries(self, lo: int, hi: int) -> NDArray[np.uint64]: ...


@dataclass(frozen=True, eq=False)
class Rows:
    """Sorted rows in memory: a release's, or the whole history of a store written before
    segments. Entries of ``pseudonyms[i]`` are ``entries[indptr[i]:indptr[i+1]]``,
    ``indptr[0] == 0``."""

    pseudonyms: NDArray[np.bytes_]
    indptr: NDArray[np.int64]
    entries: NDArray[np.void]

    @property
    def rows(self) -> int:
        return int(self.pseudonyms.shape[0])

    def reader(self) -> AbstractContextManager[_Source]:
        """The rows, read by ranges (nothing to open)."""
        return contextlib.nullcontext(_MemoryReader(self))

    def lookup(
        self, needles: NDArray[np.uint64]
    ) -> tuple[NDArray[np.bool_], NDArray[np.int64], NDArray[np.uint64]]:
        """As :meth:`Segment.lookup`, by one linear pass over all rows."""
        where = find_sorted(pseudonym_words(self.pseudonyms), needles)
        hit = where >= 0
        starts = self.indptr[where[hit]]
        counts = self.indptr[where[hit] + 1] - starts
        return hit, counts, _gather(raw_entries(self.entries), starts, counts)


class _MemoryReader:
    def __init__(self, rows: Rows) -> None:
        self._rows = rows
        self.rows = rows.rows
        self._raw = raw_entries(rows.entries)

    def pseudonyms(self, lo: int, hi: int) -> NDArray[np.bytes_]:
        return self._rows.pseudonyms[lo:hi]

    def indptr(self, lo: int, hi: int) -> NDArray[np.int64]:
        return self._rows.indptr[lo:hi]

    def entries(self, lo: int, hi: int) -> NDArray[np.uint64]:
        return self._raw[lo:hi]


@dataclass(frozen=True)
class Segment:
    """One segment directory and its size as the head records it (the files are checked
    against it when read)."""

    path: Path
    rows: int
    entries: int

    def reader(self) -> AbstractContextManager[_Source]:
        """The segment's files, open. ``FileNotFoundError`` passes through (a concurrent
        commit may have merged the segment away: the caller reads the head again);
        :class:`HistoryStoreError` if their sizes disagree with :attr:`rows` and
        :attr:`entries`."""
        return _Reader(self)

    def lookup(
        self, needles: NDArray[np.uint64]
    ) -> tuple[NDArray[np.bool_], NDArray[np.int64], NDArray[np.uint64]]:
        """Find the ascending, distinct ``needles`` (pseudonyms as
        :func:`~stream_release.history._csr.pseudonym_words`).

        Returns ``(hit, counts, entries)``: whether each needle has a row here (an empty row is
        a hit), the entry count of each hit and the hits' entries one after another as
        ``(m, 2) uint64`` (:func:`entries_of` reads them). O(rows + k + entries read), one
        chunk of the segment in memory at a time.
        """
        k = needles.shape[0]
        hit = np.zeros(k, dtype=bool)
        counts: list[NDArray[np.int64]] = []
        entries: list[NDArray[np.uint64]] = []
        j = 0
        with self.reader() as r:
            for lo in range(0, self.rows, CHUNK_ROWS):
                if j == k:
                    break
                hi = min(lo + CHUNK_ROWS, self.rows)
                found, j_next = find_from(pseudonym_words(r.pseudonyms(lo, hi)), needles, j)
                at = np.flatnonzero(found >= 0)
                if at.shape[0]:
                    local = found[at]
                    first, last = int(local[0]), int(local[-1])
                    ptr = r.indptr(lo + first, lo + last + 2)
                    block = r.entries(int(ptr[0]), int(ptr[-1]))
                    starts = ptr[local - first] - ptr[0]
                    row_counts = ptr[local - first + 1] - ptr[local - first]
                    counts.append(row_counts)
                    entries.append(_gather(block, starts, row_counts))
                    hit[j + at] = True
                j = j_next
        return (
            hit,
            np.concatenate(counts) if counts else np.zeros(0, np.int64),
            np.concatenate(entries) if entries else np.zeros((0, 2), _RAW),
        )


class _Reader:
    """Open files of one segment, read by ranges into fresh arrays."""

    def __init__(self, segment: Segment) -> None:
        self._segment = segment
        self.rows = segment.rows
        self._fds: dict[str, int] = {}

    def __enter__(self) -> _Reader:
        path, expected = (
            self._segment.path,
            {
                _PSEUDONYMS: self._segment.rows * PSEUDONYM_DTYPE.itemsize,
                _INDPTR: (self._segment.rows + 1) * _INDPTR_DTYPE.itemsize,
                _ENTRIES: self._segment.entries * ENTRY_DTYPE.itemsize,
            },
        )
        try:
            for name, size in expected.items():
                fd = self._fds[name] = os.open(path / name, os.O_RDONLY)
                if os.fstat(fd).st_size != size:
                    raise HistoryStoreError(
                        f"the history segment file {str(path / name)!r} holds "
                        f"{os.fstat(fd).st_size} bytes where the head says {size}: "
                        "the store is corrupt"
                    )
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def pseudonyms(self, lo: int, hi: int) -> NDArray[np.bytes_]:
        return self._read(_PSEUDONYMS, PSEUDONYM_DTYPE, lo, hi)

    def indptr(self, lo: int, hi: int) -> NDArray[np.int64]:
        return self._read(_INDPTR, _INDPTR_DTYPE, lo, hi).astype(np.int64, copy=False)

    def entries(self, lo: int, hi: int) -> NDArray[np.uint64]:
        return self._read(_ENTRIES, ENTRY_DTYPE, lo, hi).view(_RAW).reshape(-1, 2)

    def _read(self, name: str, dtype: np.dtype[Any], lo: int, hi: int) -> NDArray[Any]:
        out = np.empty(max(hi - lo, 0), dtype=dtype)
        view = out.view(np.uint8).data
        offset, done = lo * dtype.itemsize, 0
        while done < view.nbytes:
            got = os.preadv(self._fds[name], [view[done:]], offset + done)
            if got == 0:
                raise HistoryStoreError(
                    f"the history segment file {str(self._segment.path / name)!r} ended "
                    "early: the store is corrupt"
                )
            done += got
        return out


class _Writer:
    """Writes a segment a chunk at a time into a temporary directory beside ``path``;
    :meth:`finish` syncs the files and renames the directory to ``path`` (replacing a
    leftover of a commit that did not happen)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows = 0
        self.entries = 0
        self._tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        self._tmp.mkdir(parents=True)
        self._files = {
            name: open(self._tmp / name, "wb")  # noqa: SIM115 - closed by finish/discard
            for name in (_PSEUDONYMS, _INDPTR, _ENTRIES)
        }
        self._files[_INDPTR].write(np.zeros(1, _INDPTR_DTYPE).tobytes())

    def append(
        self, words: NDArray[np.uint64], indptr: NDArray[np.int64], entries: NDArray[np.uint64]
    ) -> None:
        """Append rows (pseudonyms as words, above every one appended before), their
        ``indptr`` (from 0) and their entries as ``(m, 2)`` words."""
        if words.shape[0] == 0:
            return
        self._files[_PSEUDONYMS].write(words.astype(">u8").data)
        self._files[_INDPTR].write((indptr[1:] + self.entries).astype(_INDPTR_DTYPE).data)
        self._files[_ENTRIES].write(np.ascontiguousarray(entries).data)
        self.rows += words.shape[0]
        self.entries += int(indptr[-1])

    def finish(self) -> Segment:
        for f in self._files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()
        _fsync_directory(self._tmp)
        if self.path.exists():
            shutil.rmtree(self.path)
        os.replace(self._tmp, self.path)
        return Segment(self.path, self.rows, self.entries)

    def discard(self) -> None:
        for f in self._files.values():
            f.close()
        shutil.rmtree(self._tmp, ignore_errors=True)


def write_segment(path: Path, rows: Rows) -> Segment:
    """Write the sorted ``rows`` as the segment ``path``."""
    return merge_segments([rows], path, oldest=False)


def merge_segments(sources: Sequence[Segment | Rows], path: Path, *, oldest: bool) -> Segment:
    """The segment ``path`` holding the rows of ``sources`` (oldest first), each replacing the
    rows of the same individuals in the ones before it.

    ``oldest``: the result becomes the oldest segment, so tombstones are dropped (with the
    rows they replace). O(rows + entries) of every source, a chunk at a time: each step takes
    the rows of every source up to the smallest of their chunks' last pseudonyms and folds
    them in one compiled k-way merge (:func:`_merge_sorted`).
    """
    writer = _Writer(path)
    try:
        with contextlib.ExitStack() as stack:
            readers = [stack.enter_context(source.reader()) for source in sources]
            at = [0] * len(readers)
            while any(a < r.rows for a, r in zip(at, readers, strict=True)):
                chunks = [
                    pseudonym_words(r.pseudonyms(a, min(a + CHUNK_ROWS, r.rows)))
                    for a, r in zip(at, readers, strict=True)
                ]
                edge = min((c[-1] for c in chunks if c.shape[0]), key=lambda w: (w[0], w[1]))
                words, starts, ends, entries = [], [], [], []
                bounds, offset = [0], 0
                for i, (r, chunk) in enumerate(zip(readers, chunks, strict=True)):
                    take = _count_not_above(chunk, edge) if chunk.shape[0] else 0
                    ptr = r.indptr(at[i], at[i] + take + 1)
                    at[i] += take
                    words.append(chunk[:take])
                    starts.append(ptr[:-1] - ptr[0] + offset)
                    ends.append(ptr[1:] - ptr[0] + offset)
                    entries.append(r.entries(int(ptr[0]), int(ptr[-1])))
                    offset += int(ptr[-1] - ptr[0])
                    bounds.append(bounds[-1] + take)
                writer.append(
                    *_merge_sorted(
                        np.concatenate(words),
                        np.array(bounds, dtype=np.int64),
                        np.concatenate(starts),
                        np.concatenate(ends),
                        np.concatenate(entries),
                        not oldest,
                    )
                )
        return writer.finish()
    except BaseException:
        writer.discard()
        raise


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@njit(cache=True, nogil=True)
def _merge_sorted(  # pragma: no cover - jit
    words: NDArray[np.uint64],
    bounds: NDArray[np.int64],
    starts: NDArray[np.int64],
    ends: NDArray[np.int64],
    entries: NDArray[np.uint64],
    keep_empty: bool,
) -> tuple[NDArray[np.uint64], NDArray[np.int64], NDArray[np.uint64]]:
    """One k-way merge of k sources' ascending rows (source s is rows ``bounds[s]`` to
    ``bounds[s+1]`` of ``words``; row r's entries are ``entries[starts[r]:ends[r]]``): each
    pseudonym once, with the row of the newest (last) source holding it. An empty row is kept
    only if ``keep_empty`` (it then stands for the individual's removal). Returns
    ``(words, indptr from 0, (m, 2) entries)``. O(rows * k + entries), k is small."""
    k = bounds.shape[0] - 1
    pos = bounds[:-1].copy()
    out_words = np.empty((words.shape[0], 2), np.uint64)
    out_indptr = np.empty(words.shape[0] + 1, np.int64)
    out_entries = np.empty((entries.shape[0], 2), np.uint64)
    out_indptr[0] = 0
    n = m = 0
    while True:
        best = -1
        for s in range(k):
            if pos[s] == bounds[s + 1]:
                continue
            r = pos[s]
            if best < 0:
                best = s
                continue
            b = pos[best]
            if words[r, 0] < words[b, 0] or (
                words[r, 0] == words[b, 0] and words[r, 1] <= words[b, 1]
            ):
                best = s  # a later (newer) source wins a tie
        if best < 0:
            break
        row = pos[best]
        hi, lo = words[row, 0], words[row, 1]
        for s in range(k):
            if pos[s] < bounds[s + 1] and words[pos[s], 0] == hi and words[pos[s], 1] == lo:
                pos[s] += 1
        if keep_empty or ends[row] > starts[row]:
            out_words[n, 0], out_words[n, 1] = hi, lo
            for e in range(starts[row], ends[row]):
                out_entries[m, 0], out_entries[m, 1] = entries[e, 0], entries[e, 1]
                m += 1
            n += 1
            out_indptr[n] = m
    return out_words[:n], out_indptr[: n + 1], out_entries[:m]


@njit(cache=True, nogil=True)
def _gather(  # pragma: no cover - jit
    entries: NDArray[np.uint64], starts: NDArray[np.int64], counts: NDArray[np.int64]
) -> NDArray[np.uint64]:
    """The rows ``entries[starts[i] : starts[i] + counts[i]]`` one after another."""
    out = np.empty((counts.sum(), 2), np.uint64)
    m = 0
    for i in range(starts.shape[0]):
        for k in range(starts[i], starts[i] + counts[i]):
            out[m, 0], out[m, 1] = entries[k, 0], entries[k, 1]
            m += 1
    return out


@njit(cache=True, nogil=True)
def _count_not_above(  # pragma: no cover - jit
    words: NDArray[np.uint64], edge: NDArray[np.uint64]
) -> int:
    """How many of the ascending ``words`` are <= ``edge`` (binary search)."""
    lo, hi = 0, words.shape[0]
    while lo < hi:
        mid = (lo + hi) // 2
        if words[mid, 0] < edge[0] or (words[mid, 0] == edge[0] and words[mid, 1] <= edge[1]):
            lo = mid + 1
        else:
            hi = mid
    return lo
