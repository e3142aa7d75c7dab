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
hierarchy label; with the snapshot (:mod:`~stream_release.audit.snapshots` finds it), every
group against its rows and the suppressed multiset against the suppressed rows
(:mod:`~stream_release.audit.rows`). Another ``[mechanism] kind``: its registered
verification of the published files (:mod:`~stream_release.audit.mechanisms`). The series:
with its ledger (``DIR.ledger`` or ``ledger``), no release deleted, added or altered
(:mod:`~stream_release.audit.series_ledger`).

What it could not check is listed (:attr:`AuditReport.not_done`): no private files, no
configuration, no snapshot for a release, assignments holding pseudonyms, no ledger, a figure
the files do not allow. ``--strict`` makes any of them a failure. Without the private files
(public-only mode) no breach probability can be recomputed: such a release is *unchecked*
(:attr:`ReleaseAudit.breach_checked`), never ``ok``, and the command exits 3 when nothing else
failed.
"""

from __future__ import annotations

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
    manifest_paths,
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
from stream_release.audit.queries import AuditTable, CannotRecompute, release_table
from stream_release.audit.rows import Findings, check_labels, check_rows
from stream_release.audit.series_ledger import audit_ledger
from stream_release.audit.settings import (
    ConfiguredOutput,
    ConfiguredPrivacy,
    check_protected_named,
    check_settings,
    read_output,
    read_privacy,
)
from stream_release.audit.snapshots import Rekey, match_snapshots
from stream_release.audit.structure import check_structure, from_first_group
from stream_release.audit.utility import (
    Undone,
    UtilityInputs,
    check_stated_bounds,
    check_utility,
)
from stream_release.release_format import GLOBAL_GUARANTEE

__all__ = [
    "AuditInputError",
    "AuditReport",
    "ReleaseAudit",
    "audit_directory",
    "default_private",
]


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
    spent_pairs: int = 0
    """Their (individual, protected value) pairs past ``1/l``."""
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
            out.update(
                breach_max=None,
                suppressed_share=None,
                exempt_members=None,
                spent_people=None,
                spent_pairs=None,
            )
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
            f"{'breach.max':>11} {'1/l':>7} {'past 1/l':>12} {'supp.share':>10}  status"
        )
        lines = [head]
        for r in self.releases:
            if r.kind != GLOBAL_GUARANTEE:
                figures = f"{r.kind}: {r.guarantee}"
            elif r.breach_checked:
                past = f"{r.spent_people} ({r.spent_pairs})" if r.spent_people else "0"
                figures = (
                    f"{r.breach_max:>11.6f} {r.bound:>7.4f} {past:>12} {r.suppressed_share:>10.4f}"
                )
            else:  # no figure was recomputed: none is printed
                figures = f"{'-':>11} {r.bound:>7.4f} {'-':>12} {'-':>10}"
            rows = (
                f"{r.records:>8} {r.groups:>7} {r.suppressed:>6}"
                if r.breach_checked or r.kind != GLOBAL_GUARANTEE
                else f"{'-':>8} {r.groups:>7} {'-':>6}"
            )
            lines.append(f"{r.sequence:>4} {r.release[:14]:<14} {rows} {figures}  {r.status}")
        if not self.releases:
            lines.append("no releases found")
        elif any(r.kind == GLOBAL_GUARANTEE for r in self.releases):
            lines.append(
                "past 1/l: the release's individuals (their pairs) whose breach passed 1/l"
            )
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
    rekey: Rekey | None = None,
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
    rekey : the snapshots' ids as a worker's assignments name them (its keyed pseudonyms:
        :data:`~stream_release.audit.snapshots.Rekey`); ``None``: the assignments name ids

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
    hierarchies, configured, output = _read_config(config)
    paths = manifest_paths(directory)
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
    loaded = [(number, path, read_json(path)) for number, path in paths]
    matched, conflicts = match_snapshots(loaded, private, list(snapshots), report.not_done, rekey)
    sharded = any(p.is_dir() for p in private.glob("shard-*"))
    context = _Context(UtilityInputs(hierarchies, output, sharded), Undone())
    first_kind: str | None = None
    for expected, (number, path, manifest) in enumerate(loaded, start=1):
        _check_sequence(path, manifest, number)
        kind = check_manifest(path, manifest).kind
        first_kind = kind if first_kind is None else first_kind
        result, lines = _audit_release(
            directory, private, manifest, kind, state, ell, hierarchies, configured,
            matched.get(number), report.not_done, context,
        )  # fmt: skip
        if kind != GLOBAL_GUARANTEE:
            series.setdefault(kind, []).append((result, manifest, lines))
        _check_place(result, first_kind, conflicts.get(number), expected)
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


def _read_config(
    config: Path | None,
) -> tuple[Hierarchies | None, ConfiguredPrivacy | None, ConfiguredOutput | None]:
    """The configuration's hierarchies, privacy settings and output settings (none without
    a configuration)."""
    if config is None:
        return None, None, None
    path = Path(config)
    return read_hierarchies(path), read_privacy(path), read_output(path)


def _check_sequence(path: Path, manifest: dict[str, Any], number: int) -> None:
    """The manifest's ``sequence`` is the ``number`` its file name holds."""
    sequence = manifest.get("sequence")
    if not isinstance(sequence, int) or sequence != number:
        raise AuditInputError(f"{path}: sequence {sequence!r} where {number} was expected")


def _check_place(
    result: ReleaseAudit, first_kind: str, conflict: str | None, expected: int
) -> None:
    """The release's place in the series: the mechanism of release 1 (``first_kind``), the
    snapshot it was made from (``conflict``: why the one given under its name is not), the
    ``expected`` sequence number (else a release before it is missing)."""
    if result.kind != first_kind:
        result.problems.append(
            f"mechanism.kind = {result.kind!r} but release 1 is {first_kind!r}: a series keeps "
            "one mechanism"
        )
    if conflict is not None:
        result.problems.append(conflict)
    if result.sequence != expected:
        result.problems.insert(
            0, f"sequence {result.sequence} where {expected} was expected (a release is missing)"
        )


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
    ids, assigned, virtual = _assignments(assignments, private, problems)
    assigned = from_first_group(manifest, lines, assigned, problems)
    record = _private_record(private / f"private-{seq:04d}.json")
    if assignments.exists() and not ids and lines:
        problems.append(f"{assignments.name} assigns no id, but {len(lines)} groups are published")
    min_size = _min_group_size(manifest, kind)
    published = check_structure(manifest, lines, ids, assigned, virtual, min_size, problems)
    result = ReleaseAudit(
        sequence=seq,
        release=str(manifest.get("release", "")),
        records=int(np.count_nonzero(~virtual)),
        groups=len(lines),
        published=_published_rows(lines, ids, published, virtual),
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
    rows_of, own_values = _check_snapshot(
        manifest, lines, ids, assigned, virtual, record, snapshot, hierarchies, found
    )
    not_done.extend(found.not_done)
    bound_l = float(ell if ell is not None else manifest["l"])
    result.bound = 1.0 / bound_l
    check_public_bounds(manifest, lines, bound_l, problems)
    check_stated_bounds(manifest, problems)
    table = _utility_table(manifest, ids, virtual, snapshot, rows_of, context)
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
    result.spent_pairs = figures.spent_pairs
    result.manifest_breach_max = float((manifest.get("breach") or {}).get("max", 0.0))
    result.suppressed_share = figures.share_max
    result.exempt_members = figures.exempt_members
    return result, lines


def _assignments(
    path: Path, private: Path, problems: list[str]
) -> tuple[list[str], NDArray[np.int64], NDArray[np.bool_]]:
    """The release's assignments at ``path``: its ids, their groups and virtual flags (none
    without the file, a problem when other releases in ``private`` have theirs)."""
    if path.exists():
        return read_assignments(path)
    if any(private.glob("assignments-*.csv")):
        problems.append(f"{path.name} is missing")
    return [], np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.bool_)


def _private_record(path: Path) -> dict[str, Any] | None:
    """The release's private record at ``path``, checked (``None``: there is none)."""
    if not path.exists():
        return None
    record = read_json(path)
    check_private_record(path, record)
    return record


def _min_group_size(manifest: dict[str, Any], kind: str) -> int:
    """The smallest group the release allows: its strategy's ``min_group_size`` for the
    global guarantee, else 1."""
    if kind != GLOBAL_GUARANTEE:
        return 1
    return int((manifest.get("strategy") or {}).get("min_group_size", 1))


def _published_rows(
    lines: list[dict[str, Any]],
    ids: list[str],
    published: NDArray[np.bool_],
    virtual: NDArray[np.bool_],
) -> int:
    """How many real rows are published: the assigned ids in a group, or, without the
    assignments, the groups' sizes less their virtual members."""
    if ids:
        return int(np.count_nonzero(published & ~virtual))
    return sum(int(line["size"]) - int(line.get("virtual", 0) or 0) for line in lines)


def _check_snapshot(
    manifest: dict[str, Any],
    lines: list[dict[str, Any]],
    ids: list[str],
    assigned: NDArray[np.int64],
    virtual: NDArray[np.bool_],
    record: dict[str, Any] | None,
    snapshot: Snapshot | None,
    hierarchies: Hierarchies | None,
    found: Findings,
) -> tuple[dict[str, list[str]] | None, dict[str, str] | None]:
    """The groups against their snapshot rows, and the suppressed rows against the private
    record; returns each assigned real id's row and each suppressed id's value (``None``:
    no snapshot, no assignments, or assignments that do not name the snapshot's ids)."""
    if snapshot is None or not ids:
        return None, None
    schema = manifest.get("schema") or {}
    register = None
    if virtual.any():
        register = _register(record, str(schema.get("id", "id")), found)
    rows_of = check_rows(
        lines, ids, assigned, snapshot, schema, hierarchies, found,
        virtual=virtual, register=register,
    )  # fmt: skip
    if rows_of is None:
        return None, None
    return rows_of, _check_suppressed_rows(ids, assigned, rows_of, snapshot, schema, record, found)


def _utility_table(
    manifest: dict[str, Any],
    ids: list[str],
    virtual: NDArray[np.bool_],
    snapshot: Snapshot | None,
    rows_of: dict[str, list[str]] | None,
    context: _Context,
) -> AuditTable | None:
    """The snapshot's rows in assignment order, coded for the utility figures (``None``: no
    rows of the snapshot, virtual members, or a table that cannot be built: the reason in
    ``context.undone``)."""
    if snapshot is None or rows_of is None or virtual.any():
        return None
    try:
        inputs = context.utility
        numeric = inputs.output.numeric if inputs.output is not None else None
        return release_table(manifest, ids, snapshot, rows_of, inputs.hierarchies, numeric)
    except CannotRecompute as exc:
        context.undone.add(
            f"the utility figures against {snapshot.path.name}: {exc}", int(manifest["sequence"])
        )
        return None


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
