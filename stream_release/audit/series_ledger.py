"""The archive against its series ledger (``stream-release audit DIR --ledger PATH``).

The publisher appends one JSON line per release it publishes to a file kept outside both
archives (``[output] ledger``, default ``DIR.ledger``): its ``sequence``, ``release`` label and
the sha256 of its four files (``release_sha256``, ``manifest_sha256``, ``assignments_sha256``,
``private_sha256``). The public files alone cannot show that their last release was deleted
(the series just looks shorter), nor that a file was swapped for one that is consistent with
the others; against the ledger:

* every release it records must be in ``DIR`` with the recorded public files, and in the
  private directory (when it is given) with the recorded private ones;
* ``DIR`` must hold no release the ledger does not record.

The ledger is read here independently of the publisher's code; a line that is not an entry,
or sequences that are not 1, 2, 3, ..., make the ledger malformed (the audit's exit 2). A last
line without its line break is a write a crash interrupted, not an entry.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from stream_release.audit.files import AuditInputError

LEDGER_SUFFIX = ".ledger"
"""The default ledger of a public directory ``DIR`` is the file ``DIR.ledger``."""

FILES = {
    "release": ("public", "release-{:04d}.jsonl"),
    "manifest": ("public", "manifest-{:04d}.json"),
    "assignments": ("private", "assignments-{:04d}.csv"),
    "private": ("private", "private-{:04d}.json"),
}
"""The kinds of file an entry records: in which directory, under which name."""


def default_ledger(directory: Path) -> Path:
    """``DIR.ledger`` beside the public directory ``DIR``."""
    return directory.with_name(directory.name + LEDGER_SUFFIX)


@dataclass(frozen=True)
class Entry:
    """One release the ledger records."""

    sequence: int
    release: str
    sha256: dict[str, str]


def read_ledger(path: Path) -> list[Entry]:
    """The entries of the ledger at ``path``, in order.

    Raises
    ------
    AuditInputError
        The file cannot be read, a line is not an entry, or the sequences are not 1, 2, ...
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise AuditInputError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    entries: list[Entry] = []
    for number, raw in enumerate(data[: data.rfind(b"\n") + 1].splitlines(), start=1):
        entry = _entry(raw)
        if entry is None:
            raise AuditInputError(f"{path}, line {number}: not a series ledger entry")
        if entry.sequence != len(entries) + 1:
            raise AuditInputError(
                f"{path}, line {number}: sequence {entry.sequence} where {len(entries) + 1} "
                "was expected (the ledger is append-only)"
            )
        entries.append(entry)
    return entries


def _entry(raw: bytes) -> Entry | None:
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
    return Entry(sequence, release, {kind: str(d) for kind, d in digests.items()})


def check_against_ledger(
    entries: list[Entry], directory: Path, private: Path | None, published: list[int]
) -> list[str]:
    """The problems of the archive against the ledger's ``entries`` (module docstring);
    ``published``: the sequences whose manifest ``directory`` holds; ``private``: the private
    directory, or ``None`` when it is not given (its files are then not compared)."""
    problems = []
    recorded = {entry.sequence for entry in entries}
    missing = [entry.sequence for entry in entries if entry.sequence not in set(published)]
    if missing:
        problems.append(
            f"release(s) {_listed(missing)} recorded in the series ledger are missing from "
            f"{str(directory)!r} (deleted, or the archive was restored from an older backup)"
        )
    extra = [sequence for sequence in published if sequence not in recorded]
    if extra:
        problems.append(
            f"release(s) {_listed(extra)} in {str(directory)!r} are not in the series ledger "
            "(published by another series, or the ledger is not this series')"
        )
    for entry in entries:
        if entry.sequence in missing:
            continue
        differ = []
        for kind, (where, name) in FILES.items():
            folder = directory if where == "public" else private
            if folder is None:
                continue
            path = folder / name.format(entry.sequence)
            try:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            except FileNotFoundError:
                digest = "missing"
            if digest != entry.sha256[kind]:
                differ.append(f"{path.name} ({'missing' if digest == 'missing' else 'altered'})")
        if differ:
            problems.append(
                f"release {entry.sequence}: {', '.join(differ)} differ from the series ledger"
            )
    return problems


def _listed(sequences: list[int]) -> str:
    return ", ".join(map(str, sequences[:10])) + (" ..." if len(sequences) > 10 else "")


def audit_ledger(
    directory: Path, private: Path | None, ledger: Path | None, published: list[int]
) -> tuple[list[str], list[str]]:
    """The archive against its series ledger (``ledger``, else ``DIR.ledger`` if it
    exists): ``(problems, not done)``. Without a ledger, a deleted last release cannot be
    told: said in the second list, as is a private directory not given."""
    path = Path(ledger) if ledger is not None else default_ledger(directory)
    if ledger is None and not path.is_file():
        return [], [
            f"the archive against its series ledger: none at {str(path)!r} (give --ledger), "
            "so a deleted last release, or a release file swapped for another consistent "
            "one, cannot be told"
        ]
    problems = check_against_ledger(read_ledger(path), directory, private, published)
    undone = []
    if private is None:
        undone.append("the private files against the series ledger's digests (give --private)")
    return problems, undone
