"""Independent audit of a series of releases (``stream-release audit DIR``).

Recomputes every breach probability from the release files alone (CONTRACT §4): the group
lines, the manifests and the private assignments. It uses neither the history store nor the
grouping code, and evaluates Lemma 4 of paper 003 with its own arithmetic:

    p(o,s,k) = 1 - prod_j (1 - n_{j,s} / n_j)   over the releases j whose group of o holds s,

accumulated as ``sum log1p(-n_{j,s}/n_j)`` per (individual, value). A release fails when

* a published individual's breach for a protected value exceeds ``1/l + 1e-9`` (the margin of
  ``privacy.breach.BREACH_ATOL``), or
* a group's published content does not match its assigned rows: group ids not ``0..G-1``, a
  size different from the number of ids assigned to it or from the sum of its sensitive counts,
  an anatomy member list of another length, a group below the manifest's ``min_group_size``,
  manifest counts that disagree with the assignments, a duplicate id; and, when the snapshot
  named in the manifest's ``source`` is readable and has the recorded sha256, a sensitive
  multiset or an exact/interval/list QID that does not match the assigned rows, or
* the manifest's ``breach.max`` differs from the recomputed one by more than 1e-9.

Other mechanisms (``[mechanism] kind``, :mod:`stream_release.mechanisms`). The audit
dispatches on each manifest's ``mechanism.kind`` (none = the global guarantee). A release of
another kind gets the same structural checks against its private assignments (group ids,
sizes, counts, duplicate ids, the manifest's counts, the snapshot when its sha256 is recorded)
but never the ``1/l`` breach check, which is the global guarantee's; then the mode's own
verification from the published files: its registered ``verify_series`` over every release of
the directory when it has one (each problem naming its release as ``release N: ...``), else
its ``verify_release(manifest, lines)`` release by release. A directory whose releases name
different kinds fails: a series keeps one mechanism.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

AUDIT_ATOL = 1e-9


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
    kind: str = "global-guarantee"
    """The release's ``mechanism.kind``; another kind's ``breach_*`` and ``bound`` are 0."""
    guarantee: str = ""
    """Another kind's guarantee in a few words (e.g. ``epsilon 1, delta 4.07e-14``)."""

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class AuditReport:
    releases: list[ReleaseAudit]

    @property
    def ok(self) -> bool:
        return bool(self.releases) and all(r.ok for r in self.releases)

    def table(self) -> str:
        head = (
            f"{'seq':>4} {'release':<14} {'rows':>8} {'groups':>7} {'supp':>6} "
            f"{'breach.max':>11} {'1/l':>7}  status"
        )
        lines = [head]
        for r in self.releases:
            status = "ok" if r.ok else "FAIL: " + "; ".join(r.problems[:3])
            figures = (
                f"{r.breach_max:>11.6f} {r.bound:>7.4f}"
                if r.kind == GLOBAL_GUARANTEE
                else f"{r.kind}: {r.guarantee}"
            )
            lines.append(
                f"{r.sequence:>4} {r.release[:14]:<14} {r.records:>8} {r.groups:>7} "
                f"{r.suppressed:>6} {figures}  {status}"
            )
        if not self.releases:
            lines.append("no releases found")
        return "\n".join(lines)


class _Ledger:
    """Running ``sum log1p(-n_s/n)`` per (individual index, value index)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.values: dict[str, int] = {}
        self.keys = np.zeros(0, dtype=np.int64)
        self.log_p = np.zeros(0, dtype=np.float64)

    def index(self, ids: list[str]) -> np.ndarray:
        table = self.ids
        return np.fromiter(
            (table.setdefault(i, len(table)) for i in ids), dtype=np.int64, count=len(ids)
        )

    def value(self, name: str) -> int:
        return self.values.setdefault(name, len(self.values))

    def add(self, keys: np.ndarray, factors: np.ndarray) -> None:
        all_keys = np.concatenate([self.keys, keys])
        all_log = np.concatenate([self.log_p, factors])
        uniq, inverse = np.unique(all_keys, return_inverse=True)
        summed = np.zeros(uniq.shape[0], dtype=np.float64)
        np.add.at(summed, inverse, all_log)
        self.keys, self.log_p = uniq, summed


_VALUE_SPACE = 1 << 24  # value indexes per individual in the ledger key

GLOBAL_GUARANTEE = "global-guarantee"
"""The kind of a manifest without a ``mechanism`` block."""

_RELEASE_PREFIX = re.compile(r"^release (\d+): ")


def manifest_kind(manifest: dict[str, Any]) -> str:
    """The ``mechanism.kind`` of a manifest (none = the global guarantee)."""
    block = manifest.get("mechanism")
    return str(block.get("kind")) if isinstance(block, dict) else GLOBAL_GUARANTEE


def default_private(directory: Path) -> Path:
    """The private directory of the public ``directory``: ``DIR.private`` when it exists,
    else ``DIR`` itself (a series written before public and private files were apart)."""
    private = directory.with_name(directory.name + ".private")
    return private if private.is_dir() else directory


def audit_directory(
    directory: Path, ell: float | None = None, private: Path | None = None
) -> AuditReport:
    """Audit every release in ``directory`` in sequence order; the private files are read
    from ``private`` (default :func:`default_private`)."""
    private = private if private is not None else default_private(directory)
    manifests = sorted(directory.glob("manifest-*.json"))
    ledger = _Ledger()
    out: list[ReleaseAudit] = []
    series: dict[str, list[tuple[ReleaseAudit, dict[str, Any], list[dict[str, Any]]]]] = {}
    first_kind: str | None = None
    for expected, path in enumerate(manifests, start=1):
        manifest = json.loads(path.read_text(encoding="utf-8"))
        sequence = int(manifest.get("sequence", -1))
        kind = manifest_kind(manifest)
        if kind == GLOBAL_GUARANTEE:
            result = _audit_release(directory, private, manifest, ledger, ell)
        else:
            result, lines = _audit_mechanism_release(directory, private, manifest, kind)
            series.setdefault(kind, []).append((result, manifest, lines))
        if first_kind is None:
            first_kind = kind
        elif kind != first_kind:
            result.problems.append(
                f"mechanism.kind = {kind!r} but release 1 is {first_kind!r}: a series keeps one "
                "mechanism"
            )
        if sequence != expected:
            result.problems.insert(
                0, f"sequence {sequence} where {expected} was expected (a release is missing)"
            )
        out.append(result)
    for kind, releases in series.items():
        _verify_mechanism(kind, releases)
    return AuditReport(out)


def _audit_mechanism_release(
    directory: Path, private: Path, manifest: dict[str, Any], kind: str
) -> tuple[ReleaseAudit, list[dict[str, Any]]]:
    """The structural checks of a release of another kind (no breach check); its mode's own
    verification runs in :func:`_verify_mechanism`."""
    seq = int(manifest["sequence"])
    problems: list[str] = []
    groups, ids, _, published_mask = _check_structure(
        directory, private, manifest, 1, problems, snapshot=False
    )
    block = manifest.get("mechanism") or {}
    guarantee = ""
    if isinstance(block.get("epsilon"), int | float) and isinstance(
        block.get("delta"), int | float
    ):
        guarantee = f"epsilon {block['epsilon']:g}, delta {block['delta']:.3g}"
        total = block.get("series")
        if isinstance(total, dict) and isinstance(total.get("epsilon"), int | float):
            guarantee += f" (series {total['epsilon']:g}, {total.get('delta', math.nan):.3g})"
    result = ReleaseAudit(
        sequence=seq,
        release=str(manifest.get("release", "")),
        records=len(ids),
        groups=len(groups),
        published=int(published_mask.sum()),
        suppressed=int((~published_mask).sum()),
        breach_max=0.0,
        manifest_breach_max=0.0,
        bound=0.0,
        problems=problems,
        kind=kind,
        guarantee=guarantee,
    )
    return result, groups


def _verify_mechanism(
    kind: str, releases: list[tuple[ReleaseAudit, dict[str, Any], list[dict[str, Any]]]]
) -> None:
    """Run the mode's registered verification; append each problem to its release."""
    # imported here: the mechanisms import the configuration, which the audit does not need
    from stream_release.errors import ConfigError
    from stream_release.mechanisms import registration

    try:
        entry = registration(kind)
    except ConfigError as exc:
        for result, _, _ in releases:
            result.problems.append(f"cannot verify: {exc}")
        return
    verify_series = entry.series_verifier()
    if verify_series is not None:
        by_sequence = {result.sequence: result for result, _, _ in releases}
        for problem in verify_series([(manifest, lines) for _, manifest, lines in releases]):
            match = _RELEASE_PREFIX.match(problem)
            owner = by_sequence.get(int(match.group(1))) if match else None
            if owner is None:
                owner = releases[-1][0]
            owner.problems.append(problem[match.end() :] if match else problem)
        return
    verify = entry.verifier()
    if verify is None:
        return
    for result, manifest, lines in releases:
        result.problems.extend(verify(manifest, lines))


def _check_structure(
    directory: Path,
    private: Path,
    manifest: dict[str, Any],
    min_size: int,
    problems: list[str],
    *,
    snapshot: bool = True,
) -> tuple[list[dict[str, Any]], list[str], np.ndarray, np.ndarray]:
    """Checks of a release's files against each other: group ids ``0..G-1``, each size equal
    to its sensitive counts, its members and its assigned ids, sizes ``>= min_size``, no
    duplicate id, the manifest's counts (those it states), and, with ``snapshot``, the
    snapshot when recorded (the global guarantee: other mechanisms publish transformed values,
    which their own verification checks).

    Returns the group lines, the assigned ids, their groups (-1: suppressed) and which of
    them are published (in an existing group).
    """
    seq = int(manifest["sequence"])
    groups = _read_groups(directory / f"release-{seq:04d}.jsonl", problems)
    ids, assigned = _read_assignments(private / f"assignments-{seq:04d}.csv", problems)
    n_groups = len(groups)

    sizes = np.array([int(g["size"]) for g in groups], dtype=np.int64)
    if [int(g["group"]) for g in groups] != list(range(n_groups)):
        problems.append("group ids are not 0..G-1 in order")
    for g, line in enumerate(groups):
        counts = line.get("sensitive", {})
        if sum(int(c) for c in counts.values()) != sizes[g]:
            problems.append(
                f"group {g}: size {sizes[g]} but its sensitive counts sum to {sum(counts.values())}"
            )
        if "members" in line and len(line["members"]) != sizes[g]:
            problems.append(f"group {g}: size {sizes[g]} but {len(line['members'])} members listed")
        if sizes[g] < min_size:
            problems.append(f"group {g}: size {sizes[g]} below min_group_size {min_size}")
    published_mask = assigned >= 0
    if np.any(assigned >= n_groups):
        problems.append(f"an id is assigned to group {int(assigned.max())}, which does not exist")
        published_mask &= assigned < n_groups
    per_group = np.bincount(assigned[published_mask], minlength=n_groups)[:n_groups]
    bad = np.flatnonzero(per_group != sizes) if n_groups else np.zeros(0, dtype=np.int64)
    if bad.size:
        g = int(bad[0])
        problems.append(
            f"group {g}: size {sizes[g]} but {per_group[g]} ids assigned ({bad.size} groups differ)"
        )
    if len(set(ids)) != len(ids):
        problems.append("an id appears twice in the assignments")
    for key, value in (
        ("records_in", len(ids)),
        ("published", int(published_mask.sum())),
        ("suppressed", int((~published_mask).sum())),
        ("groups", n_groups),
    ):
        if key in manifest and int(manifest[key]) != value:
            problems.append(f"manifest {key} = {manifest[key]} but the files give {value}")
    if snapshot:
        _check_against_snapshot(
            _private_record(private, seq), manifest, groups, ids, assigned, problems
        )
    return groups, ids, assigned, published_mask


def _audit_release(
    directory: Path,
    private: Path,
    manifest: dict[str, Any],
    ledger: _Ledger,
    ell: float | None,
) -> ReleaseAudit:
    seq = int(manifest["sequence"])
    bound_l = float(ell if ell is not None else manifest["l"])
    strategy = manifest.get("strategy", {})
    protected = set(strategy.get("protected") or [])
    min_size = int(strategy.get("min_group_size", 1))
    problems: list[str] = []
    groups, ids, assigned, published_mask = _check_structure(
        directory, private, manifest, min_size, problems
    )
    n_groups = len(groups)
    sizes = np.array([int(g["size"]) for g in groups], dtype=np.int64)

    # Lemma 4: one linkage per (published individual, value of its group)
    rows = ledger.index([ids[i] for i in np.flatnonzero(published_mask)])
    g_of_row = assigned[published_mask]
    pair_group, pair_value, pair_factor = [], [], []
    for g, line in enumerate(groups):
        size = sizes[g]
        for value, count in line.get("sensitive", {}).items():
            pair_group.append(g)
            pair_value.append(ledger.value(value))
            pair_factor.append(math.log1p(-int(count) / size) if int(count) < size else -math.inf)
    pg = np.array(pair_group, dtype=np.int64)
    order = np.argsort(pg, kind="stable")
    pg, pv, pf = (
        pg[order],
        np.array(pair_value, np.int64)[order],
        np.array(pair_factor, np.float64)[order],
    )
    ptr = np.searchsorted(pg, np.arange(n_groups + 1))
    counts = np.diff(ptr)[g_of_row]
    starts = ptr[g_of_row]
    idx = np.repeat(starts - np.concatenate([[0], np.cumsum(counts)[:-1]]), counts) + np.arange(
        int(counts.sum())
    )
    owners = np.repeat(rows, counts)
    ledger.add(owners * _VALUE_SPACE + pv[idx], pf[idx])

    # breach of the individuals published in this release, over protected values
    names = {i: v for v, i in ledger.values.items()}
    is_protected = np.array(
        [not protected or names[i] in protected for i in range(len(names))], dtype=bool
    )
    key_owner = ledger.keys // _VALUE_SPACE
    key_value = ledger.keys % _VALUE_SPACE
    mine = np.isin(key_owner, rows) & is_protected[key_value]
    probs = -np.expm1(ledger.log_p[mine])
    breach_max = float(probs.max()) if probs.size else 0.0
    bound = 1.0 / bound_l
    if breach_max > bound + AUDIT_ATOL:
        worst = int(np.count_nonzero(probs > bound + AUDIT_ATOL))
        problems.append(
            f"breach {breach_max:.6f} > 1/l = {bound:.6f} ({worst} (individual, value) pairs)"
        )
    claimed = float(manifest.get("breach", {}).get("max", breach_max))
    if abs(claimed - breach_max) > AUDIT_ATOL:
        problems.append(f"manifest breach.max = {claimed:.9f} but the files give {breach_max:.9f}")
    return ReleaseAudit(
        sequence=seq,
        release=str(manifest.get("release", "")),
        records=len(ids),
        groups=n_groups,
        published=int(published_mask.sum()),
        suppressed=int((~published_mask).sum()),
        breach_max=breach_max,
        manifest_breach_max=claimed,
        bound=bound,
        problems=problems,
    )


def _read_groups(path: Path, problems: list[str]) -> list[dict[str, Any]]:
    if not path.exists():
        problems.append(f"{path.name} is missing")
        return []
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _read_assignments(path: Path, problems: list[str]) -> tuple[list[str], np.ndarray]:
    if not path.exists():
        problems.append(f"{path.name} is missing")
        return [], np.zeros(0, dtype=np.int64)
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        ids, groups = [], []
        for row in reader:
            ids.append(row[0])
            groups.append(int(row[1]) if len(row) > 1 and row[1] != "" else -1)
    return ids, np.array(groups, dtype=np.int64)


def _private_record(private: Path, sequence: int) -> dict[str, Any]:
    path = private / f"private-{sequence:04d}.json"
    if not path.exists():
        return {}
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return record


def _check_against_snapshot(
    private_record: dict[str, Any],
    manifest: dict[str, Any],
    groups: list[dict[str, Any]],
    ids: list[str],
    assigned: np.ndarray,
    problems: list[str],
) -> None:
    """Compare each group with its assigned snapshot rows, when the snapshot is at hand."""
    source = private_record.get("source") or manifest.get("source") or {}
    path = Path(source.get("file", "")) if source.get("file") else None
    schema = manifest.get("schema") or {}
    if path is None or not path.is_file() or not schema:
        return
    data = path.read_bytes()
    if hashlib.sha256(data).hexdigest() != source.get("sha256"):
        return
    text = data.decode("utf-8-sig").splitlines()
    delimiter = ";" if text and text[0].count(";") > text[0].count(",") else ","
    reader = csv.reader(text, delimiter=delimiter)
    header = [h.strip() for h in next(reader)]
    if schema.get("id") not in header or schema.get("sensitive") not in header:
        return
    id_col = header.index(schema["id"])
    sens_col = header.index(schema["sensitive"])
    qid_cols = {q: header.index(q) for q in schema["qid"] if q in header}
    rows = {r[id_col].strip(): r for r in reader if r}
    members: dict[int, list[list[str]]] = {}
    for i, g in zip(ids, assigned.tolist(), strict=True):
        if g >= 0 and i in rows:
            members.setdefault(g, []).append(rows[i])
    for g, line in enumerate(groups):
        got = members.get(g, [])
        multiset: dict[str, int] = {}
        for r in got:
            multiset[r[sens_col].strip()] = multiset.get(r[sens_col].strip(), 0) + 1
        if multiset != {k: int(v) for k, v in line.get("sensitive", {}).items()}:
            problems.append(f"group {g}: published sensitive values differ from its assigned rows")
            return
        for q, col in qid_cols.items():
            published = (line.get("qid") or {}).get(q)
            if published is None:
                continue
            for r in got:
                if not _covers(published, r[col].strip()):
                    problems.append(
                        f"group {g}: {q} = {published!r} does not cover an assigned row's value"
                    )
                    return


def _covers(published: Any, value: str) -> bool:
    if isinstance(published, list):
        if len(published) == 2 and all(isinstance(x, int | float) for x in published):
            try:
                return published[0] <= float(value) <= published[1]
            except ValueError:
                return False
        return value in [str(x) for x in published]
    if isinstance(published, int | float):
        try:
            return float(value) == float(published)
        except ValueError:
            return False
    # a string is the value itself or a hierarchy label; a label needs the hierarchy to check
    return True
