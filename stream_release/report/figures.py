"""The figures of a series the report draws, read from its files (the public ones; with the
private ones, the audit's verdict on each release too)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from stream_release.audit.files import (
    AuditInputError,
    check_manifest,
    manifest_paths,
    read_json,
    read_lines,
)
from stream_release.release_format import GuaranteeManifest
from stream_release.report.risk import DEFAULT_THRESHOLD, ReleaseRisks, release_risks

__all__ = ["ReleaseFigures", "SeriesFigures", "series_figures"]


@dataclass(frozen=True)
class ReleaseFigures:
    """One release as the report shows it. ``bound``, the breach figures and the people past
    the bound are the global guarantee's (``None`` for a companion kind); the query errors
    are ``None`` without a query workload."""

    sequence: int
    label: str
    published: int
    suppressed: int | None
    groups: int
    sizes: NDArray[np.int64]
    bound: float | None
    breach_max: float | None
    breach_p99: float | None
    spent_people: int | None
    spent_pairs: int | None
    query_median: float | None
    query_trimmed: float | None
    query_mean: float | None
    risks: ReleaseRisks
    status: str | None = None
    """The audit's verdict (``ok``, ``FAIL: ...``) when the private files were given."""

    @property
    def suppression(self) -> float | None:
        """Suppressed rows / rows in (``None``: a kind that does not state them)."""
        if self.suppressed is None:
            return None
        rows = self.published + self.suppressed
        return self.suppressed / rows if rows else 0.0


@dataclass(frozen=True)
class SeriesFigures:
    """Every release of a series, in sequence order."""

    name: str
    releases: list[ReleaseFigures]
    audited: bool
    threshold: float

    @property
    def anyone_past(self) -> bool:
        """Whether some release's individuals passed the bound."""
        return any((r.spent_people or 0) > 0 for r in self.releases)


def series_figures(
    directory: Path,
    private: Path | None = None,
    *,
    threshold: float = DEFAULT_THRESHOLD,
    on_step: Callable[[int, int, str], None] | None = None,
) -> SeriesFigures:
    """The figures of the series in ``directory``; with ``private``, each release's audit
    verdict (:func:`~stream_release.audit.audit_directory`).

    Raises
    ------
    AuditInputError
        ``directory`` holds no release, or a file is malformed (one line naming it).
    """
    directory = Path(directory)
    paths = manifest_paths(directory)
    if not paths:
        raise AuditInputError(f"{str(directory)!r} holds no manifest-NNNN.json: no release")
    statuses: dict[int, str] = {}
    if private is not None:
        from stream_release.audit import audit_directory

        audit = audit_directory(directory, private=private)
        statuses = {r.sequence: r.status for r in audit.releases}
    releases = []
    for done, (number, path) in enumerate(paths, start=1):
        releases.append(_release(directory, number, path, threshold, statuses.get(number)))
        if on_step is not None:
            on_step(done, len(paths), releases[-1].label)
    return SeriesFigures(directory.name, releases, private is not None, threshold)


def _release(
    directory: Path, number: int, path: Path, threshold: float, status: str | None
) -> ReleaseFigures:
    manifest = check_manifest(path, read_json(path))
    lines = read_lines(directory / f"release-{number:04d}.jsonl")
    sizes = np.array([int(line["size"]) for line in lines], dtype=np.int64)
    utility = manifest.utility
    breach = manifest.breach if isinstance(manifest, GuaranteeManifest) else None
    # the global guarantee's suppressed rows are one more class (every QID '*'); a companion
    # kind publishes no row it suppresses
    star = (manifest.suppressed or 0) if breach is not None else 0
    return ReleaseFigures(
        sequence=manifest.sequence,
        label=manifest.release,
        published=manifest.published,
        suppressed=manifest.suppressed,
        groups=manifest.groups,
        sizes=sizes,
        bound=None if breach is None else breach.bound,
        breach_max=None if breach is None else breach.max,
        breach_p99=None if breach is None else breach.p99,
        spent_people=None if breach is None else breach.spent_people,
        spent_pairs=None if breach is None else breach.spent,
        query_median=utility.get("query_error_median"),
        query_trimmed=utility.get("query_error_trimmed"),
        query_mean=utility.get("query_error"),
        risks=release_risks(sizes, star, threshold),
        status=status,
    )
