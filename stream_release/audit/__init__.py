"""Independent audit of a series of releases (``stream-release audit``).

Recomputes every claim from the files alone: the public group lines and manifests of ``DIR``,
the private assignments and records of ``PDIR`` (default ``DIR.private``; a series written
before the two were apart keeps them in ``DIR``), and, when given, the configuration (for its
hierarchies) and the snapshots. It imports nothing from the planning code: its arithmetic is
its own (:mod:`~stream_release.audit.ledger`, exact near every bound), its file reading too
(:mod:`~stream_release.audit.files`).

Per release, every kind: group ids ``0..G-1``, each size equal to its sensitive counts, its
members and its assigned ids, no duplicate id, the manifest's counts. The global guarantee
then (:mod:`~stream_release.audit.global_guarantee`): the suppressed set's shares, every bound
of every pair linked, the manifest's breach and suppressed-set figures; its utility figures
(:mod:`~stream_release.audit.utility`: group sizes, suppression, discernibility, NCP and the
count-query errors, each as far as the files given allow); with the configuration, every
hierarchy label; with the snapshot, every group against its rows and the suppressed multiset
against the suppressed rows (:mod:`~stream_release.audit.rows`). Another ``[mechanism]
kind``: its registered verification of the published files
(:mod:`~stream_release.audit.mechanisms`). The series: with its ledger (``DIR.ledger`` or
``ledger``), no release deleted, added or altered (:mod:`~stream_release.audit.series_ledger`).

What it could not check is listed (:attr:`AuditReport.not_done`): no private files, no
configuration, no snapshot for a release, assignments holding pseudonyms, no ledger, a figure
the files do not allow. ``--strict`` makes any of them a failure. Without the private files
(public-only mode) no breach probability can be recomputed: such a release is *unchecked*
(:attr:`ReleaseAudit.breach_checked`), never ``ok``, and the command exits 3 when nothing else
failed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.audit.files import (
    AuditInputError,
    Hierarchies,
    Snapshot,
    check_manifest,
    check_private_record,
    default_private,
    read_assignments,
    read_hierarchies,
    read_json,
    read_lines,
    read_snapshot,
)
from stream_release.audit.global_guarantee import (
    SeriesState,
    audit_linkages,
    check_public_bounds,
)
from stream_release.audit.mechanisms import guarantee_summary, verify_mechanism
from stream_release.audit.queries import CannotRecompute, release_table
from stream_release.audit.rows import Findings, check_labels, check_rows
from stream_release.audit.series_ledger import audit_ledger
from stream_release.audit.settings import (
    ConfiguredPrivacy,
    check_protected_named,
    check_settings,
    read_output,
    read_privacy,
)
from stream_release.audit.structure import check_structure, from_first_group
from stream_release.audit.utility import (
    Undone,
    UtilityInputs,
    check_stated_bounds,
    check_utility,
)
from stream_release.release_format import GLOBAL_GUARANTEE, manifest_kind

__all__ = [
    "AuditInputError",
    "AuditReport",
    "ReleaseAudit",
    "audit_directory",
    "default_private",
]

_MANIFEST = re.compile(r"^manifest-(\d+)\.json$")


@dataclass
class ReleaseAudit:
    """Outcome for one release."""

    sequence: int
    release: str
    records: int
    groups: int
    published: int
    suppressed: int
    breach_max: float
    manifest_breach_max: float
    bound: float
    problems: list[str] = field(default_factory=list)
    kind: str = GLOBAL_GUARANTEE
    """The release's ``mechanism.kind``; another kind's ``breach_*`` and ``bound`` are 0."""
    guarantee: str = ""
    """Another kind's guarantee in a few words (e.g. ``epsilon 1, delta 4.07e-14``)."""
    suppressed_share: float = 0.0
    """The largest share of a protected value among the suppressed rows."""
    exempt_members: int = 0
    """Suppressed individuals spent for a value of the suppressed set (global guarantee)."""
    spent_people: int = 0
    """Individuals of the release with a pair past ``1/l`` (global guarantee; the files')."""
    breach_checked: bool = False
    """Whether the breach of every pair was recomputed (a global-guarantee release with its
    private assignments); otherwise ``breach_max`` and ``suppressed_share`` are no figures."""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def status(self) -> str:
        """``ok``, ``FAIL: ...`` (the first problems), or, for a global-guarantee release
        whose breach could not be recomputed, ``unchecked: ...``."""
        if self.problems:
            return "FAIL: " + "; ".join(self.problems[:3])
        if self.kind == GLOBAL_GUARANTEE and not self.breach_checked:
            return "unchecked: no private files, the breach cannot be recomputed"
        return "ok"

    def as_json(self) -> dict[str, Any]:
        """The release's entry of ``audit --json``: a figure the audit did not recompute is
        ``null``, not a made-up 0."""
        out = {**self.__dict__, "status": self.status}
        if not self.breach_checked:
            out.update(breach_max=None, suppressed_share=None, exempt_members=None)
            if self.kind == GLOBAL_GUARANTEE:  # rows counted from the private assignments
                out.update(records=None, suppressed=None)
        return out


@dataclass
class AuditReport:
    releases: list[ReleaseAudit]
    not_done: list[str] = field(default_factory=list)
    """The checks the audit could not do, one line each."""
    problems: list[str] = field(default_factory=list)
    """Problems of the series rather than of one release (the series ledger's)."""

    @property
    def ok(self) -> bool:
        """No check found a problem (checks not done aside: see :attr:`strict_ok` and
        :attr:`guarantee_checked`)."""
        return bool(self.releases) and not self.problems and all(r.ok for r in self.releases)

    @property
    def strict_ok(self) -> bool:
        """:attr:`ok`, and every check was done."""
        return self.ok and not self.not_done

    @property
    def guarantee_checked(self) -> bool:
        """Whether every global-guarantee release had its breach recomputed (not in
        public-only mode)."""
        return all(r.breach_checked for r in self.releases if r.kind == GLOBAL_GUARANTEE)

    def exit_code(self, *, strict: bool = False) -> int:
        """``stream-release audit``'s exit code: 1 when a check failed (with ``strict``, also
        when one was not done), 3 when none failed but a release's breach could not be
        recomputed (no private files), else 0."""
        if not (self.strict_ok if strict else self.ok):
            return 1
        return 0 if self.guarantee_checked else 3

    def as_json(self) -> dict[str, Any]:
        """``audit --json``: each release's entry, the series' problems, the checks not done."""
        return {
            "releases": [r.as_json() for r in self.releases],
            "problems": self.problems,
            "not_done": self.not_done,
        }

    def table(self) -> str:
        head = (
            f"{'seq':>4} {'release':<14} {'rows':>8} {'groups':>7} {'supp':>6} "
            f"{'breach.max':>11} {'1/l':>7} {'supp.share':>10}  status"
        )
        lines = [head]
        for r in self.releases:
            if r.kind != GLOBAL_GUARANTEE:
                figures = f"{r.kind}: {r.guarantee}"
            elif r.breach_checked:
                figures = f"{r.breach_max:>11.6f} {r.bound:>7.4f} {r.suppressed_share:>10.4f}"
            else:  # no figure was recomputed: none is printed
                figures = f"{'-':>11} {r.bound:>7.4f} {'-':>10}"
            rows = (
                f"{r.records:>8} {r.groups:>7} {r.suppressed:>6}"
                if r.breach_checked or r.kind != GLOBAL_GUARANTEE
                else f"{'-':>8} {r.groups:>7} {'-':>6}"
            )
            lines.append(f"{r.sequence:>4} {r.release[:14]:<14} {rows} {figures}  {r.status}")
        if not self.releases:
            lines.append("no releases found")
        lines.extend(f"series: FAIL: {problem}" for problem in self.problems)
        if self.not_done:
            lines.append("not checked:")
            lines.extend(f"  - {line}" for line in self.not_done)
        return "\n".join(lines)


def audit_directory(
    directory: Path,
    ell: float | None = None,
    private: Path | None = None,
    *,
    config: Path | None = None,
    snapshots: list[Path] | tuple[Path, ...] = (),
    ledger: Path | None = None,
    on_step: Callable[[int, int, str], None] | None = None,
) -> AuditReport:
    """Audit every release in ``directory`` in sequence order.

    Parameters
    ----------
    directory : the public files
    ell : audit against ``1/l`` instead of each manifest's ``l``
    private : the private files (default :func:`default_private`)
    config : a configuration file: its hierarchies check every label, its settings the
        manifests' and, with the snapshots, the query errors
    snapshots : snapshot CSVs, matched to the releases by the sha256 in their private
        records (else by file name = release label, else in order)
    ledger : the series ledger (default ``DIR.ledger`` when it exists): the archive against
        every release it records
    on_step : ``on_step(done, total, release)`` after each release is audited

    Raises
    ------
    AuditInputError
        A file is malformed (one line naming it).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise AuditInputError(f"{str(directory)!r} is not a directory of releases")
    private_given = private is not None
    private = Path(private) if private is not None else default_private(directory)
    hierarchies = read_hierarchies(Path(config)) if config is not None else None
    configured = read_privacy(Path(config)) if config is not None else None
    output = read_output(Path(config)) if config is not None else None
    paths = sorted(
        (int(m.group(1)), p)
        for p in directory.iterdir()
        if (m := _MANIFEST.match(p.name)) is not None
    )
    report = AuditReport([])
    public_only = not any(private.glob("assignments-*.csv"))
    if public_only:
        report.not_done.append(
            f"every check of the private files: none in {str(private)!r} (give --private): "
            "no breach probability (breach.max, p50, p99, spent), no share or linkage of a "
            "suppressed set, and no records_in or suppressed count can be recomputed"
        )
    if hierarchies is None:
        report.not_done.append(
            "hierarchy labels against the configured hierarchies, and each manifest's l, "
            "strategy, protected values and group-size cap against the configuration (checked "
            "against the papers only; give --config)"
        )
    state = SeriesState()
    series: dict[str, list[tuple[ReleaseAudit, dict[str, Any], list[dict[str, Any]]]]] = {}
    first_kind: str | None = None
    loaded = [(number, path, read_json(path)) for number, path in paths]
    matched, conflicts = _match_snapshots(loaded, private, list(snapshots), report.not_done)
    sharded = any(p.is_dir() for p in private.glob("shard-*"))
    context = _Context(UtilityInputs(hierarchies, output, sharded), Undone())
    for expected, (number, path, manifest) in enumerate(loaded, start=1):
        sequence = manifest.get("sequence")
        if not isinstance(sequence, int) or sequence != number:
            raise AuditInputError(f"{path}: sequence {sequence!r} where {number} was expected")
        kind = check_manifest(path, manifest).kind
        result, lines = _audit_release(
            directory, private, manifest, kind, state, ell, hierarchies, configured,
            matched.get(number), report.not_done, context,
        )  # fmt: skip
        if kind != GLOBAL_GUARANTEE:
            series.setdefault(kind, []).append((result, manifest, lines))
        if first_kind is None:
            first_kind = kind
        elif kind != first_kind:
            result.problems.append(
                f"mechanism.kind = {kind!r} but release 1 is {first_kind!r}: a series keeps one "
                "mechanism"
            )
        if number in conflicts:
            result.problems.append(conflicts[number])
        if number != expected:
            result.problems.insert(
                0, f"sequence {number} where {expected} was expected (a release is missing)"
            )
        report.releases.append(result)
        if on_step is not None:
            on_step(expected, len(loaded), str(manifest.get("release", number)))
    for kind, releases in series.items():
        verify_mechanism(kind, releases)
    report.not_done.extend(context.undone.lines())
    problems, undone = audit_ledger(
        directory, private if private_given or not public_only else None, ledger,
        [number for number, _ in paths],
    )  # fmt: skip
    report.problems.extend(problems)
    report.not_done.extend(undone)
    return report


@dataclass(frozen=True)
class _Context:
    """What every release's audit shares: the inputs of the utility figures and what could
    not be recomputed."""

    utility: UtilityInputs
    undone: Undone


def _audit_release(
    directory: Path,
    private: Path,
    manifest: dict[str, Any],
    kind: str,
    state: SeriesState,
    ell: float | None,
    hierarchies: Hierarchies | None,
    configured: ConfiguredPrivacy | None,
    snapshot: Snapshot | None,
    not_done: list[str],
    context: _Context,
) -> tuple[ReleaseAudit, list[dict[str, Any]]]:
    seq = int(manifest["sequence"])
    problems: list[str] = []
    lines = read_lines(directory / f"release-{seq:04d}.jsonl")
    assignments = private / f"assignments-{seq:04d}.csv"
    if assignments.exists():
        ids, assigned, virtual = read_assignments(assignments)
    else:
        ids, assigned, virtual = [], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.bool_)
        if any(private.glob("assignments-*.csv")):
            problems.append(f"{assignments.name} is missing")
    assigned = from_first_group(manifest, lines, assigned, problems)
    record_path = private / f"private-{seq:04d}.json"
    record = read_json(record_path) if record_path.exists() else None
    if record is not None:
        check_private_record(record_path, record)
    if assignments.exists() and not ids and lines:
        problems.append(f"{assignments.name} assigns no id, but {len(lines)} groups are published")
    strategy = manifest.get("strategy") or {}
    min_size = int(strategy.get("min_group_size", 1)) if kind == GLOBAL_GUARANTEE else 1
    published = check_structure(manifest, lines, ids, assigned, virtual, min_size, problems)
    result = ReleaseAudit(
        sequence=seq,
        release=str(manifest.get("release", "")),
        records=int(np.count_nonzero(~virtual)),
        groups=len(lines),
        published=(
            int(np.count_nonzero(published & ~virtual))
            if ids
            else sum(int(line["size"]) - int(line.get("virtual", 0) or 0) for line in lines)
        ),
        suppressed=int(np.count_nonzero(~published & ~virtual)),
        breach_max=0.0,
        manifest_breach_max=0.0,
        bound=0.0,
        problems=problems,
        kind=kind,
    )
    if kind != GLOBAL_GUARANTEE:
        result.guarantee = guarantee_summary(manifest)
        return result, lines
    found = Findings(problems=problems)
    check_settings(manifest, configured, problems)
    check_protected_named(manifest, lines, record, problems)
    if hierarchies is not None:
        check_labels(lines, hierarchies, found)
    own_values: dict[str, str] | None = None
    rows_of: dict[str, list[str]] | None = None
    if snapshot is not None and ids:
        schema = manifest.get("schema") or {}
        register = None
        if virtual.any():
            register = _register(record, str(schema.get("id", "id")), found)
        rows_of = check_rows(
            lines, ids, assigned, snapshot, schema, hierarchies, found,
            virtual=virtual, register=register,
        )  # fmt: skip
        if rows_of is not None:
            own_values = _check_suppressed_rows(
                ids, assigned, rows_of, snapshot, schema, record, found
            )
    not_done.extend(found.not_done)
    bound_l = float(ell if ell is not None else manifest["l"])
    result.bound = 1.0 / bound_l
    check_public_bounds(manifest, lines, bound_l, problems)
    check_stated_bounds(manifest, problems)
    table = None
    if snapshot is not None and rows_of is not None and not virtual.any():
        try:
            inputs = context.utility
            numeric = inputs.output.numeric if inputs.output is not None else None
            table = release_table(manifest, ids, snapshot, rows_of, inputs.hierarchies, numeric)
        except CannotRecompute as exc:
            context.undone.add(f"the utility figures against {snapshot.path.name}: {exc}", seq)
    check_utility(
        manifest, lines, assigned if ids else None, virtual, table, context.utility, problems,
        context.undone,
    )  # fmt: skip
    if not ids:
        return result, lines
    figures = audit_linkages(
        state, manifest, lines, ids, assigned, record, bound_l, problems, not_done, own_values,
        virtual,
    )  # fmt: skip
    result.breach_checked = True
    result.breach_max = figures.breach_max
    result.spent_people = figures.spent_people
    result.manifest_breach_max = float((manifest.get("breach") or {}).get("max", 0.0))
    result.suppressed_share = figures.share_max
    result.exempt_members = figures.exempt_members
    return result, lines


def _register(record: dict[str, Any] | None, id_column: str, found: Findings) -> Snapshot | None:
    """The population register the private record names, if its file still has the recorded
    sha256 (else the reason goes to ``found.not_done``)."""
    source = (record or {}).get("registry") or {}
    path = Path(str(source.get("file", "")))
    unchecked = "the QIDs of the virtual members against the register (their groups' real "
    if not source.get("file") or not path.is_file():
        found.not_done.append(
            unchecked + "members were checked): the private record names no register file that "
            "exists"
        )
        return None
    register = read_snapshot(path, id_column)
    if register.sha256 != source.get("sha256"):
        found.not_done.append(
            unchecked + f"members were checked): {path.name} is not the register the release "
            "was made with (its sha256 differs from the private record's)"
        )
        return None
    return register


def _check_suppressed_rows(
    ids: list[str],
    assigned: NDArray[np.int64],
    rows_of: dict[str, list[str]],
    snapshot: Snapshot,
    schema: dict[str, Any],
    record: dict[str, Any] | None,
    found: Findings,
) -> dict[str, str]:
    """The private record's suppressed multiset against the suppressed rows' values; returns
    each suppressed id's value."""
    column = snapshot.header.index(str(schema.get("sensitive")))
    own = {i: rows_of[i][column] for i, g in zip(ids, assigned.tolist(), strict=True)
           if g < 0 and i in rows_of}  # fmt: skip
    block = (record or {}).get("suppressed")
    if not isinstance(block, dict):
        return own
    counts: dict[str, int] = {}
    for value in own.values():
        counts[value] = counts.get(value, 0) + 1
    stated = {str(k): int(v) for k, v in (block.get("sensitive") or {}).items()}
    if counts != stated:
        found.problems.append("the suppressed rows' values differ from the private record's")
    return own


def _match_snapshots(
    loaded: list[tuple[int, Path, dict[str, Any]]],
    private: Path,
    snapshots: list[Path],
    not_done: list[str],
) -> tuple[dict[int, Snapshot], dict[int, str]]:
    """Each global-guarantee release's snapshot: by the sha256 of its private record, else by
    file name (release label), else by position; the record's own path when no snapshot is
    given and the file there still has the recorded sha256. Also the releases whose recorded
    sha256 differs from the given snapshot named like them (a problem, not a check undone)."""
    out: dict[int, Snapshot] = {}
    conflicts: dict[int, str] = {}
    candidates = []
    for number, _, manifest in loaded:
        if manifest_kind(manifest) != GLOBAL_GUARANTEE:
            continue
        schema = manifest.get("schema") or {}
        candidates.append((number, str(manifest.get("release", "")), str(schema.get("id", "id"))))
    if not candidates:
        return out, conflicts
    id_column = candidates[0][2]
    given = [read_snapshot(path, id_column) for path in snapshots]
    by_hash = {s.sha256: s for s in given}
    by_name = {s.path.stem: s for s in given}
    missing = []
    for position, (number, label, _) in enumerate(candidates):
        record_path = private / f"private-{number:04d}.json"
        source = (read_json(record_path).get("source") or {}) if record_path.exists() else {}
        sha = source.get("sha256")
        if sha in by_hash:
            out[number] = by_hash[sha]
        elif not given and sha and source.get("file") and Path(source["file"]).is_file():
            found = read_snapshot(Path(source["file"]), id_column)
            if found.sha256 == sha:
                out[number] = found
        elif not sha and label in by_name:
            out[number] = by_name[label]
        elif not sha and len(given) == len(candidates):
            out[number] = given[position]
        if number not in out and sha and label in by_name:
            conflicts[number] = (
                f"{by_name[label].path.name} is not the snapshot release {number} was made "
                "from: its sha256 differs from the private record's"
            )
        elif number not in out:
            missing.append(number)
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (" ..." if len(missing) > 10 else "")
        not_done.append(
            f"groups against their snapshot rows: no snapshot (with the recorded sha256) for "
            f"releases {shown} (give the snapshots)"
        )
    return out, conflicts
