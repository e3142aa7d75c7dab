"""The series ledger: what a series published, kept outside both of its archives.

The history store and the two archives can be restored from one backup together: each then
agrees with the others, and the next release would be published under a sequence already
public, to individuals whose linkages since the backup are forgotten. The ledger is the
witness that is not restored with them. It is a file of JSON lines, one per release published,
in sequence order, appended (and fsynced) after the release's history commit and before its
files are renamed into place::

    {"sequence": 3, "release": "2026-12", "release_sha256": "<hex>",
     "manifest_sha256": "<hex>", "assignments_sha256": "<hex>", "private_sha256": "<hex>"}

the sha256 of each of the release's four files (docs/contract.md §4). Its path is
``[output] ledger`` (``anonymize --ledger``), by default ``<archive>.ledger`` beside the public
directory (``DIR.ledger`` for ``--out DIR``; the worker's ``<service.archive>.ledger``).

It holds digests of the private files, so it is kept like them (mode 0600): a digest of the
assignments confirms a guess of who is in which group. The audit reads it independently
(:mod:`stream_release.audit.series_ledger`).

Crash order (the publisher's ``apply``): stage the files, commit the history, append the
ledger line, rename the files. A crash before the append leaves the ledger one release behind
the store, which :meth:`~stream_release.pipeline.publisher.Publisher.recover` appends from the
files it finalises; a crash during the append leaves a last line without its line break, which
is no entry (:meth:`SeriesLedger.entries`) and is cut off before the next append.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stream_release.errors import SeriesRewound
from stream_release.io.release_files import ReleasePaths

LEDGER_SUFFIX = ".ledger"
"""The default ledger of a public directory ``DIR`` is the file ``DIR.ledger``."""

LEDGER_MODE = 0o600
"""Mode of a ledger this package creates (it holds digests of the private files)."""

FILES = ("release", "manifest", "assignments", "private")
"""The files of a release whose sha256 an entry records, by kind (``<kind>_sha256``)."""


def default_ledger_path(public: Path) -> Path:
    """``DIR.ledger`` beside the public directory ``DIR``."""
    public = Path(public)
    return public.with_name(public.name + LEDGER_SUFFIX)


def release_contents(paths: ReleasePaths) -> dict[str, bytes | None]:
    """The bytes of each file of the release at ``paths``, by kind (:data:`FILES`); ``None``
    for a file that is not there."""
    where = {
        "release": paths.groups,
        "manifest": paths.manifest,
        "assignments": paths.assignments,
        "private": paths.private_record,
    }
    out: dict[str, bytes | None] = {}
    for kind, path in where.items():
        try:
            out[kind] = path.read_bytes()
        except FileNotFoundError:
            out[kind] = None
    return out


def sha256_hex(data: bytes) -> str:
    """The sha256 of ``data`` in hex."""
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class LedgerEntry:
    """One published release: its sequence, label and the sha256 of each of its files
    (:data:`FILES`)."""

    sequence: int
    release: str
    digests: Mapping[str, str]

    @classmethod
    def of(cls, sequence: int, release: str, contents: Mapping[str, bytes]) -> LedgerEntry:
        """The entry of release ``sequence`` whose files hold ``contents`` (by kind)."""
        return cls(sequence, release, {kind: sha256_hex(contents[kind]) for kind in FILES})

    def line(self) -> bytes:
        """The entry as one JSON line."""
        body: dict[str, object] = {"sequence": self.sequence, "release": self.release}
        body.update({f"{kind}_sha256": self.digests[kind] for kind in FILES})
        return json.dumps(body, ensure_ascii=False).encode("utf-8") + b"\n"

    def differs(self, contents: Mapping[str, bytes | None]) -> list[str]:
        """The kinds whose file is missing (``None``) or holds other bytes than recorded."""
        return [
            kind
            for kind in FILES
            if (data := contents.get(kind)) is None or sha256_hex(data) != self.digests[kind]
        ]


class SeriesLedger:
    """The ledger file at :attr:`path` (module docstring); a missing file is an empty ledger."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"SeriesLedger({str(self.path)!r})"

    def entries(self) -> list[LedgerEntry]:
        """Every entry, in sequence order.

        Raises
        ------
        SeriesRewound
            The file cannot be read, or a line is not an entry, or the sequences are not
            1, 2, 3, ... (one line naming the file, the line and the fix).
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise SeriesRewound(
                f"the series ledger {str(self.path)!r} cannot be read ({exc.strerror or exc})"
            ) from None
        out: list[LedgerEntry] = []
        complete = data[: data.rfind(b"\n") + 1]  # a last line without its break: torn
        for number, raw in enumerate(complete.splitlines(), start=1):
            entry = _parse(raw)
            expected = len(out) + 1
            if entry is None or entry.sequence != expected:
                found = "not an entry" if entry is None else f"sequence {entry.sequence}"
                raise SeriesRewound(
                    f"the series ledger {str(self.path)!r}, line {number}: {found} where the "
                    f"entry of release {expected} was expected; the ledger is append-only: "
                    "restore it from its copy, or name the series' own ledger ([output] ledger)"
                )
            out.append(entry)
        return out

    def last(self) -> LedgerEntry | None:
        """The last entry (``None``: an empty ledger)."""
        entries = self.entries()
        return entries[-1] if entries else None

    def append(self, entry: LedgerEntry) -> None:
        """Append ``entry`` and fsync it (the file, mode 0600, and its directory entry are
        created on the first append); a torn last line is cut off first."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, LEDGER_MODE)
        try:
            size = os.fstat(fd).st_size
            if size:
                tail = os.pread(fd, min(size, 1 << 16), max(0, size - (1 << 16)))
                if not tail.endswith(b"\n"):  # a line torn by a crash during its append
                    keep = size - len(tail) + tail.rfind(b"\n") + 1
                    os.ftruncate(fd, keep)
                    size = keep
            os.pwrite(fd, entry.line(), size)
            os.fsync(fd)
        finally:
            os.close(fd)
        if created:
            os.chmod(self.path, LEDGER_MODE)  # the umask only removes bits: make it exact
            _sync_directory(self.path.parent)


def _parse(raw: bytes) -> LedgerEntry | None:
    try:
        body = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(body, dict):
        return None
    sequence, release = body.get("sequence"), body.get("release")
    digests = {kind: body.get(f"{kind}_sha256") for kind in FILES}
    if (
        isinstance(sequence, bool)
        or not isinstance(sequence, int)
        or not isinstance(release, str)
        or not all(isinstance(d, str) and len(d) == 64 for d in digests.values())
    ):
        return None
    return LedgerEntry(sequence, release, {k: str(v) for k, v in digests.items()})


def _sync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
