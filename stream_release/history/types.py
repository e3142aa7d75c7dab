"""The protocol every history store implements, and how a store holds the history.

The history itself, ``(log_p, links)`` per individual and value, is the core's
:class:`~stream_release.core.privacy.linkage.HistoryRows` (Wong et al. 2010, Lemma 4); a store
keeps it by *global value id* (the index into its append-only value dictionary) and knows
individuals only by pseudonym (a keyed hash of the id, :mod:`stream_release.history.pseudonym`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from stream_release.core.privacy.linkage import HistoryRows

PSEUDONYM_DTYPE = np.dtype("S16")
"""A pseudonym: 16 bytes of keyed BLAKE2b."""


def pseudonym_hex(pseudonyms: NDArray[np.bytes_]) -> list[str]:
    """Each pseudonym's 16 bytes as 32 hex digits (not through ``tolist()``, which drops
    trailing NUL bytes: about one pseudonym in 256 would lose digits)."""
    text = np.ascontiguousarray(pseudonyms, dtype=PSEUDONYM_DTYPE).tobytes().hex()
    width = 2 * PSEUDONYM_DTYPE.itemsize
    return [text[i : i + width] for i in range(0, len(text), width)]


ENTRY_DTYPE = np.dtype([("value", "<u4"), ("log_p", "<f8"), ("links", "<u4")])
"""One (value, log_p, links) history entry as stored: 16 bytes little-endian."""


def argsort_pseudonyms(pseudonyms: NDArray[np.bytes_]) -> NDArray[np.intp]:
    """Permutation sorting an ``(n,) S16`` array bytewise (equal elements in any order).

    Sorts on the first 8 bytes as a big-endian uint64 (an integer sort, several times faster
    than numpy's string sort) and falls back to the string sort if two pseudonyms share their
    first 8 bytes and come out of order.
    """
    n = pseudonyms.shape[0]
    if n < 2:
        return np.arange(n, dtype=np.intp)
    high = pseudonyms.view(">u8")[0::2].astype(np.uint64)
    order = np.argsort(high)
    ordered = pseudonyms[order]
    if np.any(ordered[1:] < ordered[:-1]):
        order = np.argsort(pseudonyms, kind="stable")
    return order


class HistoryStore(Protocol):
    """Where the history lives between releases. Implementations: Redis and a local file.

    A commit is atomic: the new entries of every individual of the release, the extended value
    dictionary, the release record, the mechanism state entries and the sequence number are all
    stored, or none is.
    """

    def last_sequence(self) -> int:
        """Sequence number of the last committed release; 0 before the first."""
        ...

    def values(self) -> tuple[str, ...]:
        """The append-only dictionary of global value ids (index = id)."""
        ...

    def load(self, pseudonyms: NDArray[np.bytes_]) -> HistoryRows:
        """History of the given individuals, row i for ``pseudonyms[i]`` (empty if unknown)."""
        ...

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
        """Atomically replace the history of ``pseudonyms`` by ``history``, extend the value
        dictionary to ``values`` (the current one must be a prefix), store ``record`` as
        release ``sequence``, set the mechanism ``state`` entries (byte key -> byte value, new
        or changed; :meth:`load_state` reads them), record ``key_check`` (the check value of
        the pseudonymisation key, :meth:`key_check`) if none is recorded yet, and make
        ``sequence`` the last one.

        ``label`` (the streaming service's release label, Redis only) is mapped to ``sequence``
        and its staged rows and seal are deleted in the same transaction.

        Raises :class:`~stream_release.errors.SequenceConflict` (and changes nothing) unless
        ``sequence == last_sequence() + 1``, or the dictionary is not a prefix of ``values``;
        :class:`~stream_release.errors.KeyMismatch` (and changes nothing) if another
        ``key_check`` is recorded.
        """
        ...

    def key_check(self) -> bytes | None:
        """The check value of the key the history was written under (None: not recorded)."""
        ...

    def record(self, sequence: int) -> bytes | None:
        """The release record committed with ``sequence``, or None."""
        ...

    def load_state(self, keys: Sequence[bytes]) -> list[bytes | None]:
        """The committed mechanism state entry of each key, in order (``None``: never
        written). The :data:`~stream_release.mechanisms.base.StateLoader` of a release."""
        ...

    def close(self) -> None: ...
