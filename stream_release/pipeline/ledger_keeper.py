"""A series' ledger as its publisher keeps it (:mod:`stream_release.io.series_ledger`): read
again and brought up to the archive before the first release, checked before every commit,
appended after every commit.

The store and both archives, restored together from one backup, agree with each other but not
with the ledger, which refuses them (:class:`~stream_release.errors.SeriesRewound`).
"""

from __future__ import annotations

import json
from pathlib import Path

from stream_release.errors import NEW_SERIES_CAVEAT, SeriesRewound
from stream_release.history.types import HistoryStore
from stream_release.io.release_files import ReleasePaths, published_sequences
from stream_release.io.series_ledger import LedgerEntry, SeriesLedger, release_contents

__all__ = ["LedgerKeeper"]


class LedgerKeeper:
    """The ledger at ``path`` of the series whose public files are in ``out_dir`` and private
    files in ``private_dir``."""

    def __init__(self, path: Path, out_dir: Path, private_dir: Path) -> None:
        self.ledger = SeriesLedger(path)
        self.out_dir = out_dir
        self.private_dir = private_dir
        self.sequence: int | None = None
        """The ledger's last sequence as this keeper last read or wrote it (``None``: not
        read yet)."""

    def entries(self) -> list[LedgerEntry]:
        """The releases the ledger records."""
        return self.ledger.entries()

    def refuse_if_behind(
        self, recorded: int, store: HistoryStore, committed: int, last_file: int
    ) -> None:
        """Refuse a store (at ``committed``) or an archive (up to ``last_file``) behind the
        ledger's ``recorded`` releases.

        Raises
        ------
        SeriesRewound
            Either is behind.
        """
        if recorded > min(committed, last_file):
            raise SeriesRewound(self._rewound(recorded, store, committed, last_file))

    def check_before_commit(self, store: HistoryStore, committed: int) -> None:
        """Before release ``committed + 1`` is committed: the ledger records releases
        ``1 .. committed`` (read again and brought up to the archive first when this keeper
        did not write it last).

        Raises
        ------
        SeriesRewound
            The ledger records another number of releases than the store's.
        """
        if self.sequence == committed:
            return
        done = published_sequences(self.out_dir) if self.out_dir.is_dir() else []
        last_file = done[-1] if done else 0
        recorded = self.ledger.entries()
        if len(recorded) <= min(committed, last_file):
            self.bring_to(recorded, last_file)
        if self.sequence != committed:
            raise SeriesRewound(self._rewound(len(recorded), store, committed, last_file))

    def append(self, entry: LedgerEntry) -> None:
        """Record a committed release."""
        self.ledger.append(entry)
        self.sequence = entry.sequence

    def _paths(self, sequence: int) -> ReleasePaths:
        return ReleasePaths(self.out_dir, sequence, self.private_dir)

    def bring_to(self, recorded: list[LedgerEntry], last_file: int) -> None:
        """Check the ledger's last release (of ``recorded``, as read) against the archive's
        files, then record the releases ``len(recorded) + 1 .. last_file`` of the archive in
        it (a release committed just before a crash, or a series older than its ledger).

        Raises
        ------
        SeriesRewound
            The archive's files of that release differ from the recorded digests, or a file
            to record is missing.
        """
        if recorded:
            last = recorded[-1]
            differs = last.differs(release_contents(self._paths(last.sequence)))
            if differs:
                raise SeriesRewound(self._differs(last.sequence, differs))
        for sequence in range(len(recorded) + 1, last_file + 1):
            found = release_contents(self._paths(sequence))
            contents = {kind: data for kind, data in found.items() if data is not None}
            if len(contents) < len(found):
                missing = ", ".join(kind for kind in found if kind not in contents)
                raise SeriesRewound(
                    f"cannot record release {sequence} in the series ledger "
                    f"{str(self.ledger.path)!r}: its {missing} file(s) are missing from "
                    f"{str(self.out_dir)!r} / {str(self.private_dir)!r}; restore them from a "
                    "backup"
                )
            label = str(json.loads(contents["manifest"]).get("release", ""))
            self.ledger.append(LedgerEntry.of(sequence, label, contents))
        self.sequence = max(len(recorded), last_file)

    def _rewound(self, recorded: int, store: HistoryStore, committed: int, last_file: int) -> str:
        """The one line of :class:`SeriesRewound` for a store or an archive behind the
        ledger."""
        behind = min(committed, last_file)
        return (
            f"the series ledger {str(self.ledger.path)!r} records releases 1..{recorded} as "
            f"published, but the history store {store!r} is at release {committed} and "
            f"{str(self.out_dir)!r} holds releases up to {last_file}: they were restored from "
            f"an older backup (or belong to another series), and publishing now would reuse "
            f"sequence {behind + 1} and forget the linkages of releases {behind + 1}..{recorded}, "
            f"which are public. Restore the history store and both archives "
            f"({str(self.out_dir)!r}, {str(self.private_dir)!r}) from a backup of release "
            f"{recorded} or later; or start a new series (new --out, --private, --history and "
            f"ledger), knowing that {NEW_SERIES_CAVEAT}"
        )

    def _differs(self, sequence: int, differs: list[str]) -> str:
        """The one line of :class:`SeriesRewound` for an archive holding another release under
        a sequence the ledger records."""
        return (
            f"release {sequence} in {str(self.out_dir)!r} / {str(self.private_dir)!r} is not "
            f"the one the series ledger {str(self.ledger.path)!r} records: its "
            f"{', '.join(differs)} file(s) differ from the recorded sha256 or are missing. The "
            "archives were restored from another backup or belong to another series: restore "
            f"them and the history store from a backup of release {sequence} or later, or give "
            "this series its own ledger ([output] ledger, --ledger)"
        )
