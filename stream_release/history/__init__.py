"""Per-individual, per-value history of linkages (Wong et al. 2010, §7, the "statistics file").

:func:`make_history_store` picks the backend from a location: a ``redis://``, ``rediss://`` or
``unix://`` URL gives a :class:`RedisHistoryStore` (the service), anything else is a directory
for a :class:`FileHistoryStore` (offline ``stream-release anonymize``). Individuals are known
to both only by pseudonym (:class:`Pseudonymizer`, key from :func:`load_key`).
"""

from __future__ import annotations

from pathlib import Path

from stream_release.core.privacy.linkage import HistoryRows
from stream_release.history.file_store import FileHistoryStore
from stream_release.history.keys import RedisKeys
from stream_release.history.pseudonym import Pseudonymizer, load_key
from stream_release.history.redis_store import RedisHistoryStore
from stream_release.history.types import ENTRY_DTYPE, PSEUDONYM_DTYPE, HistoryStore

__all__ = [
    "ENTRY_DTYPE",
    "PSEUDONYM_DTYPE",
    "REDIS_SCHEMES",
    "FileHistoryStore",
    "HistoryRows",
    "HistoryStore",
    "Pseudonymizer",
    "RedisHistoryStore",
    "RedisKeys",
    "load_key",
    "make_history_store",
]

REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
"""Locations starting with one of these are Redis URLs."""


def make_history_store(location: str | Path, prefix: str) -> HistoryStore:
    """The history store at ``location``.

    Parameters
    ----------
    location : str or Path
        A Redis URL (``redis://``, ``rediss://``, ``unix://``) or a directory.
    prefix : str
        Key namespace in Redis (``history.prefix``); unused by the file store, whose directory
        is its namespace.

    Returns
    -------
    HistoryStore
        :class:`RedisHistoryStore` for a URL, :class:`FileHistoryStore` otherwise.
    """
    if isinstance(location, str) and location.lower().startswith(REDIS_SCHEMES):
        return RedisHistoryStore.from_url(location, prefix)
    return FileHistoryStore(Path(location))
