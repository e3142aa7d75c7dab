"""The checks that stop a series instead of reusing sequence numbers or restarting every
history, and their one-line messages (:class:`~stream_release.pipeline.publisher.Publisher`)."""

from __future__ import annotations

from pathlib import Path

from stream_release.errors import NEW_SERIES_CAVEAT, ConfigError, HistoryStoreError, KeyMismatch
from stream_release.history._validate import key_mismatch_message
from stream_release.history.pseudonym import KeyMaterial, write_key_file
from stream_release.history.types import HistoryStore
from stream_release.io.release_files import decode_record_manifest
from stream_release.release_format import manifest_kind

__all__ = [
    "ahead_message",
    "refuse_old_layout",
    "refuse_other_kind",
    "regressed_message",
    "write_new_key",
]


def write_new_key(material: KeyMaterial) -> None:
    """Write a new series' key file (with its first release).

    Raises
    ------
    KeyMismatch
        The file appeared meanwhile with another key.
    """
    if material.new_file is None:  # an existing key: nothing to write
        return
    if write_key_file(material.new_file, material.key) != material.key:
        raise KeyMismatch(key_mismatch_message(repr(str(material.new_file))))


def refuse_other_kind(store: HistoryStore, last: int, kind: str) -> None:
    """Refuse to continue the series of ``store`` with ``kind`` when its release ``last`` was
    made by another.

    Raises
    ------
    ConfigError
        The record of release ``last`` states another ``mechanism.kind`` (none = the global
        guarantee).
    HistoryStoreError
        The store has no record of release ``last``.
    """
    record = store.record(last)
    if record is None:
        raise HistoryStoreError(f"the history store has no record of its release {last}")
    made_by = manifest_kind(decode_record_manifest(record))
    if made_by != kind:
        raise ConfigError(
            f"mechanism.kind = {kind!r}, but the series in {store!r} was published with "
            f"mechanism.kind = {made_by!r} (release {last}); a series keeps its mechanism: use "
            "the configuration it was started with, or start a new series (another --out and "
            f"--history, or another history.prefix): {NEW_SERIES_CAVEAT}"
        )


def ahead_message(committed: int, out_dir: Path, last_file: int) -> str:
    """The one line of a store ahead of the archive by more than one release."""
    return (
        f"the history store is at release {committed} but {str(out_dir)!r} holds releases up "
        f"to {last_file}: use the --out directory and --history store of the same series"
    )


def regressed_message(store: HistoryStore, committed: int, known: int) -> str:
    """The one line of :class:`StoreRegressed`: the store at ``committed`` lost the commits up
    to ``known``."""
    return (
        f"the history store {store!r} is at release {committed}, but release {known} was "
        "already committed or published: the store lost commits (e.g. Redis restarted "
        "without persistence). Nothing is cut until it is restored from its backup (continuing "
        f"in a new archive and history instead is a new series: {NEW_SERIES_CAVEAT})"
    )


def refuse_old_layout(out_dir: Path, private: Path) -> None:
    """Refuse a series whose private files are still inside its public directory."""
    old_history = out_dir / "history"
    old_assignments = sorted(out_dir.glob("assignments-*.csv")) if out_dir.is_dir() else []
    if not old_history.is_dir() and not old_assignments:
        return
    raise ConfigError(
        f"{str(out_dir)!r} holds private files next to the public ones (the layout before "
        f"public and private output were apart); move them into {str(private)!r} and run "
        f"again: mkdir -m 700 {str(private)!r} && mv {str(out_dir)!r}/history "
        f"{str(out_dir)!r}/assignments-*.csv {str(private)!r}/"
    )
