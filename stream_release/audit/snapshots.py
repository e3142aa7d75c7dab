"""Which snapshot each global-guarantee release was made from.

A release's private record states the sha256 of its snapshot: the snapshot given with that
sha256 is the release's, or, with none given, the file the record names if it still has that
sha256. A record written before the sha256 was kept matches the snapshot named like the
release (its label), else the one at its position when one is given per release.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from stream_release.audit.files import Snapshot, read_json, read_snapshot
from stream_release.audit.utility import shown_releases
from stream_release.release_format import GLOBAL_GUARANTEE, manifest_kind

Rekey = Callable[[list[str]], list[str]]
"""The ids of a snapshot as the private assignments name them: a worker's archive names its
individuals by keyed pseudonym (hex), never by id; ``audit --key-file`` gives the key."""


def match_snapshots(
    loaded: list[tuple[int, Path, dict[str, Any]]],
    private: Path,
    snapshots: list[Path],
    not_done: list[str],
    rekey: Rekey | None = None,
) -> tuple[dict[int, Snapshot], dict[int, str]]:
    """Each global-guarantee release's snapshot: by the sha256 of its private record, else by
    file name (release label), else by position; the record's own path when no snapshot is
    given and the file there still has the recorded sha256. Also the releases whose recorded
    sha256 differs from the given snapshot named like them (a problem, not a check undone).
    ``rekey``: the given snapshots' rows by the ids the assignments use (:data:`Rekey`)."""
    out: dict[int, Snapshot] = {}
    conflicts: dict[int, str] = {}
    candidates = _global_releases(loaded)
    if not candidates:
        return out, conflicts
    given = _GivenSnapshots.read(snapshots, candidates[0][2], rekey)
    missing = []
    for position, (number, label, _) in enumerate(candidates):
        record_path = private / f"private-{number:04d}.json"
        source = (read_json(record_path).get("source") or {}) if record_path.exists() else {}
        snapshot = given.of(source, label, position, len(candidates))
        if snapshot is not None:
            out[number] = snapshot
        elif source.get("sha256") and label in given.by_name:
            conflicts[number] = (
                f"{given.by_name[label].path.name} is not the snapshot release {number} was made "
                "from: its sha256 differs from the private record's"
            )
        else:
            missing.append(number)
    if missing:
        not_done.append(
            f"groups against their snapshot rows: no snapshot (with the recorded sha256) for "
            f"releases {shown_releases(missing)} (give the snapshots)"
        )
    return out, conflicts


def _global_releases(loaded: list[tuple[int, Path, dict[str, Any]]]) -> list[tuple[int, str, str]]:
    """Each global-guarantee release's sequence number, label and id column."""
    out = []
    for number, _, manifest in loaded:
        if manifest_kind(manifest) == GLOBAL_GUARANTEE:
            schema = manifest.get("schema") or {}
            out.append((number, str(manifest.get("release", "")), str(schema.get("id", "id"))))
    return out


@dataclass(frozen=True)
class _GivenSnapshots:
    """The snapshots given, by sha256 and by file name (a release label)."""

    snapshots: list[Snapshot]
    id_column: str
    by_hash: dict[str, Snapshot]
    by_name: dict[str, Snapshot]

    @classmethod
    def read(cls, paths: list[Path], id_column: str, rekey: Rekey | None) -> _GivenSnapshots:
        given = [read_snapshot(path, id_column) for path in paths]
        if rekey is not None:  # the rows by the names the assignments use
            given = [replace(s, rows=_rekeyed(s.rows, rekey)) for s in given]
        return cls(given, id_column, {s.sha256: s for s in given}, {s.path.stem: s for s in given})

    def of(
        self, source: dict[str, Any], label: str, position: int, releases: int
    ) -> Snapshot | None:
        """The snapshot of a release whose private record states ``source``: the given one
        with its sha256; with none given, the file it names if that still has the sha256; for
        a record stating no sha256, the given one named ``label``, else the one at
        ``position`` when one is given per release (``releases`` of them); else ``None``."""
        sha = source.get("sha256")
        if sha in self.by_hash:
            return self.by_hash[sha]
        if sha:
            return None if self.snapshots else _recorded_snapshot(source, self.id_column)
        if label in self.by_name:
            return self.by_name[label]
        return self.snapshots[position] if len(self.snapshots) == releases else None


def _rekeyed(rows: dict[str, list[str]], rekey: Rekey) -> dict[str, list[str]]:
    return dict(zip(rekey(list(rows)), rows.values(), strict=True))


def _recorded_snapshot(source: dict[str, Any], id_column: str) -> Snapshot | None:
    """The snapshot file a private record names (``source``), if it exists and still has the
    recorded sha256."""
    if not source.get("file") or not Path(source["file"]).is_file():
        return None
    found = read_snapshot(Path(source["file"]), id_column)
    return found if found.sha256 == source["sha256"] else None
