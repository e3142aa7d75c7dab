r"""The utility figures of a global-guarantee manifest, recomputed from the files.

``utility`` states, per release (docs/contract.md §4):

* from the published lines alone: ``groups``, ``published`` (real rows: the sizes less the
  virtual members), ``avg_group_size`` (all members / groups), ``max_group_size``,
  ``min_group_size``, ``virtual``;
* with the private assignments (the rows of the snapshot, suppressed ones included):
  ``suppressed``, ``suppression`` (suppressed / rows) and ``discernibility``
  (``sum |G|^2 + suppressed * rows``);
* with the configuration's hierarchies: ``ncp``, the normalized certainty penalty of Xu et al.
  [XWP06] (per published row and QID: an interval's width over the domain's, a label's leaves
  less one over the hierarchy's less one, a list's values less one over the attribute's
  distinct values less one; 0 in ``anatomy`` format), whose domains are the snapshot's (its
  least and greatest number, its distinct values): with the snapshot exactly, without it only
  when no row was suppressed (then every value of the snapshot is in a published group);
* with the snapshot, the assignments and the configuration: ``query_error``,
  ``query_error_median``, ``query_error_trimmed`` and ``queries``
  (:mod:`~stream_release.audit.queries`).

What the files of a release do not allow is listed as not done, never passed: a release with
virtual members (its table also holds register candidates no file lists), a release cut on
shards (its ``ncp`` and query errors are means of the parts', each over its own rows), a
figure this audit does not know. ``elapsed_s`` is a timing of the planner's run, not a claim
about the files.

References
----------
.. [XWP06] J. Xu, W. Wang, J. Pei, X. Wang, B. Shi, A. W.-C. Fu. Utility-Based Anonymization
   Using Local Recoding. KDD 2006.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from stream_release.audit.files import Hierarchies
from stream_release.audit.queries import (
    AuditTable,
    CannotRecompute,
    error_figures,
    query_errors,
)
from stream_release.audit.settings import ConfiguredOutput

FIGURE_RTOL = 1e-9
"""How far a stated float figure may lie from the audit's recomputation, relative to it (at
least 1). The planner sums in another order, and its compiled kernels may reassociate sums
(``fastmath``): about 1e-15 relative on an estimate, so at most about 1e-13 on a query error
(an error is ``|est - act| / act``, ``act >= 1``, estimates below a hundred times the actual
count on real data) and 1e-15 on the NCP. A forged figure is off by far more."""

QUERY_FIGURES = ("query_error", "query_error_median", "query_error_trimmed", "queries")
SIZE_FIGURES = ("groups", "published", "avg_group_size", "max_group_size", "min_group_size")
ROW_FIGURES = ("suppressed", "suppression", "discernibility")
KNOWN = frozenset({*QUERY_FIGURES, *SIZE_FIGURES, *ROW_FIGURES, "ncp", "virtual"})
"""Every utility figure a global-guarantee manifest may state."""


@dataclass
class Undone:
    """What could not be recomputed, by reason, with the releases it concerns."""

    releases: dict[str, list[int]] = field(default_factory=dict)

    def add(self, reason: str, sequence: int) -> None:
        self.releases.setdefault(reason, []).append(sequence)

    def lines(self) -> list[str]:
        """One line per reason, naming its releases (the first ten)."""
        return [
            f"{reason} (releases {shown_releases(sequences)})"
            for reason, sequences in self.releases.items()
        ]


def shown_releases(sequences: list[int]) -> str:
    """Release numbers as a line lists them: the first ten, then ``...``."""
    return ", ".join(map(str, sequences[:10])) + (" ..." if len(sequences) > 10 else "")


@dataclass(frozen=True)
class UtilityInputs:
    """What the audit has besides a release's public lines and manifest."""

    hierarchies: Hierarchies | None
    output: ConfiguredOutput | None
    sharded: bool


def check_utility(
    manifest: dict[str, Any],
    lines: list[dict[str, Any]],
    assigned: NDArray[np.int64] | None,
    virtual: NDArray[np.bool_],
    table: AuditTable | None,
    inputs: UtilityInputs,
    problems: list[str],
    undone: Undone,
) -> None:
    """Recompute the manifest's ``utility`` block (module docstring) and report each figure
    that differs in ``problems``, each that cannot be recomputed in ``undone``.

    ``assigned`` (n,) the group of each assigned id (``None``: no private assignments);
    ``virtual`` (n,) its flags; ``table`` the snapshot's rows in assignment order, coded
    (``None``: no snapshot for the release, or assignments that do not name its ids).
    """
    sequence = int(manifest["sequence"])
    utility = manifest.get("utility")
    if utility is None:  # nothing stated, nothing to recompute
        return
    if not isinstance(utility, dict):
        problems.append(f"manifest utility = {utility!r} is not an object")
        return
    for key in sorted(set(utility) - KNOWN):
        undone.add(f"utility.{key}: a figure this audit does not know", sequence)
    sizes = np.array([int(line["size"]) for line in lines], dtype=np.int64)
    fake = sum(int(line.get("virtual", 0) or 0) for line in lines)
    groups = int(sizes.shape[0])
    found: dict[str, float | int | None] = {
        "groups": groups,
        "published": int(sizes.sum()) - fake,
        "avg_group_size": int(sizes.sum()) / groups if groups else 0.0,
        "max_group_size": int(sizes.max()) if groups else 0,
        "min_group_size": int(sizes.min()) if groups else 0,
    }
    suppressed: int | None = None
    if assigned is not None:
        real = int(np.count_nonzero(~virtual))
        suppressed = real - int(np.count_nonzero((assigned >= 0) & ~virtual))
        found["suppressed"] = suppressed
        found["suppression"] = suppressed / real if real else 0.0
        found["discernibility"] = float(int(sizes @ sizes) + suppressed * real)
    else:
        undone.add(
            "utility.suppressed, suppression and discernibility: they count the suppressed "
            "rows, which only the private assignments list (give --private)",
            sequence,
        )
    ncp = _ncp(manifest, lines, sizes, suppressed, bool(fake), table, inputs, undone)
    if ncp is not None:
        found["ncp"] = ncp
    if any(key in utility for key in QUERY_FIGURES):
        found.update(_queries(manifest, lines, assigned, bool(fake), table, inputs, undone))
    for key, value in found.items():
        if key in utility:
            _compare(problems, key, utility[key], value)


def check_stated_bounds(manifest: dict[str, Any], problems: list[str]) -> None:
    """``breach.bound`` and ``suppressed_set.share_bound``, when stated, are ``1/l`` of the
    manifest's ``l``."""
    bound = 1.0 / float(manifest["l"])
    for block, key in (("breach", "bound"), ("suppressed_set", "share_bound")):
        stated = (manifest.get(block) or {}).get(key)
        if stated is None:
            continue
        if (
            isinstance(stated, bool)
            or not isinstance(stated, int | float)
            or abs(stated - bound) > FIGURE_RTOL * bound
        ):
            problems.append(f"manifest {block}.{key} = {stated!r} but 1/l = {bound!r}")


def _compare(problems: list[str], key: str, stated: object, found: float | int | None) -> None:
    """A stated figure against the recomputed one (:data:`FIGURE_RTOL` for a float)."""
    if found is None or isinstance(stated, bool) or not isinstance(stated, int | float):
        same = stated is None and found is None
    elif isinstance(found, int):
        same = stated == found
    else:
        same = abs(float(stated) - found) <= FIGURE_RTOL * max(1.0, abs(found))
    if not same:
        problems.append(f"manifest utility.{key} = {stated!r} but the files give {found!r}")


def _ncp(
    manifest: dict[str, Any],
    lines: list[dict[str, Any]],
    sizes: NDArray[np.int64],
    suppressed: int | None,
    has_virtual: bool,
    table: AuditTable | None,
    inputs: UtilityInputs,
    undone: Undone,
) -> float | None:
    """The release's NCP, or ``None`` (the reason in ``undone``)."""
    sequence = int(manifest["sequence"])
    if manifest.get("format") == "anatomy":
        return 0.0  # exact QIDs: no generalization
    if inputs.sharded:
        undone.add(
            "utility.ncp of a release cut on shards: the mean of its parts' figures, each "
            "over the values of its own rows",
            sequence,
        )
        return None
    if has_virtual:
        undone.add(
            "utility.ncp of a release with virtual members: its domains hold the register's "
            "candidates, which no file lists",
            sequence,
        )
        return None
    if inputs.hierarchies is None:
        undone.add("utility.ncp: it needs the hierarchies (give --config)", sequence)
        return None
    if table is None and suppressed != 0:
        undone.add(
            "utility.ncp: its domains are the snapshot's and rows were suppressed (or the "
            "assignments are not given), so the lines do not show them (give the snapshots)",
            sequence,
        )
        return None
    names = list((manifest.get("schema") or {}).get("qid") or [])
    try:
        penalty = _penalties(lines, names, table, inputs.hierarchies)
    except CannotRecompute as exc:
        undone.add(f"utility.ncp: {exc}", sequence)
        return None
    if not names or not lines:
        return 0.0
    weights = sizes.astype(np.float64)
    total = float(weights.sum())
    return float(weights @ penalty.sum(axis=1) / (total * len(names))) if total else 0.0


def _penalties(
    lines: list[dict[str, Any]],
    names: list[str],
    table: AuditTable | None,
    hierarchies: Hierarchies,
) -> NDArray[np.float64]:
    """(G, d) each group's penalty on each QID; the domains are ``table``'s, or, without it
    (nothing suppressed), the published values'."""
    penalty = np.zeros((len(lines), len(names)), dtype=np.float64)
    if not lines:  # nothing published: no penalty to weigh
        return penalty
    for j, name in enumerate(names):
        values = [(line.get("qid") or {}).get(name) for line in lines]
        if any(v is None for v in values):
            raise CannotRecompute(f"a group publishes no {name}")
        if name in hierarchies.leaves_of:
            penalty[:, j] = _label_penalties(values, name, hierarchies)
        elif all(_is_numeric(v) for v in values):
            penalty[:, j] = _interval_penalties(values, name, j, table)
        else:
            penalty[:, j] = _list_penalties(values, j, table)
    return penalty


def _label_penalties(values: list[Any], name: str, hierarchies: Hierarchies) -> list[float]:
    """Each group's penalty on a QID published as labels of its hierarchy: the label's leaves
    less one over the hierarchy's less one."""
    leaves = hierarchies.leaves_of[name]
    every = len(hierarchies.order[name])
    out = []
    for value in values:
        under = leaves.get(str(value))
        if under is None:
            raise CannotRecompute(f"{name} = {value!r} is no label of its hierarchy")
        out.append((len(under) - 1) / (every - 1) if every > 1 else 0.0)
    return out


def _interval_penalties(
    values: list[Any], name: str, j: int, table: AuditTable | None
) -> NDArray[np.float64]:
    """Each group's penalty on the ``j``-th QID, published as numbers or intervals: the
    width over the domain's (``table``'s, else the published values')."""
    ends = np.array([v if isinstance(v, list) else [v, v] for v in values], dtype=np.float64)
    if table is not None and table.kinds[j] == "numeric":
        low, high = float(table.domains[j][0]), float(table.domains[j][-1])
    elif table is not None:
        raise CannotRecompute(f"{name} is published as numbers but is not numeric")
    else:
        low, high = float(ends[:, 0].min()), float(ends[:, 1].max())
    if high > low:
        return (ends[:, 1] - ends[:, 0]) / (high - low)
    return np.zeros(len(values), dtype=np.float64)


def _list_penalties(values: list[Any], j: int, table: AuditTable | None) -> list[float]:
    """Each group's penalty on the ``j``-th QID, published as values or lists of them: the
    values less one over the attribute's distinct values (``table``'s, else the published
    ones) less one."""
    listed = [v if isinstance(v, list) else [v] for v in values]
    distinct = (
        int(table.sizes[j])
        if table is not None
        else len({str(x) for value in listed for x in value})
    )
    if distinct > 1:
        return [(len(set(map(str, v))) - 1) / (distinct - 1) for v in listed]
    return [0.0] * len(listed)


def _is_numeric(value: object) -> bool:
    def number(x: object) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool)

    if isinstance(value, list):
        return len(value) == 2 and all(number(x) for x in value)
    return number(value)


def _queries(
    manifest: dict[str, Any],
    lines: list[dict[str, Any]],
    assigned: NDArray[np.int64] | None,
    has_virtual: bool,
    table: AuditTable | None,
    inputs: UtilityInputs,
    undone: Undone,
) -> dict[str, float | int | None]:
    """The query figures (:data:`QUERY_FIGURES`), or none (the reason in ``undone``)."""
    sequence = int(manifest["sequence"])
    figures = "utility.query_error, query_error_median, query_error_trimmed and queries"
    if inputs.sharded:
        reason = "of a release cut on shards: means of its parts', each over its own rows"
    elif has_virtual:
        reason = "of a release with virtual members: its table holds the register's candidates"
    elif inputs.output is None or inputs.hierarchies is None:
        reason = "need the query settings and the hierarchies (give --config)"
    elif table is None or assigned is None:
        reason = (
            "need the snapshot's rows (give the snapshots; the worker's assignments name "
            "pseudonyms, which no snapshot holds)"
        )
    else:
        try:
            errors = query_errors(
                table,
                lines,
                assigned,
                inputs.hierarchies,
                fmt=str(manifest.get("format", "generalized")),
                queries=inputs.output.queries,
                seed=inputs.output.query_seed,
                sequence=sequence,
            )
        except CannotRecompute as exc:
            reason = f"cannot be recomputed: {exc}"
        else:
            return error_figures(errors)
    undone.add(f"{figures} {reason}", sequence)
    return {}
